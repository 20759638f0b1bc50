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

Shadow and reference models come from :mod:`attacks.shadows`: trained as independent jobs
through an executor and cached in the run store, shared by all attacks of a run (LiRA online
and RMIA online use the ``online`` pool, the shadow attack, LiRA offline and RMIA offline the
``offline`` pool). All models — target and shadows — are evaluated in inference mode
(``model.eval()``), the point Carlini et al. (2022) stress for BatchNorm models.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import special, stats
from torch import nn

from attacks.shadows import ShadowSpec, ShadowTraining, ensure_shadows, plan_shadows
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle
from dpaudit.executors import Executor
from dpaudit.results import MembershipResult, save_membership_result
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import derive_seed, numpy_rng
from dpaudit.training import predict_logits

__all__ = [
    "ATTACKS",
    "THRESHOLD_ATTACKS",
    "SHADOW_ATTACKS",
    "MEMBERSHIP_SUBDIR",
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
    "save_membership_results",
]

THRESHOLD_ATTACKS: tuple[str, ...] = ("loss", "confidence", "entropy", "modified-entropy")
SHADOW_ATTACKS: tuple[str, ...] = ("shadow", "lira", "lira-offline", "rmia", "rmia-offline")
ATTACKS: tuple[str, ...] = THRESHOLD_ATTACKS + SHADOW_ATTACKS
#: Which shadow pool an attack draws its models from.
_POOL = {"shadow": "offline", "lira": "online", "lira-offline": "offline", "rmia": "online", "rmia-offline": "offline"}
#: Where results go under a run directory: RUN_DIR/attacks/membership/<model_id>/<attack>.{json,npz}.
MEMBERSHIP_SUBDIR = ("attacks", "membership")
#: Carlini et al. (2022, §IV-B): per-example variances need many shadows; below this, one global variance.
GLOBAL_VARIANCE_BELOW = 64
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
    kind = v.choice("kind", kind, THRESHOLD_ATTACKS)
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or labels.shape != (logits.shape[0],):
        raise ValueError(f"logits must be (n, C) and labels (n,), got {logits.shape} and {labels.shape}")
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
        raise ValueError(f"online LiRA needs examples that are IN for some shadows and OUT for others; got {k} shadow model(s) — use at least 2")
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
        raise ValueError("offline LiRA with per-example variances needs at least 2 shadow models")
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
        raise ValueError(f"shadow_phi must be (k, n, q) matching target_phi (n, q) and keep (k, n); got {s.shape}, {t.shape}, {kp.shape}")
    if s.shape[0] < 1:
        raise ValueError("shadow_phi must hold at least one shadow model")
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
        raise ValueError("target_logp_z must hold at least one population sample z")
    if keep_x is None:
        if offline_a is None:
            raise ValueError("offline_a is required for offline RMIA (keep_x=None)")
        a = v.real("offline_a", offline_a)
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"offline_a must lie in [0, 1], got {offline_a!r}")
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


# ----------------------------------------------------------------------------- orchestration
def _expand(attacks: str | Sequence[str]) -> list[str]:
    names = [attacks] if isinstance(attacks, str) else list(attacks)
    out: list[str] = []
    for name in names:
        if name == "all":
            out += [a for a in ATTACKS if a not in out]
            continue
        v.choice("attack", name, (*ATTACKS, "all"))
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("attacks must name at least one attack")
    return out


def run_membership_attacks(
    attacks: str | Sequence[str],
    *,
    record: TrainedModel,
    model: nn.Module,
    bundle: DatasetBundle,
    sample_ids: np.ndarray | Sequence[int] | None = None,
    is_member: np.ndarray | Sequence[bool] | None = None,
    seed: int = 0,
    num_shadows: int = 16,
    num_references: int | None = None,
    num_queries: int | None = None,
    num_population: int = 1000,
    gamma: float = 1.0,
    offline_a: float | None = None,
    global_variance: bool | None = None,
    train_size: int | None = None,
    training: ShadowTraining | None = None,
    shadow_directory: str | os.PathLike[str] | None = None,
    executor: Executor | None = None,
    data_root: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    progress: bool = True,
    on_shadow_trained: Callable[[ShadowSpec, TrainedModel], None] | None = None,
) -> dict[str, MembershipResult]:
    """Runs membership-inference attacks against one target; shadows are trained once and shared.

    Args:
        attacks: names from :data:`ATTACKS`, or ``"all"``.
        record: the target's record (architecture, training config, membership ground truth;
            ``membership.population`` is the attacker's data for shadow / reference models).
        model: the target module.
        bundle: its dataset.
        sample_ids: ids to score (default: the record's members and non-members).
        is_member: their true membership (required with ``sample_ids``).
        seed: root seed: pools, shadow training sets and seeds, classifiers.
        num_shadows: shadow models for ``shadow``, ``lira`` and ``lira-offline``.
        num_references: reference models for RMIA (default ``num_shadows``); the first ones
            of the same pool, so no extra training.
        num_queries: query augmentations for LiRA / RMIA (default: 2 where an augmentation
            exists for the dataset, else 1; see :func:`augmentations_for`).
        num_population: population samples z of RMIA (and how far the online pool is padded
            with population ids).
        gamma: RMIA's γ.
        offline_a: RMIA's offline a (default: tuned on the references).
        global_variance: LiRA's variance mode (default: global below 64 shadows).
        train_size: ids per shadow (default: the target's number of members).
        training: shadow SGD hyperparameters (default: from the target's config).
        shadow_directory: cache of trained shadows (``RUN_DIR/attacks/shadows``), or ``None``.
        executor: where shadow training runs (default: this process).
        data_root: data root for workers.
        device: where shadows train and models are evaluated.
        progress: report on stderr.
        on_shadow_trained: called after each newly trained shadow is saved (e.g. to stop a
            run after k shadows in a test).

    Returns:
        ``{attack: MembershipResult}`` in the order requested.

    Raises:
        ValueError: an unknown attack, bad counts, ids not in the dataset, or no population
            data for an attack that needs it.
    """
    started = time.monotonic()
    names = _expand(attacks)
    seed = v.integer("seed", seed, minimum=0)
    num_shadows = v.integer("num_shadows", num_shadows, minimum=1)
    num_references = v.integer("num_references", num_references if num_references is not None else num_shadows, minimum=1)
    num_population = v.integer("num_population", num_population, minimum=1)
    gamma = v.positive("gamma", gamma)
    if offline_a is not None:
        offline_a = v.real("offline_a", offline_a)
        if not 0.0 <= offline_a <= 1.0:
            raise ValueError(f"offline_a must lie in [0, 1], got {offline_a!r}")
    if not isinstance(record, TrainedModel):
        raise TypeError(f"record must be a TrainedModel, got {type(record).__name__}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")

    # -- what is queried
    if sample_ids is None:
        if is_member is not None:
            raise ValueError("is_member was given without sample_ids")
        ids, member = query_ids(record)
    else:
        if is_member is None:
            raise ValueError("is_member is required with sample_ids")
        ids = np.array(sample_ids, copy=True)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"sample_ids must be a 1-D array of integer ids, got dtype {ids.dtype} shape {ids.shape}")
        ids = ids.astype(np.int64)
        member = np.array(is_member, copy=True)
        if member.dtype != bool or member.shape != ids.shape:
            raise TypeError(f"is_member must be a bool array of shape {ids.shape}, got dtype {member.dtype} shape {member.shape}")
        if np.unique(ids).size != ids.size:
            raise ValueError("sample_ids must not repeat a sample id")
    everything = bundle.all()
    everything.positions(ids)  # raises ValueError naming an unknown id
    labels_of = lambda q: everything.labels[torch.from_numpy(everything.positions(q))].numpy()

    augs_all = augmentations_for(bundle.name, bundle.input_shape)
    if num_queries is None:
        num_queries = 2 if len(augs_all) > 1 else 1
    num_queries = v.integer("num_queries", num_queries, minimum=1)
    if num_queries > len(augs_all):
        raise ValueError(f"num_queries must be <= {len(augs_all)} for dataset {bundle.name!r} (augmentations: {', '.join(augs_all)}), got {num_queries}")
    augs = augs_all[:num_queries]

    # -- shadow pools (see attacks.shadows for the paired design)
    population = np.setdiff1d(record.membership.population, ids)
    m = v.integer("train_size", train_size if train_size is not None else max(len(record.membership.members), 1), minimum=1)
    need_online = max([num_shadows if n == "lira" else num_references for n in names if _POOL.get(n) == "online"], default=0)
    need_offline = max([num_references if n == "rmia-offline" else num_shadows for n in names if _POOL.get(n) == "offline"], default=0)
    rng = numpy_rng(seed, "pools")
    pop_perm = rng.permutation(population)
    specs_online: list[ShadowSpec] = []
    specs_offline: list[ShadowSpec] = []
    online_pool = offline_pool = np.zeros(0, np.int64)
    z_online = z_offline = np.zeros(0, np.int64)
    if need_online:
        pad = min(population.size, max(2 * m - ids.size, num_population if "rmia" in names else 0))
        z_online = np.sort(pop_perm[:pad])
        online_pool = np.union1d(ids, z_online)
        specs_online = plan_shadows(template=record, pool_ids=online_pool, num_shadows=need_online, seed=seed, kind="online", train_size=m, training=training)
    if need_offline:
        if population.size < 2:
            wanting = [n for n in names if _POOL.get(n) == "offline"]
            raise ValueError(f"attack {wanting[0]!r} needs population data for shadow models, but the target's record has {population.size} population ids")
        offline_pool = np.sort(pop_perm[-min(population.size, 2 * m) :])  # the other end of the permutation from the online padding
        specs_offline = plan_shadows(template=record, pool_ids=offline_pool, num_shadows=need_offline, seed=seed, kind="offline", train_size=m, training=training)
        z_offline = np.sort(numpy_rng(seed, "z-offline").permutation(offline_pool)[:num_population])

    shadow_meta: dict[str, Any] = {}
    online_models: list[nn.Module] = []
    offline_models: list[nn.Module] = []
    if specs_online or specs_offline:
        run = ensure_shadows(
            specs_online + specs_offline,
            directory=shadow_directory,
            executor=executor,
            data_root=data_root,
            device=device,
            progress=progress,
            on_trained=on_shadow_trained,
        )
        online_models = list(run.models[: len(specs_online)])
        offline_models = list(run.models[len(specs_online) :])
        shadow_meta = {"shadows_trained": len(run.trained), "shadows_reused": len(run.reused)}

    # -- logits of every model on every id any attack needs, computed once
    universe = np.unique(np.concatenate([ids, online_pool, offline_pool]))
    feats = everything.features.index_select(0, torch.from_numpy(everything.positions(universe)))
    labels_u = labels_of(universe)
    pos = {"ids": np.searchsorted(universe, ids)}
    target_logits = _predict(model, feats, augs, device)
    online_logits = [_predict(mdl, feats, augs, device) for mdl in online_models]
    offline_logits = [_predict(mdl, feats, augs, device) for mdl in offline_models]
    q_labels = labels_u[pos["ids"]]

    def phi(lg: np.ndarray, where: np.ndarray) -> np.ndarray:
        return lira_phi(lg[where], labels_u[where])

    def logp_true(lg: np.ndarray, where: np.ndarray) -> np.ndarray:
        """log of the true-class probability averaged over queries (RMIA's Pr(x|θ))."""
        logp = np.take_along_axis(_log_softmax(lg[where].astype(np.float64)), labels_u[where][:, None, None], axis=-1)[..., 0]
        return special.logsumexp(logp, axis=1) - np.log(logp.shape[1])

    base_config = {"seed": seed, "num_queries": num_queries, "augmentations": list(augs)}
    base_meta = {
        "target_metrics": {k: val for k, val in record.metrics.items() if isinstance(val, (int, float))},
        "dataset": bundle.name,
        "defense": record.defense,
        **shadow_meta,
    }
    results: dict[str, MembershipResult] = {}
    for name in names:
        t0 = time.monotonic()
        config: dict[str, Any] = dict(base_config)
        if name in THRESHOLD_ATTACKS:
            scores = threshold_scores(target_logits[pos["ids"], 0], q_labels, kind=name)
            config = {"seed": seed, "num_queries": 1}
        elif name == "shadow":
            k = num_shadows
            s_logits, s_labels, s_in = [], [], []
            for i, spec in enumerate(specs_offline[:k]):
                rng_i = numpy_rng(seed, "shokri-rows", i)
                inside = np.isin(offline_pool, spec.train_ids)
                rows = np.concatenate([rng_i.permutation(np.flatnonzero(inside))[:1000], rng_i.permutation(np.flatnonzero(~inside))[:1000]])
                where = np.searchsorted(universe, offline_pool[rows])
                s_logits.append(offline_logits[i][where, 0])
                s_labels.append(labels_u[where])
                s_in.append(inside[rows])
            scores = shokri_scores(target_logits=target_logits[pos["ids"], 0], labels=q_labels, shadow_logits=s_logits, shadow_labels=s_labels, shadow_in=s_in, seed=seed)
            config.update(num_shadows=k, classifier="HistGradientBoostingClassifier", num_queries=1, augmentations=["identity"])
        elif name in ("lira", "lira-offline"):
            online = name == "lira"
            k = num_shadows
            specs, lgs = (specs_online, online_logits) if online else (specs_offline, offline_logits)
            shadow_phi = np.stack([phi(lg, pos["ids"]) for lg in lgs[:k]])
            target_phi = phi(target_logits, pos["ids"])
            glob = k < GLOBAL_VARIANCE_BELOW if global_variance is None else global_variance
            if online:
                keep = np.stack([np.isin(ids, s.train_ids) for s in specs[:k]])
                scores = lira_online_scores(target_phi, shadow_phi, keep, global_variance=glob)
            else:
                scores = lira_offline_scores(target_phi, shadow_phi, global_variance=glob)
            config.update(num_shadows=k, global_variance=bool(glob))
        else:  # rmia, rmia-offline
            online = name == "rmia"
            k = num_references
            specs, lgs, z = (specs_online, online_logits, z_online) if online else (specs_offline, offline_logits, z_offline)
            if z.size == 0:
                raise ValueError(f"attack {name!r} needs population samples z, but the target's record has no population ids left to draw them from")
            zpos = np.searchsorted(universe, z)
            ref_x = np.stack([logp_true(lg, pos["ids"]) for lg in lgs[:k]])
            ref_z = np.stack([logp_true(lg, zpos) for lg in lgs[:k]])
            keep_z = np.stack([np.isin(z, s.train_ids) for s in specs[:k]])
            a_used = None
            if online:
                keep_x = np.stack([np.isin(ids, s.train_ids) for s in specs[:k]])
            else:
                keep_x = None
                if offline_a is not None:
                    a_used = offline_a
                else:
                    ppos = np.searchsorted(universe, offline_pool)
                    ref_pool = np.stack([logp_true(lg, ppos) for lg in lgs[:k]])
                    keep_pool = np.stack([np.isin(offline_pool, s.train_ids) for s in specs[:k]])
                    a_used = tune_rmia_offline_a(ref_logp=ref_pool, keep=keep_pool, z_index=np.searchsorted(offline_pool, z), seed=seed, gamma=gamma)
            scores = rmia_scores(
                target_logp_x=logp_true(target_logits, pos["ids"]),
                ref_logp_x=ref_x,
                target_logp_z=logp_true(target_logits, zpos),
                ref_logp_z=ref_z,
                keep_x=keep_x,
                keep_z=keep_z,
                offline_a=a_used,
                gamma=gamma,
            )
            config.update(num_references=k, gamma=gamma, num_population=int(z.size), tie_break=True)
            if not online:
                config.update(offline_a=a_used, offline_a_tuned=offline_a is None)
        results[name] = MembershipResult(
            attack=name,
            model_id=record.model_id,
            sample_ids=ids,
            scores=scores,
            is_member=member,
            config=config,
            metadata={**base_meta, "attack_seconds": time.monotonic() - t0, "total_seconds": time.monotonic() - started},
        )
    return results


def membership_attack(attack: str, **kwargs: Any) -> MembershipResult:
    """One attack; see :func:`run_membership_attacks` for the arguments.

    Raises:
        ValueError: ``attack`` is not one of :data:`ATTACKS`.
    """
    attack = v.choice("attack", attack, ATTACKS)
    return run_membership_attacks([attack], **kwargs)[attack]


def save_membership_results(results: Mapping[str, MembershipResult], run_dir: str | os.PathLike[str]) -> Path:
    """Writes each result under ``RUN_DIR/attacks/membership/<model_id>/`` (JSON + NPZ).

    Returns:
        The directory written (of the first result's target).
    """
    out: Path | None = None
    for result in results.values():
        directory = Path(run_dir).joinpath(*MEMBERSHIP_SUBDIR, result.model_id)
        save_membership_result(result, directory)
        out = out or directory
    if out is None:
        raise ValueError("results must hold at least one MembershipResult")
    return out
