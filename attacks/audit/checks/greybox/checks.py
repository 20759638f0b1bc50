"""The grey-box checks: verdicts read off one replayed pair of trainings, each with its cause.

Every check here decides from the same :class:`~attacks.audit.checks.greybox.replay.PairTrace`
(computed once per battery and shared: two trainings and a third on D, a few CPU-seconds on the
catalogue's models) and returns :class:`Verdict` — ``violated``, ``passed`` or ``inconclusive``
— with one sentence naming the cause in the user's terms. Most decisions are deterministic: with
the randomness and the trajectory shared, a step count, a normaliser or a measured sensitivity
is a number read off the run, not an estimate. The sampling-rate check alone is statistical (an
exact binomial test of the observed inclusions against the claimed rate q at the check's
confidence), so a correct Poisson sampler is flagged with probability at most 1 − confidence.

A quantity the hooks did not observe (arithmetic outside torch) is never guessed: the check says
``inconclusive: not observable`` and why, and the statistical checks decide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from attacks.audit.checks.greybox.replay import GAUSSIAN, PairTrace, StepRecord, Trace

__all__ = [
    "ClaimedMechanism",
    "Verdict",
    "DECISIONS",
    "steps",
    "sampling_rate",
    "noise",
    "sensitivity",
    "normaliser",
    "control_flow",
    "state",
    "NOT_OBSERVABLE",
]

NOT_OBSERVABLE = "not observable"
#: Relative slack on the measured sensitivity: float32 clipping rounds C·(1 ± 1e-6).
TOLERANCE = 1e-4


@dataclass(frozen=True, kw_only=True)
class ClaimedMechanism:
    """What the claim states about the DP-SGD it accounts (``None``: not stated).

    Attributes:
        sampling_rate: the Poisson rate q.
        noise_multiplier: σ.
        steps: T, the number of compositions.
        dataset_size_public: the claim treats |D| as public (a normaliser may depend on it).
        dataset_size: |D| of the user's training data (the ``--dataset`` training split), at
            which a finding says how much leaks; ``None``: unknown.
        delta: δ at which a leak is stated as ε.
        replay: the replay of D and D + 1 at another |D| (see the field's comment).
    """

    sampling_rate: float | None
    noise_multiplier: float | None
    steps: int | None
    dataset_size_public: bool = False
    dataset_size: int | None = None
    delta: float = 1e-5
    #: Replays D and D + 1 record at a given |D| (``None``: too large or failed); the normaliser
    #: check calls it to say what leaks at the user's own dataset size.
    replay: Callable[[int], PairTrace | None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One grey-box check's decision and its cause in one sentence."""

    status: str  # "violated", "passed" or "inconclusive"
    cause: str
    facts: tuple[tuple[str, float | int | str], ...] = ()


def _inconclusive(what: str) -> Verdict:
    return Verdict(status="inconclusive", cause=f"inconclusive: {NOT_OBSERVABLE}: {what}")


def _failed(pair: PairTrace) -> Verdict | None:
    for trace in (pair.d, pair.d_added):
        if trace.error:
            return Verdict(status="inconclusive", cause=f"inconclusive: the training failed: {trace.error}")
    return None


def _no_steps(trace: Trace) -> Verdict | None:
    if not trace.steps:
        return _inconclusive(
            "no optimizer step and no in-place update of a parameter was seen (arithmetic outside torch, "
            "or parameters replaced rather than updated)"
        )
    return None


# ----------------------------------------------------------------------------- the checks
def steps(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """Steps taken (on D and on D′) against the claim's T."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    taken, taken_added = len(pair.d.steps), len(pair.d_added.steps)
    facts = (("steps_on_d", taken), ("steps_on_d_added", taken_added))
    if taken != taken_added:
        return Verdict(
            status="violated",
            cause=f"the training took {taken} steps on D and {taken_added} with one more record: the number of "
            "steps depends on the data, so no fixed T accounts for it",
            facts=facts,
        )
    if claim.steps is None:
        return Verdict(status="inconclusive", cause="inconclusive: the claim states no number of steps T", facts=facts)
    if taken != claim.steps:
        return Verdict(
            status="violated",
            cause=f"the training took {taken} steps where the claim accounts for T = {claim.steps}: the accountant "
            "and the loop count steps differently",
            facts=(*facts, ("claimed_steps", claim.steps)),
        )
    return Verdict(status="passed", cause=f"{taken} steps, as the claim's T", facts=facts)


def _binom_sf(k: int, n: int, q: float) -> float:
    """P(X ≥ k), X ~ Binomial(n, q)."""
    from scipy.stats import binom

    return float(binom.sf(k - 1, n, q)) if k > 0 else 1.0


def _binom_cdf(k: int, n: int, q: float) -> float:
    from scipy.stats import binom

    return float(binom.cdf(k, n, q))


def _all_equal_probability(size: int, records: int, q: float, lots: int) -> float:
    """P(``lots`` independent Binomial(records, q) lot sizes all equal) — any common size."""
    from scipy.stats import binom

    pmf = binom.pmf(range(records + 1), records, q)
    return float(sum(p**lots for p in pmf))


def sampling_rate(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """Per-record inclusion over the steps against Poisson sampling at q (exact binomial tests)."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    if not (pair.d.lots_seen and pair.d_added.lots_seen):
        return _inconclusive(
            "the training never read rows of the dataset's feature tensor (a copy taken outside torch)"
        )
    q = claim.sampling_rate
    if q is None:
        return Verdict(status="inconclusive", cause="inconclusive: the claim states no sampling rate q")
    n, added = pair.records, pair.records
    alpha = (1.0 - confidence) / 3.0  # three tests, Bonferroni
    # Rows as sets: a loader reads a row twice to learn shapes (Opacus's empty-lot collate), not to train twice.
    lots_d = [set(s.lot) for s in pair.d.steps]
    lots_added = [set(s.lot) for s in pair.d_added.steps]
    t = len(lots_added)
    k = sum(added in lot for lot in lots_added)
    p_added = _binom_sf(k, t, q)
    facts: tuple[tuple[str, float | int | str], ...] = (("added_record_lots", k), ("steps", t))
    if p_added < alpha:
        return Verdict(
            status="violated",
            cause=f"the added record (alone in its class) was in {k} of {t} lots where Poisson sampling at q = {q:g} "
            f"draws it in {q * t:.1f} on average (p = {p_added:.2g}): the sampler draws it more often than claimed",
            facts=facts,
        )
    m = sum(len(lot) for lot in lots_d)
    trials = n * len(lots_d)
    low, high = _binom_cdf(m, trials, q), _binom_sf(m, trials, q)
    if trials and min(low, high) < alpha / 2:
        return Verdict(
            status="violated",
            cause=f"the lots held {m} records over {len(lots_d)} steps of {n} records ({m / trials:.3g} per record "
            f"and step) where Poisson sampling at q = {q:g} gives {q:g} (p = {2 * min(low, high):.2g})",
            facts=(*facts, ("inclusions", m)),
        )
    sizes = {len(lot) for lot in lots_d}
    if len(lots_d) > 1 and len(sizes) == 1:
        p_equal = _all_equal_probability(next(iter(sizes)), n, q, len(lots_d))
        if p_equal < alpha:
            return Verdict(
                status="violated",
                cause=f"every one of the {len(lots_d)} lots held exactly {next(iter(sizes))} records (p = "
                f"{p_equal:.2g} under Poisson sampling): fixed-size batches, accounted as Poisson at q = {q:g}",
                facts=facts,
            )
    return Verdict(
        status="passed",
        cause=f"the added record was in {k} of {t} lots and each record in {m / max(trials, 1):.3g} per step, "
        f"consistent with Poisson sampling at q = {q:g}",
        facts=facts,
    )


def noise(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """Gaussian noise on every update of every step, of one scale on D and D′."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    d = pair.d
    if d.gaussian_draws == 0:
        if d.external:
            return _inconclusive(
                f"no Gaussian draw in torch, and {d.external} float array(s) entered torch from NumPy during "
                "training: the noise, if any, is drawn where the hooks cannot see it"
            )
        return Verdict(
            status="violated",
            cause="no Gaussian noise was drawn: the parameters are updated from the data alone (a noise "
            "multiplier of 0, or noise never added)",
        )
    for i, step in enumerate(d.steps):
        if step.unnoised:
            return Verdict(
                status="violated",
                cause=f"at step {i + 1} the {step.unnoised[0]} reached the parameters without Gaussian noise "
                "(a parameter outside the private optimizer, or updated from the plain gradient)",
            )
        if not step.sums:
            return Verdict(
                status="violated",
                cause=f"step {i + 1} updated the parameters without adding Gaussian noise to a sum",
            )
    repeated = _repeated_noise(d)
    if repeated is not None:
        return Verdict(
            status="violated",
            cause=f"the Gaussian draw #{repeated[1]} repeats draw #{repeated[0]} value for value: the noise comes "
            "from a generator re-seeded with a constant, so it does not hide the steps' differences",
        )
    leaked = _unnoised_state(pair)
    if leaked is not None:
        return Verdict(
            status="violated",
            cause=f"the returned model's {leaked} differs with one more record although every update followed the "
            "run on D: it is computed from the data without noise (a buffer such as BatchNorm's running statistics)",
        )
    stds_d = [s.stds for s in d.steps]
    stds_added = [s.stds for s in pair.d_added.steps]
    if len(stds_d) == len(stds_added):
        for i, (a, b) in enumerate(zip(stds_d, stds_added)):
            if a != b:
                return Verdict(
                    status="violated",
                    cause=f"the noise's standard deviation at step {i + 1} is {a[0]} on D and {b[0] if b else None} "
                    "with one more record: the noise scale depends on the data",
                )
    scales = sorted({s for step in stds_d for s in step if s is not None})
    shown = ", ".join(f"{s:g}" for s in scales[:3]) or "of a scale the hooks could not read"
    return Verdict(
        status="passed",
        cause=f"Gaussian noise (std {shown}) on every update of all {len(d.steps)} steps",
        facts=tuple((f"std_{i}", s) for i, s in enumerate(scales[:3])),
    )


def _repeated_noise(trace: Trace) -> tuple[int, int] | None:
    """The first Gaussian draw (1-based) whose values repeat an earlier one's exactly, as (earlier, later)."""
    seen: dict[tuple[str, tuple[int, ...], bytes], int] = {}
    for i, draw in enumerate(trace.draws):
        if draw.name not in GAUSSIAN or draw.value is None or draw.value.numel() < 8:
            continue
        key = (draw.name, draw.shape, draw.value.contiguous().numpy().tobytes())
        if key in seen:
            return seen[key] + 1, i + 1
        seen[key] = i
    return None


def _unnoised_state(pair: PairTrace) -> str | None:
    """A tensor of the returned model that differs between D and D′ though D′ followed D's updates."""
    d, e = pair.d, pair.d_added
    if e.divergence is not None or len(d.steps) != len(e.steps) or d.tokens != e.tokens:
        return None  # the runs parted: their final states need not match
    for key in sorted(set(d.state) & set(e.state)):
        x, y = d.state[key], e.state[key]
        if x.shape != y.shape or float(abs(x - y).max(initial=0.0)) > 1e-6 * (1.0 + float(abs(x).max(initial=0.0))):
            return key
    return None


def _gap(a: StepRecord, b: StepRecord) -> float | None:
    if len(a.sums) != len(b.sums) or any(x.shape != y.shape for x, y in zip(a.sums, b.sums)):
        return None
    return math.sqrt(sum(float((x - y).pow(2).sum()) for x, y in zip(a.sums, b.sums)))


def aligned_steps(pair: PairTrace) -> int:
    """How many leading steps the runs on D and D′ took along the same path (same calls, no replay divergence)."""
    a, b = pair.d.tokens, pair.d_added.tokens
    same = 0
    for x, y in zip(a, b):
        if x != y:
            break
        same += 1
    steps_same = sum(t.startswith("step:") for t in a[:same])
    if pair.d_added.divergence_step is not None:
        steps_same = min(steps_same, pair.d_added.divergence_step)
    return steps_same


def sensitivity(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """The measured per-step sensitivity ‖s′_t − s_t‖ of the pre-noise sums against C = noise std / σ."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    if not any(s.sums for s in pair.d.steps):
        return _inconclusive("no noise was added to a sum the hooks saw, so the mechanism's input is unseen")
    sigma = claim.noise_multiplier
    if not sigma:
        return Verdict(status="inconclusive", cause="inconclusive: the claim states no noise multiplier σ")
    worst, at, c_at = 0.0, 0, None
    # Only steps before the runs' paths part (the control-flow check's finding): later steps need not match.
    aligned = aligned_steps(pair)
    for i, (a, b) in enumerate(zip(pair.d.steps[:aligned], pair.d_added.steps[:aligned])):
        gap = _gap(a, b)
        if gap is None or not a.stds or a.stds[0] is None:
            continue
        c = a.stds[0] / sigma
        if c_at is None or gap / max(c, 1e-300) > worst / max(c_at, 1e-300):
            worst, at, c_at = gap, i + 1, c
    if c_at is None:
        return _inconclusive("the noise's scale or the sums of the two runs could not be matched step by step")
    facts: tuple[tuple[str, float | int | str], ...] = (("sensitivity", worst), ("calibrated_c", c_at), ("step", at))
    if worst > c_at * (1 + TOLERANCE) + 1e-9:
        return Verdict(
            status="violated",
            cause=f"one record changed the pre-noise sum by {worst:.4g} at step {at}, above the C = noise std / σ = "
            f"{c_at:.4g} the noise is calibrated for: clipping is missing, too loose, per batch or not per example",
            facts=facts,
        )
    if worst == 0.0:
        return Verdict(
            status="inconclusive",
            cause="inconclusive: the added record never changed a pre-noise sum (it was in no lot)",
            facts=facts,
        )
    return Verdict(
        status="passed",
        cause=f"one record changes a pre-noise sum by at most {worst:.4g} <= C = {c_at:.4g}",
        facts=facts,
    )


def _per_step(trace: Trace) -> list[float | None]:
    out: list[float | None] = []
    for s in trace.steps:
        values = sorted(set(s.normalisers))
        out.append(values[0] if len(values) == 1 else (None if not values else float("nan")))
    return out


def normaliser(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """The constant the noisy sum is divided by: public, or a function of the data."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    on_d, on_added = _per_step(pair.d), _per_step(pair.d_added)
    if all(x is None for x in on_d):
        return _inconclusive(
            "the noisy sum was never divided by a constant the hooks saw (a normaliser folded into the learning "
            "rate, or none)"
        )
    seen_d = {x for x in on_d if x is None or not math.isnan(x)}
    if len(seen_d) > 1 or any(x is not None and math.isnan(x) for x in on_d):

        def shown(x: float | None) -> str:
            return "none" if x is None else f"{x:g}"

        later = next(i for i, x in enumerate(on_d) if shown(x) != shown(on_d[0]))
        return Verdict(
            status="violated",
            cause=f"the noisy sum's normaliser is {shown(on_d[0])} at step 1 and {shown(on_d[later])} at step "
            f"{later + 1}: it follows the realised lot, which the noise does not cover; divide by a public "
            "constant (the expected lot size)",
        )
    c = next(iter(seen_d))
    seen_added = {x for x in on_added}
    if seen_added != {c}:
        c_added = ", ".join("none" if x is None else f"{x:g}" for x in sorted(seen_added, key=str)[:3])
        n = pair.records
        if len(seen_added) == 1 and claim.dataset_size_public:
            return Verdict(
                status="passed",
                cause=f"the normaliser is {c:g} on {n} records and {c_added} on {n + 1}: a function of the dataset "
                "size, which the claim declares public",
            )
        leak = _size_leak(claim)
        return Verdict(
            status="violated",
            cause=f"the normaliser is {c:g} on {n} records and {c_added} on {n + 1}: it depends on the data, and "
            f"the dataset size leaks through it{leak}; fix: divide by a constant (e.g. the expected lot size), or "
            "declare the dataset size public (--dataset-size-public) if it is",
        )
    return Verdict(status="passed", cause=f"the noisy sum is divided by the constant {c:g} on both datasets")


def _size_leak(claim: ClaimedMechanism) -> str:
    """What the dataset size leaks through the normaliser at the user's |D| (a parenthesised clause, or "").

    The training is replayed on |D| and |D| + 1 records. The released update is
    (sum + N(0, σ²C²))/m over d noised coordinates for T steps; with normalisers m and m′ the
    noise's scale differs by the factor m′/m, which a test on the update's squared norm (d·T
    coordinates, log-variance estimated to ±√(2/(d·T))) separates at
    μ ≈ |2 ln(m′/m)| / √(2/(d·T)) = √(2dT)·|ln(m′/m)| — a Gaussian-DP approximation of what the
    scale alone reveals, the sum's own difference aside.
    """
    n = claim.dataset_size
    if n is None or claim.replay is None:
        return ""
    at = claim.replay(n)
    if at is None:
        return f" (not replayed at your |D| = {n}: too large for the replay)"
    on_d, on_added = _per_step(at.d), _per_step(at.d_added)
    values = {x for x in on_d + on_added if x is not None and not math.isnan(x)}
    if not values or len(set(on_d)) != 1 or len(set(on_added)) != 1:
        return f" (at your |D| = {n} the normaliser follows the lot, as above)"
    m, m_added = on_d[0], on_added[0]
    dims = sum(int(x.numel()) for x in at.d.steps[0].sums) if at.d.steps else 0
    steps = len(at.d.steps)
    from dpaudit.privacy.gaussian import gdp_epsilon

    def leak(a: float, b: float) -> str:
        mu = math.sqrt(2.0 * dims * steps) * abs(math.log(b / a))
        return f"μ ≈ {mu:.3g}-GDP, ε ≈ {gdp_epsilon(mu=mu, delta=claim.delta):.3g} at δ = {claim.delta:g}"

    if m is None or m_added is None or not dims:
        return ""
    if m == m_added:
        return (
            f" (at your |D| = {n} it is {m:g} on |D| and on |D| + 1, so nothing leaks through it for this pair; where "
            f"it steps from {m:g} to {m + 1:g}, the noise's scale changes by 1/{m:g}: {leak(m, m + 1)} over "
            f"{dims} noised coordinates and {steps} steps)"
        )
    return (
        f" (at your |D| = {n} it is {m:g} on |D| and {m_added:g} on |D| + 1, so the noise's scale changes: "
        f"{leak(m, m_added)} over {dims} noised coordinates and {steps} steps)"
    )


def control_flow(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """Anything differing between the runs on D and D′ other than the mechanism's input."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    for trace in (pair.d_added,):
        if trace.divergence:
            return Verdict(
                status="violated",
                cause=f"with one more record the training took another path: {trace.divergence}",
            )
    a, b = pair.d.tokens, pair.d_added.tokens
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            step = sum(t.startswith("step:") for t in a[:i]) + 1
            return Verdict(
                status="violated",
                cause=f"with one more record the training does {y!r} where on D it does {x!r} (step {step}): "
                "its control flow depends on the data",
            )
    if len(a) != len(b):
        return Verdict(
            status="violated",
            cause=f"with one more record the training makes {len(b)} observed calls where on D it makes {len(a)}: "
            "its control flow depends on the data",
        )
    n = pair.records
    for i, (s, t) in enumerate(zip(pair.d.steps, pair.d_added.steps)):
        if set(s.lot) != {r for r in t.lot if r != n}:
            return Verdict(
                status="violated",
                cause=f"with one more record, other records' membership of lot {i + 1} changed: the sampling "
                "decisions depend on the data (a weighted or data-sized sampler)",
            )
    return Verdict(
        status="passed",
        cause=f"the same {len(pair.d.steps)} steps and random draws with one more record; only the mechanism's "
        "input differed",
    )


def state(pair: PairTrace, claim: ClaimedMechanism, confidence: float) -> Verdict:
    """A second training on D, after the one on D′, returns the first one's model."""
    early = _failed(pair) or _no_steps(pair.d)
    if early:
        return early
    if pair.d_again.error:
        return Verdict(status="inconclusive", cause=f"inconclusive: the training failed: {pair.d_again.error}")
    first, again = pair.d.state, pair.d_again.state
    if not first:
        return _inconclusive("the training returned no torch module whose state could be compared")
    if set(first) != set(again):
        return Verdict(
            status="violated",
            cause="a second training on D returned a model with other tensors after a training on D′: "
            "state survives between runs",
        )
    worst_key, worst = "", 0.0
    for key in sorted(first):
        x, y = first[key], again[key]
        gap = float("inf") if x.shape != y.shape else float(abs(x - y).max(initial=0.0))
        if gap > worst:
            worst_key, worst = key, gap
    if worst > 0:
        return Verdict(
            status="violated",
            cause=f"a second training on D with the same seed and random draws returned a different {worst_key} "
            f"(by up to {worst:.3g}) after a training on D′: state survives between runs (a cache, a global "
            "buffer or a generator kept across calls)",
        )
    return Verdict(status="passed", cause="a second training on D, after one on D′, returned the same model exactly")


#: name → (order, decision, detects, misses).
DECISIONS: dict[str, tuple[int, Callable[[PairTrace, ClaimedMechanism, float], Verdict], str, str]] = {
    "greybox-noise": (
        1,
        noise,
        "noise missing, missing on some parameters or steps, or scaled by the data",
        "noise drawn outside torch (NumPy, extensions): inconclusive, not observable",
    ),
    "greybox-sensitivity": (
        4,
        sensitivity,
        "a per-step sensitivity above the C the noise is calibrated for: clipping missing, too loose, per batch",
        "clipping bugs that one large-gradient record does not show",
    ),
    # Before the sampling rate: a sampler whose rate follows len(dataset) (Opacus's default) is
    # usually the same root as a normaliser that does, and the normaliser names it.
    "greybox-normaliser": (
        2,
        normaliser,
        "normalisers of the noisy sum that follow the lot or the dataset size",
        "normalisers folded into the learning rate (not a division the hooks see)",
    ),
    "greybox-sampling-rate": (
        3,
        sampling_rate,
        "lots not drawn by Poisson sampling at q: other rates, weighted or fixed-size lots",
        "lots read from a copy of the dataset taken outside torch",
    ),
    "greybox-steps": (
        5,
        steps,
        "more or fewer steps than the claim's T, or a number of steps that depends on the data",
        "steps that update parameters outside torch",
    ),
    "greybox-control-flow": (
        6,
        control_flow,
        "control flow or sampling decisions that change with one record",
        "differences in arithmetic done outside torch",
    ),
    "greybox-state": (
        7,
        state,
        "state that survives between trainings (caches, global buffers, generators kept across calls)",
        "state that changes only what the returned model does not hold",
    ),
}


def claimed_mechanism(
    claim_dict: object,
    *,
    dataset_size_public: bool = False,
    dataset_size: int | None = None,
    delta: float = 1e-5,
    replay: Callable[[int], PairTrace | None] | None = None,
) -> ClaimedMechanism:
    """q, σ and T of a claim's stored event (the first of each found), ``None`` where it states none."""
    found: dict[str, float] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key in ("sampling_probability", "noise_multiplier", "count"):
                value = node.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in found:
                    found[key] = float(value)
            for value in node.values():
                walk(value)
        elif isinstance(node, Sequence) and not isinstance(node, str):
            for value in node:
                walk(value)

    walk(claim_dict)
    count = found.get("count")
    return ClaimedMechanism(
        sampling_rate=found.get("sampling_probability"),
        noise_multiplier=found.get("noise_multiplier"),
        steps=int(count) if count is not None else None,
        dataset_size_public=dataset_size_public,
        dataset_size=dataset_size,
        delta=delta,
        replay=replay,
    )
