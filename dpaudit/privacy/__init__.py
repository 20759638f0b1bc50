"""Privacy mathematics: claims, accountants (ε upper bounds), Gaussian calibrations and audit statistics (ε lower bounds).

Torch-free. Abadi et al. (2016) for the moments accountant; Mironov (2017) for RDP; Balle &
Wang (2018) and Phan et al. (2019) for the Gaussian calibrations; audit.md for the bounds.
"""
