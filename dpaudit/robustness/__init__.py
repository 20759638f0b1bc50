"""Certified robustness: the noise layer (Lecuyer et al. 2019; Phan et al. 2019), Monte Carlo
estimation of the noisy scores, and the certification mathematics (PixelDP Prop. 1, HGM Eq. 10,
randomized smoothing of Cohen et al. 2019)."""
