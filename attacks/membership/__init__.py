"""Membership-inference attacks: threshold, shadow-model, LiRA and RMIA.

Every attack scores a set of sample ids against a target model and returns a
:class:`dpaudit.results.MembershipResult` whose scores follow one convention: higher = more
likely a member (``docs/attacks/membership.md`` §1).

* **Threshold attacks** use the target's output on the sample alone:
  ``loss`` (Yeom et al. 2018, §3.2: score = −cross-entropy), ``confidence`` (Salem et al. 2019,
  §V: the top softmax probability, scored as its logarithm, which orders identically but keeps
  resolution near 1), ``entropy`` (Salem et al. 2019: score = −H(p)) and ``modified-entropy``
  (Song & Mittal 2021, §3.1, Eq. 4: score = −Mentr(p, y) with
  Mentr = −(1 − p_y) log p_y − Σ_{i≠y} p_i log(1 − p_i)).
* **Shadow models** (Shokri et al. 2017, §V–VI): shadows trained on population data with known
  membership; one attack classifier per class (scikit-learn gradient-boosted trees) on the
  *sorted* log-probability vectors, labelled IN/OUT, applied to the target's outputs.
* **LiRA** (Carlini et al. 2022, §IV): the logit-scaled confidence
  φ = log(p_y / (1 − p_y)) computed from logits as z_y − log Σ_{y'≠y} e^{z_{y'}} (never from
  rounded probabilities); online: per-example Gaussians fitted to φ of IN and OUT shadows,
  score = log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²); offline: OUT shadows only, the
  one-sided score −log Pr[Z > φ], Z ~ N(μ_out, σ_out²) (§IV-C; the same order as
  1 − Pr[Z > φ], without its rounding to 1 for strong members). Means are per-example medians; the
  variance is per-example, or global (pooled residuals) below 64 shadows (§IV-B, "fixed
  variance"). Several query augmentations (mirror, 1-pixel shifts) are scored independently
  and their log-likelihood ratios averaged (§V-C).
* **RMIA** (Zarifzadeh, Liu & Shokri 2024, §3): LR(x) = Pr(x|θ)/Pr(x), Pr(x|θ) the target's
  softmax probability of the true label (averaged over the queries), Pr(x) the reference
  models' ½(mean IN + mean OUT) (online) or the offline approximation
  Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)) with a tuned by attacking one reference model with the
  others (§3.3 / App. B); score = fraction of population samples z with
  LR(x)/LR(z) > γ (γ = 1 by default). Everything is computed in the log domain.

Every attack registers itself, in its own module of this package, in :data:`MEMBERSHIP_ATTACKS`
as a :class:`MembershipAttackSpec`: its summary, a frozen config dataclass whose fields declare
their command-line flags (:func:`dpaudit.options.option`), the shadow pool it needs and how many
models of it, and one call ``run(context, config) -> MembershipResult`` (:class:`MembershipRun`).
The :class:`MembershipContext` holds what every attack reads — the target's and the shadows'
logits on the queried ids and pools, labels, true membership, seed — computed once per run by
:func:`build_context`. The command line, the application run (:mod:`dpaudit.app.runs.membership`),
``compare``'s grid and the contract suite iterate the registry; an attack is added by one module
that registers itself.

The package's rooms: :mod:`~attacks.membership.scores` (pure NumPy scores),
:mod:`~attacks.membership.spec` (spec, context, registry), one module per attack family
(``threshold``, ``shokri``, ``lira``, ``rmia``), :mod:`~attacks.membership.queries` (ids and
augmentations), :mod:`~attacks.membership.pools` (shadow pools planned, trained, evaluated),
:mod:`~attacks.membership.run` (running them), :mod:`~attacks.membership.shadows` (shadow-model
training) and :mod:`~attacks.membership.pate` (membership against a PATE aggregator).

Shadow and reference models come from :mod:`attacks.membership.shadows`: trained as independent jobs
through an executor and cached in the run store, shared by all attacks of a run (LiRA online
and RMIA online use the ``online`` pool, the shadow attack, LiRA offline and RMIA offline the
``offline`` pool; :func:`plan_pools` sizes each pool by the largest count its attacks ask for). All models — target and
shadows — are evaluated in inference mode
(``model.eval()``), the point Carlini et al. (2022) stress for BatchNorm models.
"""

from __future__ import annotations

from attacks.membership.pools import PoolPlan, build_context, plan_pools, train_pools
from attacks.membership.queries import augmentations_for, check_query, choose_augmentations, query_ids
from attacks.membership.run import membership_attack, run_attacks, run_membership_attacks
from attacks.membership.scores import (
    lira_offline_scores,
    lira_online_scores,
    lira_phi,
    rmia_scores,
    shokri_scores,
    threshold_scores,
    tune_rmia_offline_a,
)
from attacks.membership.shadows import ShadowBatch, ShadowRecipe, sgd_batch
from attacks.membership.spec import (
    MEMBERSHIP_ATTACKS,
    MembershipAttackSpec,
    MembershipContext,
    MembershipRun,
    ShadowOutputs,
    default_configs,
    expand_attacks,
)

# The built-in attacks register themselves on import, in this order: the order of the CLI's
# choices, of ``--attack all`` and of a run's results.
# isort: off
from attacks.membership.threshold import ThresholdConfig
from attacks.membership.shokri import ShokriConfig
from attacks.membership.lira import LiRAConfig, sample_vulnerability
from attacks.membership.rmia import RMIAConfig, RMIAOfflineConfig
# isort: on

__all__ = [
    "MEMBERSHIP_ATTACKS",
    "MembershipAttackSpec",
    "MembershipContext",
    "MembershipRun",
    "ShadowOutputs",
    "ShadowRecipe",
    "ShadowBatch",
    "sgd_batch",
    "PoolPlan",
    "ThresholdConfig",
    "ShokriConfig",
    "LiRAConfig",
    "RMIAConfig",
    "RMIAOfflineConfig",
    "expand_attacks",
    "default_configs",
    "plan_pools",
    "train_pools",
    "build_context",
    "check_query",
    "choose_augmentations",
    "run_attacks",
    "sample_vulnerability",
    "augmentations_for",
    "query_ids",
    "threshold_scores",
    "lira_phi",
    "lira_online_scores",
    "lira_offline_scores",
    "rmia_scores",
    "tune_rmia_offline_a",
    "shokri_scores",
    "run_membership_attacks",
    "membership_attack",
]
