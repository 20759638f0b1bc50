"""Pure membership scores: the signals and statistics of the threshold, shadow-model, LiRA and RMIA attacks.

NumPy arrays in, scores out (higher = more likely a member); no model, no torch. The attacks of
this package (:mod:`attacks.membership.threshold`, ``shokri``, ``lira``, ``rmia``) compute their
inputs from a :class:`~attacks.membership.spec.MembershipContext` and call these.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from scipy import special, stats

from dpaudit import _validate as v
from dpaudit.seeding import derive_seed, numpy_rng

__all__ = [
    "THRESHOLD_KINDS",
    "GLOBAL_VARIANCE_BELOW",
    "DEFAULT_OFFLINE_A",
    "threshold_scores",
    "lira_phi",
    "lira_online_scores",
    "lira_offline_scores",
    "rmia_scores",
    "tune_rmia_offline_a",
    "shokri_scores",
]

THRESHOLD_KINDS: tuple[str, ...] = ("loss", "confidence", "entropy", "modified-entropy")
#: Carlini et al. (2022, §IV-B): per-example variances need many shadows; below this, one global variance.
GLOBAL_VARIANCE_BELOW = 64
#: Models in a shadow pool when no attack using it states a count.
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


def lira_online_scores(
    target_phi: np.ndarray, shadow_phi: np.ndarray, keep: np.ndarray, *, global_variance: bool | None = None
) -> np.ndarray:
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
        raise v.invalid(
            "num_shadows",
            "online LiRA needs examples that are IN for some shadows and OUT for "
            f"others; got {k} shadow model(s) — use at least 2",
        )
    gap = np.median((mu_in - mu_out)[both], axis=0)
    _fill_missing(mu_in, sd_in, mu_out, gap)
    _fill_missing(mu_out, sd_out, mu_in, -gap)
    sd_in, sd_out = np.maximum(sd_in, _MIN_STD), np.maximum(sd_out, _MIN_STD)
    llr = stats.norm.logpdf(target_phi, mu_in, sd_in) - stats.norm.logpdf(target_phi, mu_out, sd_out)
    return llr.mean(axis=1)


def lira_offline_scores(
    target_phi: np.ndarray, shadow_phi: np.ndarray, *, global_variance: bool | None = None
) -> np.ndarray:
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
        raise v.invalid(
            "shadow_phi",
            "shadow_phi must be (k, n, q) matching target_phi (n, q) and keep (k, "
            f"n); got {s.shape}, {t.shape}, {kp.shape}",
        )
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
    if (
        rx.ndim != 2
        or rx.shape[1:] != tx.shape
        or rz.ndim != 2
        or rz.shape[1:] != tz.shape
        or rx.shape[0] != rz.shape[0]
    ):
        raise ValueError(
            f"reference and target shapes disagree: ref_logp_x {rx.shape}, "
            f"target_logp_x {tx.shape}, ref_logp_z {rz.shape}, target_logp_z "
            f"{tz.shape}"
        )
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
