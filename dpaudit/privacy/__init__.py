"""Privacy mathematics: claims, accountants (ε upper bounds), Gaussian calibrations, PATE analysis and audit statistics
(ε lower bounds).

Torch-free. Abadi et al. (2016) for the moments accountant; Mironov (2017) for RDP; Balle &
Wang (2018) and Phan et al. (2019) for the Gaussian calibrations; Papernot et al. (2017, 2018)
for the PATE analysis (:mod:`dpaudit.privacy.pate`); docs/audits/statistics.md for the bounds.
"""
