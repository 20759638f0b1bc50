"""White-box evasion attacks: FGSM, I-FGSM (BIM), PGD and MIM, in L∞ and L2.

These attacks measure *conventional* robustness: how much accuracy a model keeps when an
attacker who knows its weights may move every input by at most a radius r (in L∞ or L2).
Reports set the robust accuracy they measure beside the *certified* accuracy of PixelDP /
HGM models (``docs/attacks/evasion.md`` §3).

Every attack registers itself in :data:`EVASION_ATTACKS` as an :class:`EvasionAttackSpec`: its
summary, its default :class:`EvasionConfig` and the routine that runs it (:class:`EvasionRun`).
All four built-in attacks are configurations of one projected-gradient routine
(:mod:`attacks.evasion.gradient`); :mod:`attacks.evasion.run` runs any of them at many radii. With loss L =
cross-entropy of the true label, step a = r · ``step_ratio`` and Π the
projection onto the ball of radius r around x intersected with the input range:

* **FGSM** — Goodfellow, Shlens & Szegedy (2015), "Explaining and Harnessing Adversarial
  Examples", §4: one step x' = clip(x + r · sign(∇ₓL)).
* **I-FGSM / BIM** — Kurakin, Goodfellow & Bengio (2016), "Adversarial Examples in the
  Physical World", §2.2: t steps x ← Π(x + a · sign(∇ₓL)).
* **PGD** — Madry et al. (2018), "Towards Deep Learning Models Resistant to Adversarial
  Attacks", §2.1: I-FGSM from a uniformly random point of the ball, optionally restarted,
  keeping per example the worst case over restarts.
* **MIM** — Dong et al. (2018), "Boosting Adversarial Attacks with Momentum", Alg. 1:
  g ← μ g + ∇ₓL / ‖∇ₓL‖₁, x ← Π(x + a · sign(g)), μ = 1.

The L2 variants replace sign(·) by division by the per-example L2 norm and project onto the
L2 ball (Madry et al. 2018; Dong et al. 2018 give MIM's L2 form). FGSM, I-FGSM and MIM
default to the evaluation of Phan et al. (2019, "Heterogeneous Gaussian Mechanism", §6) on
MNIST: 10 steps of a = r/10. PGD's random start costs part of that budget (a start at the far
side of the ball cannot cross it in 10 steps of r/10), which made it weaker than FGSM at small
radii, so PGD defaults to Madry et al.'s a = 2.5 · r / t (``step_ratio=0.25``); the authors'
setting is ``evasion_config("pgd", step_ratio=0.1)``.

**Randomized models.** Against a model with an active noise layer (PixelDP / HGM,
:func:`dpaudit.robustness.noise.is_randomized`) the gradient of one noise draw is a poor direction and
robustness would be overstated (Athalye, Carlini & Wagner 2018, "Obfuscated Gradients Give
a False Sense of Security", expectation over transformation). The attack then uses expectation over transformation: each
step's gradient is the mean
over ``eot_samples`` draws, and a prediction is the majority vote of ``eval_samples`` draws.
A misclassification counts only when fresh draws confirm it (:func:`_confirm_fooled`), so a
break near a tie of the votes is evidence, not Monte Carlo noise.

**Many radii in one pass.** :func:`run_evasion` attacks all K radii at once: every example is
repeated K times along the batch dimension, each copy with its own radius, so one
forward/backward pass serves every radius. Success at radius r_k is the OR over the radii
≤ r_k (an input found inside a smaller ball lies inside every larger one), which makes robust
accuracy non-increasing in the radius by construction rather than by luck of the optimiser.
"""

from __future__ import annotations

from attacks.evasion.run import adversarial_examples, run_evasion
from attacks.evasion.spec import (
    CONFIRM_CONFIDENCE,
    CONFIRM_SAMPLES,
    EVASION_ATTACKS,
    EvasionAttackSpec,
    EvasionConfig,
    EvasionRun,
    evasion_config,
)

# The built-in attacks register themselves on import.
import attacks.evasion.gradient  # noqa: F401  isort: skip

__all__ = [
    "CONFIRM_CONFIDENCE",
    "CONFIRM_SAMPLES",
    "EVASION_ATTACKS",
    "EvasionAttackSpec",
    "EvasionConfig",
    "EvasionRun",
    "adversarial_examples",
    "evasion_config",
    "run_evasion",
]
