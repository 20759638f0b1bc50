"""Certified defenses with a noise layer: PixelDP, AGM, HGM and Secure-SGD.

The package's rooms: :mod:`.configs` (the robustness parameters and each defense's config),
:mod:`.schedule` (installing the noise layer and keeping it calibrated), :mod:`.training`
(the redistribution vector and training with the layer), :mod:`.authors` (the authors'-code
options), and the defenses, each registering itself: :mod:`.pixeldp` (PixelDP, AGM, HGM) and
:mod:`.secure_sgd`.

All four share one mechanism (:class:`dpaudit.robustness.noise.NoiseLayer`): Gaussian noise added to the
output of the network's first layer, calibrated so that the randomized scores are
(ε_r, δ_r)-DP with respect to input changes of size ≤ L (the attack norm bound). What differs
is the calibration and the shape of the noise:

* **PixelDP** (Lecuyer et al. 2019, §3.2–3.3): the classical multiplier
  c = √(2 ln(1.25/δ_r))/ε_r (so ε_r ≤ 1), isotropic noise σ = c·L·Δ with the first layer's
  sensitivity Δ kept ≤ 1 by projection after every step (their Parseval / normalised
  columns), noise ramped up over the first steps of training.
* **AGM**: the same with the analytic Gaussian calibration (Balle & Wang 2018, Thm 8).
* **HGM** (Phan et al. 2019, Theorems 2–3, Eq. 6–8): the extended multiplier (any ε_r > 0)
  and heterogeneous noise N(0, σ² r_k) with a redistribution vector r (Σ r = K) computed from
  the forward derivative of a pre-trained model (Eq. 7, inflation rate β); the sensitivity
  is the r-weighted Δ_r = ‖diag(r)^{-1/2} W‖ (:func:`dpaudit.robustness.noise.layer_sensitivity`).
* **Secure-SGD** (Phan et al. 2019, Algorithm 1): the HGM noise layer trained with DP-SGD
  (:func:`defenses.dpsgd.training.train_dpsgd`), so the record carries both the DP claim for the
  training data and the robustness parameters (ε_r, δ_r, L). Its defaults adapt to the model
  and input (both public): the sensitivity control by the first layer's kind
  (:func:`resolve_sensitivity_control`), L by the input size
  (:meth:`RobustnessConfig.resolved_attack_norm_bound`); the record stores the options as
  given, the resolved L in its certification spec and the control in ``metrics``.

The mathematics of the paper, not the quirks of its TensorFlow code (``docs/defenses/noise-layer.md`` §2):
the noise std is σ√r_k (not σ r_k); Δ_r is computed exactly for L2 attacks (not estimated from
the reshaped kernel); noise is drawn afresh at every forward pass; DP-SGD clips per example.
For Secure-SGD the pre-trained model behind r is trained on the split's *population* (ids the
DP-trained model never sees), because r shapes the training noise and so the released
parameters: computing it from the members would leak outside the DP claim.

**The authors' code as explicit options.** To reproduce the published numbers and see which
of them the mathematics supports, HGM and Secure-SGD take six ``authors_*`` options, all off
by default (:class:`AuthorsCodeOptions`; :data:`AUTHORS_QUIRKS` says what each does and
which guarantee it voids). A record trained with any of them on lists them under
``config["authors_quirks"]`` and in ``config["certification"]``, and its claim's description
names them, saying "NOT a valid guarantee" where the DP claim no longer holds (batch
clipping). ``dpaudit certify`` measures Δ_r on the released weights and draws fresh noise,
so its certificate stays the mathematics' verdict on a quirky model; the mixed δ (f) applies
only where it is passed explicitly (:class:`dpaudit.robustness.certification.AuthorsMixedDelta`).

The certificate never rests on training-time estimates: the final first layer is projected
with its exact sensitivity, and ``dpaudit certify`` measures Δ_r again on the loaded
model.
"""
