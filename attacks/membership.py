"""Membership-inference attacks: threshold, shadow-model, LiRA and RMIA.

Every attack scores a set of sample ids against a target model and returns a
:class:`dpaudit.results.MembershipResult` whose scores follow one convention: higher = more
likely a member (``reference/attacks.md`` §1).

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

Every attack is registered in :data:`MEMBERSHIP_ATTACKS` as a :class:`MembershipAttackSpec`: its
summary, a frozen config dataclass whose fields declare their command-line flags
(:func:`dpaudit.options.option`), the shadow pool it needs and how many models of it, and one
call ``run(context, config) -> MembershipResult``. The :class:`MembershipContext` holds what every
attack reads — the target's and the shadows' logits on the queried ids and pools, labels, true
membership, seed — computed once per run by :func:`build_context`. The command line, the
application run (:mod:`dpaudit.app.runs.membership`) and the contract suite read the registry;
an attack is added by one registry entry.

Shadow and reference models come from :mod:`attacks.shadows`: trained as independent jobs
through an executor and cached in the run store, shared by all attacks of a run (LiRA online
and RMIA online use the ``online`` pool, the shadow attack, LiRA offline and RMIA offline the
``offline`` pool; :func:`plan_pools` sizes each pool by the largest count its attacks ask for). All models — target and shadows — are evaluated in inference mode
(``model.eval()``), the point Carlini et al. (2022) stress for BatchNorm models.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import special, stats
from torch import nn

from attacks.shadows import POOL_KINDS, ShadowRun, ShadowSpec, ShadowTraining, ensure_shadows, plan_shadows
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle
from dpaudit.executors.jobs import Executor
from dpaudit.options import SizeLimit, option, option_specs
from dpaudit.progress import Progress
from dpaudit.results import MembershipResult
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import derive_seed, numpy_rng
from dpaudit.training import predict_logits

__all__ = [
    "MEMBERSHIP_ATTACKS",
    "MembershipAttackSpec",
    "MembershipContext",
    "ShadowOutputs",
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

THRESHOLD_KINDS: tuple[str, ...] = ("loss", "confidence", "entropy", "modified-entropy")
#: Carlini et al. (2022, §IV-B): per-example variances need many shadows; below this, one global variance.
GLOBAL_VARIANCE_BELOW = 64
#: Models in a shadow pool when no attack using it states a count.
DEFAULT_NUM_SHADOWS = 16
#: RMIA's offline a when it cannot be tuned (fewer than 2 reference models).
DEFAULT_OFFLINE_A = 0.3
_A_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)
_MIN_STD = 1e-6  # keeps Gaussian log-densities finite when all shadows agree exactly


# ----------------------------------------------------------------------------- signals
def _lse_except(logits: np.ndarray, index: np.ndarray) -> np.ndarray:
    """log Σ_{j ≠ index} exp(logits_j) along the last axis."""
    masked = logits.copy()
    np.put_along_axis(masked, index[..., None], -np.inf, axis=-1)
    return special.logsumexp(masked, axis=-1)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    """log-softmax whose top entry stays accurate for confident predictions.

    The usual ``z − logsumexp(z)`` rounds log p_top to exactly 0 once p_top > 1 − 1e-16, so
    every confidently-classified sample would tie at the top of the loss, confidence and
    entropy scores — precisely where low-FPR decisions are made. log p_top is recomputed as
    −log(1 + e^{−φ}) with φ = z_top − log Σ_{j≠top} e^{z_j}, exact for any margin.
    """
    logits = np.asarray(logits, dtype=np.float64)
    out = logits - special.logsumexp(logits, axis=-1, keepdims=True)
    top = np.argmax(logits, axis=-1)
    margin = np.take_along_axis(logits, top[..., None], axis=-1)[..., 0] - _lse_except(logits, top)
    np.put_along_axis(out, top[..., None], -np.logaddexp(0.0, -margin)[..., None], axis=-1)
    return out


def _log1m_softmax(logits: np.ndarray) -> np.ndarray:
    """log(1 − p_i) for every class, accurate even when p_i rounds to 1.

    For all classes but the top one p_i ≤ ½, where log1p(−p_i) is accurate; for the top class
    1 − p_top = Σ_{j≠top} p_j, computed as a log-sum-exp of the other logits.
    """
    logp = _log_softmax(logits)
    with np.errstate(divide="ignore"):  # log1p(−1) at the top class; replaced just below
        out = np.log1p(-np.exp(logp))
    top = np.argmax(logits, axis=-1)
    lse = special.logsumexp(logits, axis=-1)
    np.put_along_axis(out, top[..., None], (_lse_except(logits, top) - lse)[..., None], axis=-1)
    return out


def lira_phi(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """LiRA's logit-scaled confidence φ = log(p_y / (1 − p_y)) (Carlini et al. 2022, §IV-A).

    Computed as z_y − log Σ_{y'≠y} e^{z_{y'}}, exact and stable for any logits (the form
    log p − log(1 − p) on probabilities is infinite once p rounds to 1).

    Args:
        logits: ``(n, C)`` or ``(n, q, C)`` (q queries per example).
        labels: ``(n,)`` true classes.

    Returns:
        φ with the shape of ``logits`` minus its last axis.
    """
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    idx = np.broadcast_to(labels.reshape(labels.shape + (1,) * (logits.ndim - 1 - labels.ndim)), logits.shape[:-1])
    z_y = np.take_along_axis(logits, idx[..., None], axis=-1)[..., 0]
    return z_y - _lse_except(logits, idx)


def threshold_scores(logits: np.ndarray, labels: np.ndarray, *, kind: str) -> np.ndarray:
    """Scores of a threshold attack from the target's logits (higher = member).

    Args:
        logits: ``(n, C)`` logits of the target.
        labels: ``(n,)`` true classes.
        kind: ``loss`` (−CE; Yeom et al. 2018), ``confidence`` (log max p; Salem et al. 2019),
            ``entropy`` (−H(p); Salem et al. 2019) or ``modified-entropy`` (−Mentr; Song &
            Mittal 2021, Eq. 4).

    Returns:
        ``(n,)`` float64 scores.

    Raises:
        ValueError: unknown ``kind`` or mismatched shapes.
    """
    kind = v.choice("kind", kind, THRESHOLD_KINDS)
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or labels.shape != (logits.shape[0],):
        raise v.invalid("logits", f"logits must be (n, C) and labels (n,), got {logits.shape} and {labels.shape}")
    logp = _log_softmax(logits)
    if kind == "loss":
        return np.take_along_axis(logp, labels[:, None], axis=1)[:, 0]
    if kind == "confidence":
        return logp.max(axis=1)
    p = np.exp(logp)
    if kind == "entropy":
        return np.sum(p * logp, axis=1)
    log1m = _log1m_softmax(logits)
    onehot = np.zeros_like(p, dtype=bool)
    np.put_along_axis(onehot, labels[:, None], True, axis=1)
    p_y = p[onehot]
    mentr = -(1.0 - p_y) * logp[onehot] - np.sum(np.where(onehot, 0.0, p * log1m), axis=1)
    return -mentr


# ----------------------------------------------------------------------------- LiRA
def _masked_median(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Median over axis 0 of ``values`` (k, n, q) where ``mask`` (k, n); NaN where none."""
    with np.errstate(all="ignore"), _quiet():
        return np.nanmedian(np.where(mask[..., None], values, np.nan), axis=0)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silences NumPy's all-NaN-slice warnings (the callers handle empty slices)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _fit(values: np.ndarray, mask: np.ndarray, *, global_variance: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-example means (medians) and standard deviations (n, q) over the masked models."""
    mu = _masked_median(values, mask)
    resid = np.where(mask[..., None], values - mu[None], np.nan)
    with _quiet():
        if global_variance:
            sd = np.broadcast_to(np.sqrt(np.nanmean(resid**2, axis=(0, 1))), mu.shape).copy()
        else:
            sd = np.sqrt(np.nanmean(resid**2, axis=0))
    return mu, sd


def _fill_missing(mu: np.ndarray, sd: np.ndarray, other_mu: np.ndarray, shift: np.ndarray) -> None:
    """Examples with no IN (or OUT) model borrow the other side's mean plus the typical gap."""
    missing = np.isnan(mu)
    if missing.any():
        mu[missing] = (other_mu + shift[None, :])[missing]
    with _quiet():
        fallback = np.nanmedian(sd, axis=0)
    bad = np.isnan(sd)
    if bad.any():
        sd[bad] = np.broadcast_to(fallback, sd.shape)[bad]


def lira_online_scores(target_phi: np.ndarray, shadow_phi: np.ndarray, keep: np.ndarray, *, global_variance: bool | None = None) -> np.ndarray:
    """Online LiRA (Carlini et al. 2022, §IV-B, Algorithm 1).

    Args:
        target_phi: ``(n, q)`` φ of the target on each example and query.
        shadow_phi: ``(k, n, q)`` φ of each shadow model.
        keep: ``(k, n)`` bool, True where the shadow trained on the example (IN).
        global_variance: one variance for all examples; ``None`` → automatically when
            k < 64 (§IV-B).

    Returns:
        ``(n,)`` mean over queries of log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²).

    Raises:
        ValueError: shapes disagree, or no example has both IN and OUT shadows.
    """
    target_phi, shadow_phi, keep = _lira_inputs(target_phi, shadow_phi, keep)
    k = shadow_phi.shape[0]
    glob = k < GLOBAL_VARIANCE_BELOW if global_variance is None else bool(global_variance)
    mu_in, sd_in = _fit(shadow_phi, keep, global_variance=glob)
    mu_out, sd_out = _fit(shadow_phi, ~keep, global_variance=glob)
    both = ~np.isnan(mu_in).any(axis=1) & ~np.isnan(mu_out).any(axis=1)
    if not both.any():
        raise v.invalid("num_shadows", f"online LiRA needs examples that are IN for some shadows and OUT for others; got {k} shadow model(s) — use at least 2")
    gap = np.median((mu_in - mu_out)[both], axis=0)
    _fill_missing(mu_in, sd_in, mu_out, gap)
    _fill_missing(mu_out, sd_out, mu_in, -gap)
    sd_in, sd_out = np.maximum(sd_in, _MIN_STD), np.maximum(sd_out, _MIN_STD)
    llr = stats.norm.logpdf(target_phi, mu_in, sd_in) - stats.norm.logpdf(target_phi, mu_out, sd_out)
    return llr.mean(axis=1)


def lira_offline_scores(target_phi: np.ndarray, shadow_phi: np.ndarray, *, global_variance: bool | None = None) -> np.ndarray:
    """Offline LiRA (Carlini et al. 2022, §IV-C): a one-sided test against OUT shadows only.

    Args:
        target_phi: ``(n, q)`` φ of the target.
        shadow_phi: ``(k, n, q)`` φ of OUT shadows (none trained on these examples).
        global_variance: as in :func:`lira_online_scores`.

    Returns:
        ``(n,)`` mean over queries of −log Pr[Z > φ], Z ~ N(μ_out, σ_out²): the one-sided
        test of §IV-C (for one query the same order as 1 − Pr[Z > φ]), in a form that does
        not saturate for large φ. Larger φ than the OUT models give = member.

    Raises:
        ValueError: shapes disagree or k < 1 (k = 1 needs ``global_variance``).
    """
    keep = np.zeros(np.asarray(shadow_phi).shape[:2], dtype=bool)
    target_phi, shadow_phi, keep = _lira_inputs(target_phi, shadow_phi, keep)
    k = shadow_phi.shape[0]
    glob = k < GLOBAL_VARIANCE_BELOW if global_variance is None else bool(global_variance)
    if k < 2 and not glob:
        raise v.invalid("num_shadows", "offline LiRA with per-example variances needs at least 2 shadow models")
    if k < 2:
        mu = shadow_phi[0]
        sd = np.full_like(mu, np.std(target_phi - mu))  # one model: the spread of its disagreement with the target
    else:
        mu, sd = _fit(shadow_phi, ~keep, global_variance=glob)
    sd = np.maximum(sd, _MIN_STD)
    # −log Pr[Z > φ] orders samples exactly as 1 − Pr[Z > φ] does, but log Φ(·) rounds to 0
    # for every φ a few σ above the OUT mean, tying the strongest members at the top.
    return -stats.norm.logsf((target_phi - mu) / sd).mean(axis=1)


def _lira_inputs(target_phi: Any, shadow_phi: Any, keep: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.asarray(target_phi, dtype=np.float64)
    s = np.asarray(shadow_phi, dtype=np.float64)
    kp = np.asarray(keep, dtype=bool)
    if t.ndim == 1:
        t = t[:, None]
    if s.ndim == 2:
        s = s[..., None]
    if s.ndim != 3 or s.shape[1:] != t.shape or kp.shape != s.shape[:2]:
        raise v.invalid("shadow_phi", f"shadow_phi must be (k, n, q) matching target_phi (n, q) and keep (k, n); got {s.shape}, {t.shape}, {kp.shape}")
    if s.shape[0] < 1:
        raise v.invalid("shadow_phi", "shadow_phi must hold at least one shadow model")
    return t, s, kp


# ----------------------------------------------------------------------------- RMIA
def _log_mean_exp(logp: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """log of the mean over axis 0 of exp(logp) (k, n) where ``mask``; NaN where empty."""
    if mask is None:
        return special.logsumexp(logp, axis=0) - np.log(logp.shape[0])
    count = mask.sum(axis=0)
    with np.errstate(divide="ignore"):
        out = special.logsumexp(np.where(mask, logp, -np.inf), axis=0) - np.log(np.maximum(count, 1))
    return np.where(count > 0, out, np.nan)


def _rmia_log_px_online(ref_logp: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """log Pr(x) = log ½(mean_IN + mean_OUT) over reference models (all refs where one side is empty)."""
    everything = _log_mean_exp(ref_logp, None)
    if keep is None:
        return everything
    log_in, log_out = _log_mean_exp(ref_logp, keep), _log_mean_exp(ref_logp, ~keep)
    ok = ~(np.isnan(log_in) | np.isnan(log_out))
    both = np.logaddexp(np.where(ok, log_in, 0.0), np.where(ok, log_out, 0.0)) - np.log(2.0)
    return np.where(ok, both, everything)


def _rmia_log_px_offline(ref_logp: np.ndarray, a: float) -> np.ndarray:
    """log Pr(x) = log ½((1 + a)·Pr_OUT(x) + (1 − a)) (Zarifzadeh et al. 2024, §3, offline)."""
    log_out = _log_mean_exp(ref_logp, None)
    if a >= 1.0:
        return log_out
    return np.logaddexp(np.log1p(a) + log_out, np.log1p(-a)) - np.log(2.0)


def rmia_scores(
    *,
    target_logp_x: np.ndarray,
    ref_logp_x: np.ndarray,
    target_logp_z: np.ndarray,
    ref_logp_z: np.ndarray,
    keep_x: np.ndarray | None = None,
    keep_z: np.ndarray | None = None,
    offline_a: float | None = None,
    gamma: float = 1.0,
    tie_break: bool = True,
) -> np.ndarray:
    """RMIA scores (Zarifzadeh, Liu & Shokri 2024, §3, Eq. 3–4), in the log domain.

    Args:
        target_logp_x: ``(n,)`` log Pr(x|θ) — log of the target's true-class probability.
        ref_logp_x: ``(k, n)`` the same for each reference model.
        target_logp_z: ``(m,)`` log Pr(z|θ) on population samples z.
        ref_logp_z: ``(k, m)`` the reference models on z.
        keep_x: ``(k, n)`` IN mask of the references on x (online); ``None`` = offline.
        keep_z: ``(k, m)`` IN mask on z; ``None`` averages all references.
        offline_a: a of the offline approximation (required when ``keep_x`` is None).
        gamma: the likelihood-ratio threshold γ > 0.
        tie_break: add a fraction below 1/m that orders samples with the same count by
            LR(x) itself. The count is a non-decreasing function of LR(x), so this never
            reorders samples with different counts (``floor(score·m)/m`` is the paper's
            score); it only resolves the ties at count = m — the strongest candidates,
            where low-FPR decisions are made — that a finite z sample creates.

    Returns:
        ``(n,)`` fraction of z with LR(x)/LR(z) > γ (plus the tie-break).

    Raises:
        ValueError: shapes disagree, ``gamma`` ≤ 0, or ``offline_a`` missing / outside [0, 1].
    """
    gamma = v.positive("gamma", gamma)
    tx, rx = np.asarray(target_logp_x, dtype=np.float64), np.asarray(ref_logp_x, dtype=np.float64)
    tz, rz = np.asarray(target_logp_z, dtype=np.float64), np.asarray(ref_logp_z, dtype=np.float64)
    if rx.ndim != 2 or rx.shape[1:] != tx.shape or rz.ndim != 2 or rz.shape[1:] != tz.shape or rx.shape[0] != rz.shape[0]:
        raise ValueError(f"reference and target shapes disagree: ref_logp_x {rx.shape}, target_logp_x {tx.shape}, ref_logp_z {rz.shape}, target_logp_z {tz.shape}")
    if tz.size == 0:
        raise v.invalid("target_logp_z", "target_logp_z must hold at least one population sample z")
    if keep_x is None:
        if offline_a is None:
            raise v.invalid("offline_a", "offline_a is required for offline RMIA (keep_x=None)")
        a = v.real("offline_a", offline_a)
        if not 0.0 <= a <= 1.0:
            raise v.invalid("offline_a", f"offline_a must lie in [0, 1], got {offline_a!r}")
        log_px = _rmia_log_px_offline(rx, a)
    else:
        log_px = _rmia_log_px_online(rx, np.asarray(keep_x, dtype=bool))
    log_pz = _rmia_log_px_online(rz, None if keep_z is None else np.asarray(keep_z, dtype=bool))
    log_lr_x = tx - log_px
    log_lr_z = np.sort(tz - log_pz)
    # LR(x)/LR(z) > γ  ⇔  log LR(z) < log LR(x) − log γ: count with one sorted search.
    count = np.searchsorted(log_lr_z, log_lr_x - np.log(gamma), side="left").astype(np.float64)
    if tie_break:
        # arctan maps log LR(x) monotonically into (−½, ½); the result stays strictly below count + 1.
        count += 0.5 + np.arctan(log_lr_x - np.log(gamma)) / np.pi * (1 - 1e-9)
    return count / log_lr_z.size


def tune_rmia_offline_a(
    *,
    ref_logp: np.ndarray,
    keep: np.ndarray,
    z_index: np.ndarray,
    seed: int,
    max_targets: int = 4,
    max_points: int = 1000,
    gamma: float = 1.0,
) -> float:
    """Chooses RMIA's offline a by attacking reference models with the others (Zarifzadeh et al. 2024, §3).

    Each of up to ``max_targets`` reference models plays the target; the remaining references
    are used as OUT models (as the offline attack does) and a is the grid value (0, 0.05, …, 1)
    with the best mean AUC at telling the played target's training ids from the rest.

    Args:
        ref_logp: ``(k, p)`` log true-class probabilities of the references on pool ids.
        keep: ``(k, p)`` which reference trained on which pool id.
        z_index: positions (into the pool axis) of the population samples z.
        seed: seed for subsampling candidate points.
        max_targets: references to play the target.
        max_points: candidate points per side (IN / OUT) per played target.
        gamma: γ of the attack.

    Returns:
        The chosen a; :data:`DEFAULT_OFFLINE_A` with fewer than 2 references.
    """
    from sklearn.metrics import roc_auc_score

    k = ref_logp.shape[0]
    if k < 2:
        return DEFAULT_OFFLINE_A
    rng = numpy_rng(seed, "rmia-a")
    aucs = np.zeros(_A_GRID.size)
    used = 0
    for r in range(min(k, max_targets)):
        others = np.arange(k) != r
        inside, outside = np.flatnonzero(keep[r]), np.flatnonzero(~keep[r])
        if inside.size == 0 or outside.size == 0:
            continue
        pick = np.concatenate([rng.permutation(inside)[:max_points], rng.permutation(outside)[:max_points]])
        labels = keep[r, pick]
        for i, a in enumerate(_A_GRID):
            s = rmia_scores(
                target_logp_x=ref_logp[r, pick],
                ref_logp_x=ref_logp[others][:, pick],
                target_logp_z=ref_logp[r, z_index],
                ref_logp_z=ref_logp[others][:, z_index],
                keep_z=keep[others][:, z_index],
                offline_a=float(a),
                gamma=gamma,
            )
            aucs[i] += roc_auc_score(labels, s)
        used += 1
    if used == 0:
        return DEFAULT_OFFLINE_A
    return float(_A_GRID[int(np.argmax(aucs))])


# ----------------------------------------------------------------------------- Shokri et al.
def _sorted_features(logits: np.ndarray) -> np.ndarray:
    """Sorted (descending) log-probability vectors: Shokri et al.'s features, class-order free."""
    return -np.sort(-_log_softmax(np.asarray(logits, dtype=np.float64)), axis=-1)


def shokri_scores(
    *,
    target_logits: np.ndarray,
    labels: np.ndarray,
    shadow_logits: Sequence[np.ndarray],
    shadow_labels: Sequence[np.ndarray],
    shadow_in: Sequence[np.ndarray],
    seed: int,
    max_per_class: int = 20000,
) -> np.ndarray:
    """The shadow-model attack of Shokri et al. (2017, §V): one attack classifier per class.

    Args:
        target_logits: ``(n, C)`` target logits on the queried examples.
        labels: ``(n,)`` their classes.
        shadow_logits: per shadow, ``(p_i, C)`` logits on its IN and OUT examples.
        shadow_labels: per shadow, ``(p_i,)`` classes of those examples.
        shadow_in: per shadow, ``(p_i,)`` bool IN labels.
        seed: seed of the classifiers and of subsampling.
        max_per_class: cap on the attack training set of one class.

    Returns:
        ``(n,)`` the attack classifier's probability of IN.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier

    feats = np.concatenate([_sorted_features(lg) for lg in shadow_logits])
    ys = np.concatenate([np.asarray(y, dtype=np.int64) for y in shadow_labels])
    ins = np.concatenate([np.asarray(m, dtype=bool) for m in shadow_in])
    rng = numpy_rng(seed, "shokri")
    target_feats = _sorted_features(target_logits)
    labels = np.asarray(labels, dtype=np.int64)
    scores = np.zeros(labels.size)

    def fit(rows: np.ndarray, tag: int) -> Any:
        if rows.size > max_per_class:
            rows = np.sort(rng.choice(rows, size=max_per_class, replace=False))
        clf = HistGradientBoostingClassifier(max_iter=100, random_state=derive_seed(seed, "shokri", tag) % 2**32)
        return clf.fit(feats[rows], ins[rows])

    pooled = None
    for c in np.unique(labels):
        rows = np.flatnonzero(ys == c)
        where = labels == c
        # A class seen too rarely (or only IN / only OUT) in the shadows gets the pooled model.
        if rows.size < 20 or ins[rows].all() or not ins[rows].any():
            if pooled is None:
                pooled = fit(np.arange(ys.size), -1)
            clf = pooled
        else:
            clf = fit(rows, int(c))
        scores[where] = clf.predict_proba(target_feats[where])[:, list(clf.classes_).index(True)]
    return scores


# ----------------------------------------------------------------------------- queries
_FLIP_OK = {"fashion-mnist", "cifar10", "faces"}
_SHIFT_OK = {"mnist", "fashion-mnist", "cifar10", "faces"}
_SHIFTS = ((1, 0), (-1, 0), (0, 1), (0, -1))


def augmentations_for(dataset: str, input_shape: Sequence[int]) -> tuple[str, ...]:
    """LiRA's query augmentations that make sense for a dataset (Carlini et al. 2022, §V-C).

    Mirroring only where it preserves the label (not for digits); 1-pixel shifts for images
    large enough to survive them; none for the 8×8 digits and tabular data.

    Returns:
        Names, ``identity`` first: ``flip``, ``shift:DX:DY``, ``flip+shift:DX:DY``.
    """
    out = ["identity"]
    if len(tuple(input_shape)) != 3 or min(tuple(input_shape)[1:]) < 16:
        return tuple(out)
    flip = dataset in _FLIP_OK
    if flip:
        out.append("flip")
    if dataset in _SHIFT_OK:
        out += [f"shift:{dx}:{dy}" for dx, dy in _SHIFTS]
        if flip:
            out += [f"flip+shift:{dx}:{dy}" for dx, dy in _SHIFTS]
    return tuple(out)


def _shift(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """Translates images by (dx, dy) pixels with zero fill (not wrap-around)."""
    out = torch.zeros_like(x)
    h, w = x.shape[-2:]
    out[..., max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = x[..., max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)]
    return out


def _augment(x: torch.Tensor, name: str) -> torch.Tensor:
    if name == "identity":
        return x
    parts = name.split("+")
    for part in parts:
        if part == "flip":
            x = torch.flip(x, dims=(-1,))
        else:
            _, dx, dy = part.split(":")
            x = _shift(x, int(dx), int(dy))
    return x


def _predict(model: nn.Module, features: torch.Tensor, augs: Sequence[str], device: torch.device | str) -> np.ndarray:
    """``(n, q, C)`` float32 logits of ``model`` (inference mode) on each augmentation."""
    model.eval()
    return np.stack([predict_logits(model, _augment(features, a), device=device).numpy() for a in augs], axis=1)


def query_ids(record: TrainedModel, *, max_per_side: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ids an attack scores for a record: its members and non-members (canaries excluded).

    Args:
        record: the target's record.
        max_per_side: at most this many members and this many non-members (seeded subsample).
        seed: seed of the subsample.

    Returns:
        ``(sample_ids, is_member)``, sorted by id.
    """
    mem, non = record.membership.members, record.membership.non_members
    if max_per_side is not None:
        n = v.integer("max_per_side", max_per_side, minimum=1)
        rng = numpy_rng(seed, "query-subsample")
        mem = np.sort(rng.permutation(mem)[:n]) if mem.size > n else mem
        non = np.sort(rng.permutation(non)[:n]) if non.size > n else non
    ids = np.concatenate([mem, non])
    is_member = np.concatenate([np.ones(mem.size, bool), np.zeros(non.size, bool)])
    order = np.argsort(ids, kind="stable")
    return ids[order].astype(np.int64), is_member[order]


# ----------------------------------------------------------------------------- registry
def _count(name: str, value: Any) -> int:
    return v.integer(name, value, minimum=1)


def _unit_closed(name: str, value: Any) -> float:
    x = v.real(name, value)
    if not 0.0 <= x <= 1.0:
        raise v.invalid(name, f"{name} must lie in [0, 1], got {value!r}")
    return x


def _check_fields(config: Any) -> None:
    """Runs every option's validator on its field; the error names the field and the value."""
    for spec in option_specs(type(config)):
        value = getattr(config, spec.field)
        if value is not None and spec.check is not None:
            object.__setattr__(config, spec.field, spec.check(spec.field, value))


#: Shadow and reference counts above this need ``--i-know`` on the command line (the papers use
#: at most 256 for LiRA and 254 for RMIA; each model is one full training).
_SHADOW_LIMIT = SizeLimit(1024, "each shadow model is one full training of the target's defense")


@dataclass(frozen=True, kw_only=True)
class ThresholdConfig:
    """Threshold attacks have no parameters: they read the target's output on the sample alone."""


@dataclass(frozen=True, kw_only=True)
class ShokriConfig:
    """Shokri et al. (2017): how many shadow models (offline pool) train the attack classifiers."""

    num_shadows: int = option(16, help="shadow models the attack uses from its pool (default 16)", metavar="N", check=_count, limit=_SHADOW_LIMIT)

    def __post_init__(self) -> None:
        _check_fields(self)


@dataclass(frozen=True, kw_only=True)
class LiRAConfig:
    """LiRA (Carlini et al. 2022, §IV): shadow count and variance mode."""

    num_shadows: int = option(16, help="shadow models the attack uses from its pool (default 16)", metavar="N", check=_count, limit=_SHADOW_LIMIT)
    global_variance: bool | None = option(None, kind=bool, help="LiRA: one global variance (default: automatically below 64 shadows, §IV-B)")

    def __post_init__(self) -> None:
        _check_fields(self)
        if self.global_variance is not None and not isinstance(self.global_variance, bool):
            raise v.invalid_type("global_variance", f"global_variance must be a bool or None, got {self.global_variance!r}")


@dataclass(frozen=True, kw_only=True)
class RMIAConfig:
    """RMIA (Zarifzadeh et al. 2024, §3): reference models and the likelihood-ratio threshold γ.

    The reference models are the first ``num_references`` models of the attack's shadow pool,
    so RMIA beside LiRA costs no extra training; ``None`` uses every model of the pool (its size
    is then set by ``--num-shadows`` of the other attacks, or :data:`DEFAULT_NUM_SHADOWS`).
    """

    num_references: int | None = option(None, kind=int, help="RMIA reference models, the first ones of its shadow pool (default: the whole pool)", metavar="R", check=_count, limit=_SHADOW_LIMIT)
    gamma: float = option(1.0, help="RMIA likelihood-ratio threshold gamma > 0 (default 1)", check=v.positive)

    def __post_init__(self) -> None:
        _check_fields(self)


@dataclass(frozen=True, kw_only=True)
class RMIAOfflineConfig(RMIAConfig):
    """Offline RMIA adds a, the weight of the offline approximation of Pr(x) (§3, App. B)."""

    offline_a: float | None = option(None, help="RMIA offline a in [0, 1] (default: tuned on the references)", metavar="A", check=_unit_closed)


@dataclass(frozen=True, kw_only=True, eq=False)
class ShadowOutputs:
    """One shadow pool, evaluated on every id of the context's universe.

    Attributes:
        kind: ``online`` (queried ids plus population, each queried id IN for ~half the
            models) or ``offline`` (population only).
        pool_ids: sorted ids the models' training sets were drawn from.
        population_ids: sorted population samples z (RMIA).
        train_ids: per model, its sorted training ids.
        logits: ``(k, U, q, C)`` logits of each model on the universe, per query.
    """

    kind: str
    pool_ids: np.ndarray
    population_ids: np.ndarray
    train_ids: tuple[np.ndarray, ...]
    logits: np.ndarray

    @property
    def num_models(self) -> int:
        return len(self.train_ids)


@dataclass(frozen=True, kw_only=True, eq=False)
class MembershipContext:
    """Everything an attack may read about one target, computed once per run.

    Attributes:
        model_id: the target's id.
        sample_ids: ``(n,)`` sorted ids to score.
        is_member: ``(n,)`` their true membership.
        universe_ids: ``(U,)`` sorted ids every model was evaluated on (queried ids and pools).
        universe_labels: ``(U,)`` their classes.
        target_logits: ``(U, q, C)`` the target's logits per query augmentation.
        augmentations: the q query augmentations (``identity`` first).
        shadows: pool kind → :class:`ShadowOutputs` (only the pools the run's attacks need).
        seed: root seed of the run.
        metadata: facts copied into every result (dataset, defense, target metrics, shadow counts).
    """

    model_id: str
    sample_ids: np.ndarray
    is_member: np.ndarray
    universe_ids: np.ndarray
    universe_labels: np.ndarray
    target_logits: np.ndarray
    augmentations: tuple[str, ...]
    shadows: Mapping[str, ShadowOutputs] = field(default_factory=dict)
    seed: int = 0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions of ``ids`` in :attr:`universe_ids`."""
        return np.searchsorted(self.universe_ids, ids)

    @property
    def query_positions(self) -> np.ndarray:
        return self.positions(self.sample_ids)

    @property
    def labels(self) -> np.ndarray:
        """``(n,)`` classes of the queried ids."""
        return self.universe_labels[self.query_positions]

    def query_logits(self) -> np.ndarray:
        """``(n, C)`` the target's logits on the queried ids, identity query."""
        return self.target_logits[self.query_positions, 0]

    def pool(self, kind: str, attack: str) -> ShadowOutputs:
        """The shadow pool ``kind``; a ValueError naming ``attack`` if the run trained none."""
        if kind not in self.shadows:
            raise v.invalid("attack", f"attack {attack!r} needs the {kind} shadow pool, which this context lacks")
        return self.shadows[kind]

    def result(self, attack: str, scores: np.ndarray, config: Mapping[str, Any], **metadata: Any) -> MembershipResult:
        """A :class:`MembershipResult` for this context's queried ids."""
        return MembershipResult(
            attack=attack,
            model_id=self.model_id,
            sample_ids=self.sample_ids,
            scores=np.asarray(scores, dtype=np.float64),
            is_member=self.is_member,
            config={"seed": self.seed, **config},
            metadata={**self.metadata, **metadata},
        )


@dataclass(frozen=True, kw_only=True)
class MembershipAttackSpec:
    """One registered membership-inference attack.

    Attributes:
        name: registry key and CLI choice.
        summary: one line, citing the paper.
        config_type: frozen dataclass whose fields are declared with :func:`dpaudit.options.option`
            (the CLI flags are generated from them).
        run: ``run(context, config) -> MembershipResult`` (scores: higher = member).
        shadow_pool: ``online``, ``offline`` or ``None`` (no shadow models).
        shadow_count_field: the config field saying how many models of the pool it uses.
        population_samples: whether the attack needs population samples z (RMIA).
    """

    name: str
    summary: str
    config_type: type
    run: Callable[[MembershipContext, Any], MembershipResult]
    shadow_pool: str | None = None
    shadow_count_field: str | None = None
    population_samples: bool = False

    def __post_init__(self) -> None:
        if self.shadow_pool is not None:
            v.choice("shadow_pool", self.shadow_pool, POOL_KINDS)
            if self.shadow_count_field is None:
                raise ValueError(f"attack {self.name!r}: shadow_pool={self.shadow_pool!r} needs shadow_count_field")

    def num_shadow_models(self, config: Any) -> int | None:
        """Models of :attr:`shadow_pool` this attack uses under ``config``: 0 without a pool, ``None`` for "the whole pool"."""
        if self.shadow_pool is None or self.shadow_count_field is None:
            return 0
        count = getattr(config, self.shadow_count_field)
        return None if count is None else int(count)


def _threshold(kind: str) -> Callable[[MembershipContext, Any], MembershipResult]:
    def run(context: MembershipContext, config: ThresholdConfig) -> MembershipResult:
        scores = threshold_scores(context.query_logits(), context.labels, kind=kind)
        return context.result(kind, scores, {"num_queries": 1})

    return run


def _run_shokri(context: MembershipContext, config: ShokriConfig) -> MembershipResult:
    pool = context.pool("offline", "shadow")
    k = min(config.num_shadows, pool.num_models)
    s_logits, s_labels, s_in = [], [], []
    for i in range(k):
        rng_i = numpy_rng(context.seed, "shokri-rows", i)
        inside = np.isin(pool.pool_ids, pool.train_ids[i])
        rows = np.concatenate([rng_i.permutation(np.flatnonzero(inside))[:1000], rng_i.permutation(np.flatnonzero(~inside))[:1000]])
        where = context.positions(pool.pool_ids[rows])
        s_logits.append(pool.logits[i][where, 0])
        s_labels.append(context.universe_labels[where])
        s_in.append(inside[rows])
    scores = shokri_scores(target_logits=context.query_logits(), labels=context.labels, shadow_logits=s_logits, shadow_labels=s_labels, shadow_in=s_in, seed=context.seed)
    return context.result("shadow", scores, {"num_shadows": k, "classifier": "HistGradientBoostingClassifier", "num_queries": 1, "augmentations": ["identity"]})


def _phi(context: MembershipContext, logits: np.ndarray, where: np.ndarray) -> np.ndarray:
    return lira_phi(logits[where], context.universe_labels[where])


def _logp_true(context: MembershipContext, logits: np.ndarray, where: np.ndarray) -> np.ndarray:
    """log of the true-class probability averaged over queries (RMIA's Pr(x|θ))."""
    logp = np.take_along_axis(_log_softmax(logits[where].astype(np.float64)), context.universe_labels[where][:, None, None], axis=-1)[..., 0]
    return special.logsumexp(logp, axis=1) - np.log(logp.shape[1])


def _lira(online: bool) -> Callable[[MembershipContext, Any], MembershipResult]:
    name = "lira" if online else "lira-offline"

    def run(context: MembershipContext, config: LiRAConfig) -> MembershipResult:
        pool = context.pool("online" if online else "offline", name)
        k = min(config.num_shadows, pool.num_models)
        q = context.query_positions
        shadow_phi = np.stack([_phi(context, lg, q) for lg in pool.logits[:k]])
        target_phi = _phi(context, context.target_logits, q)
        glob = k < GLOBAL_VARIANCE_BELOW if config.global_variance is None else config.global_variance
        if online:
            keep = np.stack([np.isin(context.sample_ids, t) for t in pool.train_ids[:k]])
            scores = lira_online_scores(target_phi, shadow_phi, keep, global_variance=glob)
        else:
            scores = lira_offline_scores(target_phi, shadow_phi, global_variance=glob)
        return context.result(name, scores, {"num_queries": len(context.augmentations), "augmentations": list(context.augmentations), "num_shadows": k, "global_variance": bool(glob)})

    return run


def _rmia(online: bool) -> Callable[[MembershipContext, Any], MembershipResult]:
    name = "rmia" if online else "rmia-offline"

    def run(context: MembershipContext, config: RMIAConfig) -> MembershipResult:
        pool = context.pool("online" if online else "offline", name)
        k = pool.num_models if config.num_references is None else min(config.num_references, pool.num_models)
        z = pool.population_ids
        if z.size == 0:
            raise v.invalid("target", f"attack {name!r} needs population samples z, but the target's record has no population ids left to draw them from")
        q, zpos = context.query_positions, context.positions(z)
        lgs = pool.logits[:k]
        ref_x = np.stack([_logp_true(context, lg, q) for lg in lgs])
        ref_z = np.stack([_logp_true(context, lg, zpos) for lg in lgs])
        keep_z = np.stack([np.isin(z, t) for t in pool.train_ids[:k]])
        offline_a = getattr(config, "offline_a", None)
        a_used = None
        keep_x = None
        if online:
            keep_x = np.stack([np.isin(context.sample_ids, t) for t in pool.train_ids[:k]])
        elif offline_a is not None:
            a_used = offline_a
        else:
            ppos = context.positions(pool.pool_ids)
            ref_pool = np.stack([_logp_true(context, lg, ppos) for lg in lgs])
            keep_pool = np.stack([np.isin(pool.pool_ids, t) for t in pool.train_ids[:k]])
            a_used = tune_rmia_offline_a(ref_logp=ref_pool, keep=keep_pool, z_index=np.searchsorted(pool.pool_ids, z), seed=context.seed, gamma=config.gamma)
        scores = rmia_scores(
            target_logp_x=_logp_true(context, context.target_logits, q),
            ref_logp_x=ref_x,
            target_logp_z=_logp_true(context, context.target_logits, zpos),
            ref_logp_z=ref_z,
            keep_x=keep_x,
            keep_z=keep_z,
            offline_a=a_used,
            gamma=config.gamma,
        )
        out: dict[str, Any] = {
            "num_queries": len(context.augmentations),
            "augmentations": list(context.augmentations),
            "num_references": k,
            "gamma": config.gamma,
            "num_population": int(z.size),
            "tie_break": True,
        }
        if not online:
            out.update(offline_a=a_used, offline_a_tuned=offline_a is None)
        return context.result(name, scores, out)

    return run


def sample_vulnerability(context: MembershipContext) -> np.ndarray | None:
    """How exposed each queried sample is, judged from the shadows alone (never the target).

    With an online pool every queried sample is IN for about half the shadows and OUT for the
    rest; its vulnerability is the separation of LiRA's statistic φ between the two,
    |μ_in − μ_out| / √((σ²_in + σ²_out)/2) (Carlini et al. 2022, §IV: the samples whose IN and
    OUT distributions differ most are the ones a strong attack exposes). Because the target
    plays no part, restricting an attack's measures to the top-k samples by this ranking is
    not a selection on the outcome, so the subset's TPR and AUC remain honest estimates
    (Aerni et al. 2024 measure defenses on their most vulnerable samples for this reason).

    Returns:
        ``(n,)`` float64, one per queried id (``context.sample_ids`` order; ``-inf`` for a
        sample no shadow pair saw both IN and OUT), or ``None`` when the run has no online pool.
    """
    pool = context.shadows.get("online")
    if pool is None or pool.num_models < 2:
        return None
    q = context.query_positions
    phi = np.stack([_phi(context, lg, q) for lg in pool.logits])  # (k, n, queries)
    phi = phi.reshape(phi.shape[0], phi.shape[1], -1).mean(axis=2)  # one statistic per sample
    keep = np.stack([np.isin(context.sample_ids, t) for t in pool.train_ids])
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    both = (n_in > 0) & (n_out > 0)
    if not both.any():
        return None
    mu_in = np.where(keep, phi, 0.0).sum(0) / np.maximum(n_in, 1)
    mu_out = np.where(~keep, phi, 0.0).sum(0) / np.maximum(n_out, 1)
    var_in = np.where(keep, (phi - mu_in) ** 2, 0.0).sum(0) / np.maximum(n_in - 1, 1)
    var_out = np.where(~keep, (phi - mu_out) ** 2, 0.0).sum(0) / np.maximum(n_out - 1, 1)
    # A floor on the spread: a sample every shadow fits identically would otherwise divide by 0.
    spread = np.sqrt(np.maximum((var_in + var_out) / 2, 1e-12))
    # A sample the shadows never saw both IN and OUT (all 2^-k of them, k shadows) cannot be
    # judged: -inf ranks it last, never among the most vulnerable.
    return np.where(both, np.abs(mu_in - mu_out) / spread, -np.inf)


#: Every membership-inference attack; the CLI choices and flags, the run and the reports read it.
MEMBERSHIP_ATTACKS: dict[str, MembershipAttackSpec] = {
    "loss": MembershipAttackSpec(name="loss", summary="negative cross-entropy of the true label (Yeom et al. 2018, §3.2)", config_type=ThresholdConfig, run=_threshold("loss")),
    "confidence": MembershipAttackSpec(name="confidence", summary="log of the top softmax probability (Salem et al. 2019, §V)", config_type=ThresholdConfig, run=_threshold("confidence")),
    "entropy": MembershipAttackSpec(name="entropy", summary="negative prediction entropy (Salem et al. 2019, §V)", config_type=ThresholdConfig, run=_threshold("entropy")),
    "modified-entropy": MembershipAttackSpec(
        name="modified-entropy", summary="negative modified entropy Mentr(p, y) (Song & Mittal 2021, §3.1, Eq. 4)", config_type=ThresholdConfig, run=_threshold("modified-entropy")
    ),
    "shadow": MembershipAttackSpec(
        name="shadow",
        summary="per-class attack classifiers trained on shadow models' outputs (Shokri et al. 2017, §V)",
        config_type=ShokriConfig,
        run=_run_shokri,
        shadow_pool="offline",
        shadow_count_field="num_shadows",
    ),
    "lira": MembershipAttackSpec(
        name="lira",
        summary="likelihood-ratio test with IN and OUT shadows, online (Carlini et al. 2022, §IV-B)",
        config_type=LiRAConfig,
        run=_lira(True),
        shadow_pool="online",
        shadow_count_field="num_shadows",
    ),
    "lira-offline": MembershipAttackSpec(
        name="lira-offline",
        summary="one-sided test against OUT shadows only (Carlini et al. 2022, §IV-C)",
        config_type=LiRAConfig,
        run=_lira(False),
        shadow_pool="offline",
        shadow_count_field="num_shadows",
    ),
    "rmia": MembershipAttackSpec(
        name="rmia",
        summary="relative likelihood ratio against population samples, online (Zarifzadeh et al. 2024, §3)",
        config_type=RMIAConfig,
        run=_rmia(True),
        shadow_pool="online",
        shadow_count_field="num_references",
        population_samples=True,
    ),
    "rmia-offline": MembershipAttackSpec(
        name="rmia-offline",
        summary="RMIA with OUT references and the offline approximation of Pr(x) (Zarifzadeh et al. 2024, §3, App. B)",
        config_type=RMIAOfflineConfig,
        run=_rmia(False),
        shadow_pool="offline",
        shadow_count_field="num_references",
        population_samples=True,
    ),
}


def expand_attacks(attacks: str | Sequence[str]) -> list[str]:
    """Registry names, in order, without repeats; ``all`` stands for every registered attack.

    Raises:
        ValueError: an unknown name, or none.
    """
    names = [attacks] if isinstance(attacks, str) else list(attacks)
    out: list[str] = []
    for name in names:
        if name == "all":
            out += [a for a in MEMBERSHIP_ATTACKS if a not in out]
            continue
        v.choice("attack", name, (*MEMBERSHIP_ATTACKS, "all"))
        if name not in out:
            out.append(name)
    if not out:
        raise v.invalid("attacks", "attacks must name at least one attack")
    return out


# ----------------------------------------------------------------------------- context
@dataclass(frozen=True, kw_only=True, eq=False)
class PoolPlan:
    """The ids of one shadow pool and its population samples z, before any model is trained."""

    kind: str
    num_models: int
    pool_ids: np.ndarray
    population_ids: np.ndarray
    users: tuple[str, ...]


def plan_pools(
    specs: Mapping[str, tuple[MembershipAttackSpec, Any]],
    *,
    record: TrainedModel,
    sample_ids: np.ndarray,
    seed: int,
    num_population: int,
    train_size: int,
) -> dict[str, PoolPlan]:
    """Which shadow pools the attacks need, how many models each, and their ids.

    One pool is shared by every attack that names it; its size is the largest count any of
    them asks for (RMIA's references are the first LiRA shadows of the same pool); an attack
    that takes the whole pool (count ``None``) does not size it.

    Args:
        specs: attack name → (its spec, its config).
        record: the target (``membership.population`` is the attacker's data).
        sample_ids: the queried ids.
        seed: root seed.
        num_population: population samples z (and the online pool's padding when an
            attack needs z).
        train_size: ids per shadow model.

    Raises:
        ValueError: an offline pool is needed but the record has fewer than 2 population ids.
    """
    population = np.setdiff1d(record.membership.population, sample_ids)
    pop_perm = numpy_rng(seed, "pools").permutation(population)
    out: dict[str, PoolPlan] = {}
    for kind in POOL_KINDS:
        users = [n for n, (s, _) in specs.items() if s.shadow_pool == kind]
        if not users:
            continue
        counts = [c for n in users if (c := specs[n][0].num_shadow_models(specs[n][1])) is not None]
        count = max(counts) if counts else DEFAULT_NUM_SHADOWS
        if kind == "online":
            # Padded with the population samples whether or not an attack in this call uses them,
            # so an attack's shadows (and its result) do not depend on which other attacks ran.
            pad = min(population.size, max(2 * train_size - sample_ids.size, num_population))
            z = np.sort(pop_perm[:pad])
            pool = np.union1d(sample_ids, z)
        else:
            if population.size < 2:
                raise v.invalid("target", f"attack {users[0]!r} needs population data for shadow models, but the target's record has {population.size} population ids")
            pool = np.sort(pop_perm[-min(population.size, 2 * train_size) :])  # the other end of the permutation from the online padding
            z = np.sort(numpy_rng(seed, "z-offline").permutation(pool)[:num_population])
        out[kind] = PoolPlan(kind=kind, num_models=count, pool_ids=pool.astype(np.int64), population_ids=z.astype(np.int64), users=tuple(users))
    return out


def train_pools(
    pools: Mapping[str, PoolPlan],
    *,
    record: TrainedModel,
    seed: int,
    train_size: int,
    training: ShadowTraining | None = None,
    recipe: Mapping[str, Any] | None = None,
    **ensure: Any,
) -> tuple[dict[str, list[tuple[np.ndarray, nn.Module]]], dict[str, tuple[ShadowSpec, ...]], ShadowRun]:
    """Plans every pool's shadows and loads or trains them in one batch (:func:`attacks.shadows.ensure_shadows`).

    Args:
        pools: from :func:`plan_pools`.
        record: the target (architecture, dataset).
        seed: root seed.
        train_size: ids per shadow.
        training: plain-SGD hyperparameters (default: from the target's config).
        recipe: what ``ensure["trainer"]`` does instead, hashed into the shadows' ids.
        **ensure: keyword arguments of :func:`attacks.shadows.ensure_shadows`.

    Returns:
        Pool kind → ``(train_ids, module)`` per model; pool kind → its specs; the shadow run.
    """
    plans = {
        k: tuple(plan_shadows(template=record, pool_ids=p.pool_ids, num_shadows=p.num_models, seed=seed, kind=k, train_size=train_size, training=training, recipe=recipe)) for k, p in pools.items()
    }
    run = ensure_shadows([s for k in pools for s in plans[k]], **ensure)
    models: dict[str, list[tuple[np.ndarray, nn.Module]]] = {}
    i = 0
    for kind in pools:
        models[kind] = [(s.train_ids, mdl) for s, mdl in zip(plans[kind], run.models[i : i + len(plans[kind])], strict=True)]
        i += len(plans[kind])
    return models, plans, run


def build_context(
    *,
    record: TrainedModel,
    model: nn.Module,
    bundle: DatasetBundle,
    sample_ids: np.ndarray,
    is_member: np.ndarray,
    seed: int,
    augmentations: Sequence[str],
    pools: Mapping[str, PoolPlan],
    shadow_models: Mapping[str, Sequence[tuple[np.ndarray, nn.Module]]],
    device: str = "cpu",
    metadata: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> MembershipContext:
    """Evaluates the target and every shadow model once on every id any attack needs.

    Args:
        shadow_models: pool kind → ``(train_ids, module)`` per model, in plan order.
        progress: report each shadow model evaluated on stderr (hundreds of shadows on a
            large pool take minutes).
    """
    everything = bundle.all()
    universe = np.unique(np.concatenate([sample_ids, *[p.pool_ids for p in pools.values()]])).astype(np.int64)
    where = torch.from_numpy(everything.positions(universe))
    feats = everything.features.index_select(0, where)
    labels = everything.labels[where].numpy().astype(np.int64)
    augs = tuple(augmentations)
    outputs = {}
    for kind, plan in pools.items():
        models = list(shadow_models[kind])
        predicted = []
        with Progress(len(models), f"{kind} shadow models on {universe.size} samples (evaluated)", enabled=progress and bool(models)) as bar:
            for _, mdl in models:
                predicted.append(_predict(mdl, feats, augs, device))
                bar.update(1)
        logits = np.stack(predicted) if models else np.zeros((0, universe.size, len(augs), bundle.num_classes), np.float32)
        outputs[kind] = ShadowOutputs(kind=kind, pool_ids=plan.pool_ids, population_ids=plan.population_ids, train_ids=tuple(np.asarray(t, np.int64) for t, _ in models), logits=logits)
    return MembershipContext(
        model_id=record.model_id,
        sample_ids=sample_ids,
        is_member=is_member,
        universe_ids=universe,
        universe_labels=labels,
        target_logits=_predict(model, feats, augs, device),
        augmentations=augs,
        shadows=outputs,
        seed=seed,
        metadata=dict(metadata or {}),
    )


def check_query(record: TrainedModel, bundle: DatasetBundle, sample_ids: Any, is_member: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(sample_ids, is_member)``: the record's own when both are ``None``."""
    if sample_ids is None:
        if is_member is not None:
            raise v.invalid("is_member", "is_member was given without sample_ids")
        return query_ids(record)
    if is_member is None:
        raise v.invalid("is_member", "is_member is required with sample_ids")
    ids = np.array(sample_ids, copy=True)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise v.invalid_type("sample_ids", f"sample_ids must be a 1-D array of integer ids, got dtype {ids.dtype} shape {ids.shape}")
    ids = ids.astype(np.int64)
    member = np.array(is_member, copy=True)
    if member.dtype != bool or member.shape != ids.shape:
        raise v.invalid_type("is_member", f"is_member must be a bool array of shape {ids.shape}, got dtype {member.dtype} shape {member.shape}")
    if np.unique(ids).size != ids.size:
        raise v.invalid("sample_ids", "sample_ids must not repeat a sample id")
    bundle.all().positions(ids)  # raises ValueError naming an unknown id
    order = np.argsort(ids, kind="stable")  # the context's positions need sorted ids
    return ids[order], member[order]


def choose_augmentations(bundle: DatasetBundle, num_queries: int | None) -> tuple[str, ...]:
    """The first ``num_queries`` query augmentations (default 2 where any exists, else 1)."""
    augs_all = augmentations_for(bundle.name, bundle.input_shape)
    if num_queries is None:
        num_queries = 2 if len(augs_all) > 1 else 1
    num_queries = v.integer("num_queries", num_queries, minimum=1)
    if num_queries > len(augs_all):
        raise v.invalid("num_queries", f"num_queries must be <= {len(augs_all)} for dataset {bundle.name!r} (augmentations: {', '.join(augs_all)}), got {num_queries}")
    return augs_all[:num_queries]


def run_attacks(context: MembershipContext, configs: Mapping[str, Any]) -> dict[str, MembershipResult]:
    """Runs each named attack's registered ``run`` on ``context``, timing each."""
    out: dict[str, MembershipResult] = {}
    for name, config in configs.items():
        spec = MEMBERSHIP_ATTACKS[name]
        if not isinstance(config, spec.config_type):
            raise TypeError(f"config of attack {name!r} must be a {spec.config_type.__name__}, got {type(config).__name__}")
        t0 = time.monotonic()
        result = spec.run(context, config)
        if not isinstance(result, MembershipResult):
            raise TypeError(f"attack {name!r} must return a MembershipResult, got {type(result).__name__}")
        out[name] = dataclasses.replace(result, metadata={**result.metadata, "attack_seconds": time.monotonic() - t0})
    return out


# ----------------------------------------------------------------------------- library entry point
def run_membership_attacks(
    attacks: str | Sequence[str],
    *,
    record: TrainedModel,
    model: nn.Module,
    bundle: DatasetBundle,
    configs: Mapping[str, Any] | None = None,
    sample_ids: np.ndarray | Sequence[int] | None = None,
    is_member: np.ndarray | Sequence[bool] | None = None,
    seed: int = 0,
    num_shadows: int | None = None,
    num_queries: int | None = None,
    num_population: int = 1000,
    train_size: int | None = None,
    training: ShadowTraining | None = None,
    shadow_directory: str | os.PathLike[str] | None = None,
    executor: Executor | None = None,
    data_root: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    progress: bool = True,
    on_shadow_trained: Callable[[ShadowSpec, TrainedModel], None] | None = None,
) -> dict[str, MembershipResult]:
    """Runs registered attacks against one target in-process; shadows are trained once and shared.

    The command line goes through :func:`dpaudit.app.runs.membership.run_membership`; this
    entry point serves scripts and tests that hold a model in memory.

    Args:
        attacks: names from :data:`MEMBERSHIP_ATTACKS`, or ``"all"``.
        record: the target's record.
        model: the target module.
        bundle: its dataset.
        configs: attack name → config (default: the config type's defaults).
        sample_ids, is_member: what to score (default: the record's members and non-members).
        seed: root seed.
        num_shadows: shortcut that sets the shadow count (``num_shadows``, RMIA's
            ``num_references``) of every default config.
        num_queries: query augmentations (default: 2 where an augmentation exists, else 1).
        num_population: RMIA's population samples z.
        train_size: ids per shadow (default: the target's number of members).
        training: shadow SGD hyperparameters (default: from the target's config).
        shadow_directory: cache of trained shadows, or ``None``.
        executor, data_root, device, progress, on_shadow_trained: as for
            :func:`attacks.shadows.ensure_shadows`.

    Returns:
        ``{attack: MembershipResult}`` in the order requested.
    """
    started = time.monotonic()
    names = expand_attacks(attacks)
    seed = v.integer("seed", seed, minimum=0)
    num_population = v.integer("num_population", num_population, minimum=1)
    if not isinstance(record, TrainedModel):
        raise v.invalid_type("record", f"record must be a TrainedModel, got {type(record).__name__}")
    if not isinstance(model, nn.Module):
        raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    chosen = default_configs(names, configs=configs, num_shadows=num_shadows)
    ids, member = check_query(record, bundle, sample_ids, is_member)
    augs = choose_augmentations(bundle, num_queries)
    m = v.integer("train_size", train_size if train_size is not None else max(len(record.membership.members), 1), minimum=1)
    pools = plan_pools({n: (MEMBERSHIP_ATTACKS[n], c) for n, c in chosen.items()}, record=record, sample_ids=ids, seed=seed, num_population=num_population, train_size=m)
    shadow_meta: dict[str, Any] = {}
    models: dict[str, list[tuple[np.ndarray, nn.Module]]] = {}
    if pools:
        models, _, run = train_pools(
            pools,
            record=record,
            seed=seed,
            train_size=m,
            training=training,
            directory=shadow_directory,
            executor=executor,
            data_root=data_root,
            device=device,
            progress=progress,
            on_trained=on_shadow_trained,
        )
        shadow_meta = {"shadows_trained": len(run.trained), "shadows_reused": len(run.reused)}
    meta = {
        "target_metrics": {k: val for k, val in record.metrics.items() if isinstance(val, (int, float))},
        "dataset": bundle.name,
        "defense": record.defense,
        **shadow_meta,
    }
    context = build_context(record=record, model=model, bundle=bundle, sample_ids=ids, is_member=member, seed=seed, augmentations=augs, pools=pools, shadow_models=models, device=device, metadata=meta)
    results = run_attacks(context, chosen)
    total = time.monotonic() - started
    return {n: dataclasses.replace(r, metadata={**r.metadata, "total_seconds": total}) for n, r in results.items()}


def default_configs(names: Sequence[str], *, configs: Mapping[str, Any] | None = None, num_shadows: int | None = None) -> dict[str, Any]:
    """Config per attack: given ones as they are, the rest from their type's defaults.

    ``num_shadows`` (if given) sets the shadow-count field of every defaulted config.
    """
    configs = dict(configs or {})
    unknown = set(configs) - set(names)
    if unknown:
        raise v.invalid("configs", f"configs names attack(s) not run: {sorted(unknown)}")
    out = {}
    for name in names:
        spec = MEMBERSHIP_ATTACKS[name]
        if name in configs:
            out[name] = configs[name]
            continue
        kwargs = {spec.shadow_count_field: num_shadows} if num_shadows is not None and spec.shadow_count_field else {}
        out[name] = spec.config_type(**kwargs)
    return out


def membership_attack(attack: str, **kwargs: Any) -> MembershipResult:
    """One attack; see :func:`run_membership_attacks` for the arguments.

    Raises:
        ValueError: ``attack`` is not registered in :data:`MEMBERSHIP_ATTACKS`.
    """
    attack = v.choice("attack", attack, MEMBERSHIP_ATTACKS)
    return run_membership_attacks([attack], **kwargs)[attack]
