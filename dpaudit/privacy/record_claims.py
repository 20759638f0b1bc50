"""A record's claim rebuilt from the record's own configuration and metrics, per claim kind.

A stored record states its privacy claim beside the configuration that produced it and the
measured run (steps taken, calibrated σ, queries answered). The claim is what every ε_UB is
evaluated from, so a record whose claim says σ = 10 while its configuration ran σ = 1 must not
be audited or reported: its ε_UB would be 0.17 where the mechanism gives 3.90. Each claim kind
registers here how its claim follows from ``(config, metrics, number of members)``, without
torch and without the defenses (reports verify records too), and :func:`check_record_claim`
compares the rebuilt claim with the stored one, naming the first field that differs.

The DP-SGD rebuild follows the mechanism of Abadi et al. (2016, Algorithm 1) with q, σ and T
resolved as the defense plans them (a calibrated σ or step count is checked to be the
calibration's answer by evaluating ε on both sides of it, rather than re-running the search);
DP-PCA (§4) composes a ``Gaussian(σ_p)`` event, Poisson-sampled when q_p < 1. DSSGD's DP upload
is rebuilt from its parameters (Shokri & Shmatikov 2015, §5). PATE's data-dependent RDP curve
(Papernot et al. 2018, §4) cannot be rebuilt without the vote matrix: its aggregator, noise,
query counts and analysis are rebuilt from the configuration, and the ε it states is checked
against the ε the run measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event as dpe

from dpaudit import _validate as v
from dpaudit.privacy.claims import DPClaim, NonPrivateClaim, PrivacyClaim, dpsgd_claim
from dpaudit.privacy.pate.claim import PATEClaim, settings_used
from dpaudit.store import thaw

__all__ = ["RebuiltClaim", "ClaimRebuilder", "CLAIM_REBUILDERS", "register_claim_rebuilder", "rebuild_claim", "check_record_claim", "DPSGD_DEFAULT_SAMPLING_RATE"]

#: DP-SGD's sampling rate when a configuration gives neither a lot size nor a rate (Abadi et al.'s 600 of 60,000).
DPSGD_DEFAULT_SAMPLING_RATE = 0.01
#: Relative tolerance of the σ calibration (:func:`dpaudit.privacy.accountants.calibrate_noise_multiplier`).
_CALIBRATION_TOLERANCE = 1e-3
_REL = 1e-9


@dataclass(frozen=True, kw_only=True)
class RebuiltClaim:
    """The claim a record's configuration and metrics imply.

    Attributes:
        claim: the rebuilt claim (its description is not compared: it is prose).
        sources: for a claim field (by its path in :meth:`PrivacyClaim.to_dict`, e.g.
            ``event.event.event.noise_multiplier``, or by its last name), the record field it
            was rebuilt from (e.g. ``config noise_multiplier``), for error messages.
    """

    claim: PrivacyClaim
    sources: Mapping[str, str] = field(default_factory=dict)


#: ``rebuild(stored_claim, config, metrics, num_members) -> RebuiltClaim``; raises ``ValueError``
#: naming the field when the configuration and the metrics disagree with each other.
ClaimRebuilder = Callable[[PrivacyClaim, Mapping[str, Any], Mapping[str, Any], int], RebuiltClaim]

CLAIM_REBUILDERS: dict[str, ClaimRebuilder] = {}


def register_claim_rebuilder(kind: str) -> Callable[[ClaimRebuilder], ClaimRebuilder]:
    """Decorator: registers how claims of ``kind`` are rebuilt from a record's config and metrics."""

    def add(fn: ClaimRebuilder) -> ClaimRebuilder:
        CLAIM_REBUILDERS[kind] = fn
        return fn

    return add


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else repr(x) if isinstance(x, str) else str(x)


def _get(where: str, data: Mapping[str, Any], key: str) -> Any:
    if key not in data:
        raise ValueError(f"{where} is missing {key!r}, which the claim is rebuilt from")
    return data[key]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=_REL, abs_tol=0.0) or a == b
    return bool(a == b)


def _agree(what: str, value: Any, against: str, expected: Any) -> None:
    """Refuses ``value`` (named ``what``) unless it equals ``expected`` (named ``against``)."""
    if not _same(value, expected):
        raise ValueError(f"{what}={_num(value)} does not match {against}={_num(expected)}")


def rebuild_claim(stored: PrivacyClaim, *, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    """The claim of kind ``stored.kind`` that ``config`` and ``metrics`` imply.

    Raises:
        ValueError: no rebuilder for the kind, a field the rebuild needs is missing, or the
            configuration and the metrics disagree (named, with both values).
    """
    if stored.kind not in CLAIM_REBUILDERS:
        raise ValueError(f"claim kind {stored.kind!r} has no registered rebuilder, so the claim cannot be checked against the config; known: {', '.join(CLAIM_REBUILDERS)}")
    return CLAIM_REBUILDERS[stored.kind](stored, thaw(config), thaw(metrics), v.integer("num_members", num_members, minimum=0))


def _first_difference(stored: Any, rebuilt: Any, path: str) -> tuple[str, Any, Any] | None:
    if isinstance(stored, Mapping) and isinstance(rebuilt, Mapping):
        for key in [*rebuilt, *(k for k in stored if k not in rebuilt)]:
            if key == "description" and not path:
                continue
            if key not in stored or key not in rebuilt:
                return (f"{path}.{key}".lstrip("."), stored.get(key), rebuilt.get(key))
            found = _first_difference(stored[key], rebuilt[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(stored, (list, tuple)) and isinstance(rebuilt, (list, tuple)):
        if len(stored) != len(rebuilt):
            return (f"{path} length".lstrip("."), len(stored), len(rebuilt))
        for i, (a, b) in enumerate(zip(stored, rebuilt)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if _same(stored, rebuilt) else (path.lstrip("."), stored, rebuilt)


def check_record_claim(stored: PrivacyClaim, *, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> None:
    """Refuses a stored claim that differs from the one its record's config and metrics imply.

    Every field that ε_UB depends on is compared (numbers to a relative 1e-9); the description
    is prose and is not.

    Raises:
        ValueError: one line, ``claim FIELD=stored does not match SOURCE=rebuilt``.
    """
    rebuilt = rebuild_claim(stored, config=config, metrics=metrics, num_members=num_members)
    found = _first_difference(stored.to_dict(), rebuilt.claim.to_dict(), "")
    if found is None:
        return
    where, got, want = found
    leaf = where.rsplit(".", 1)[-1].split("[")[0]
    source = rebuilt.sources.get(where) or rebuilt.sources.get(leaf) or f"the value rebuilt from its config and metrics, {leaf}"
    raise ValueError(f"claim {where}={_num(got)} does not match {source}={_num(want)}")


@register_claim_rebuilder("nonprivate")
def _nonprivate(stored: PrivacyClaim, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    # ε = ∞ under every accountant: nothing in the config can make it smaller. Which defenses
    # may carry it is the defense registry's business (DefenseSpec.claim_kind_for).
    return RebuiltClaim(claim=NonPrivateClaim(neighbouring=stored.neighbouring, description=stored.description))


def _dpsgd_rate(config: Mapping[str, Any], n: int) -> tuple[float, str]:
    rate, lot = config.get("sampling_rate"), config.get("lot_size")
    if rate is not None:
        return float(v.half_open_unit("config.sampling_rate", rate)), "config sampling_rate"
    if lot is not None:
        return v.integer("config.lot_size", lot, minimum=1) / max(n, 1), f"config lot_size / members ({n})"
    return DPSGD_DEFAULT_SAMPLING_RATE, "the default sampling_rate"


def _pca_event(config: Mapping[str, Any]) -> dpe.DpEvent | None:
    if config.get("pca_components") is None or config.get("authors_batch_clipping") is True:
        return None  # the authors' batch-clipping path accounts DP-SGD alone
    event: dpe.DpEvent = dpe.GaussianDpEvent(float(v.positive("config.pca_noise", _get("config", config, "pca_noise"))))
    q_p = float(config.get("pca_sampling_rate", 1.0))
    return dpe.PoissonSampledDpEvent(q_p, event) if q_p < 1.0 else event


def _dp_event(config: Mapping[str, Any], *, q: float, sigma: float, steps: int) -> dpe.DpEvent:
    event = dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=steps).event
    pca = _pca_event(config)
    if pca is None:
        return event
    return pca if steps == 0 else dpe.ComposedDpEvent([pca, event])


@register_claim_rebuilder("dp")
def _dp(stored: PrivacyClaim, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    """DP-SGD (and Secure-SGD's DP-SGD part): q, σ, T as the defense plans them."""
    n = num_members
    q, q_source = _dpsgd_rate(config, n)
    _agree("metrics sampling_rate", _get("metrics", metrics, "sampling_rate"), q_source, q)
    sigma_cfg, target = config.get("noise_multiplier", "missing"), config.get("target_epsilon")
    if sigma_cfg == "missing":
        raise ValueError("config is missing 'noise_multiplier', which the claim is rebuilt from")
    epochs = config.get("epochs")
    steps_per_epoch = max(1, round(1.0 / q))
    cap = None if epochs is None else max(1, round(float(epochs) * steps_per_epoch))
    steps = v.integer("metrics.num_steps", _get("metrics", metrics, "num_steps"), minimum=0)
    sigma_metric = v.positive("metrics.noise_multiplier", _get("metrics", metrics, "noise_multiplier"))
    pca = _pca_event(config) is not None
    dp_path = "event.events[1]" if pca and steps > 0 else "event"
    gauss_path = f"{dp_path}.event.event" if q < 1.0 else f"{dp_path}.event"
    sources = {f"{dp_path}.event.sampling_probability": q_source}
    if pca:
        sources.update(
            {"event.events[0].noise_multiplier": "config pca_noise", "event.events[0].event.noise_multiplier": "config pca_noise", "event.events[0].sampling_probability": "config pca_sampling_rate"}
        )
    delta, accountant = config.get("delta", 1e-5), config.get("accountant", "pld")

    def eps(s: float, t: int) -> float:
        return DPClaim(event=_dp_event(config, q=q, sigma=s, steps=t)).epsilon(delta=delta, accountant=accountant)

    if sigma_cfg is not None:
        sigma = float(v.positive("config.noise_multiplier", sigma_cfg))
        _agree("metrics noise_multiplier", sigma_metric, "config noise_multiplier", sigma)
        sources[f"{gauss_path}.noise_multiplier"] = "config noise_multiplier"
    else:
        # σ was calibrated to the target: the smallest σ (to the calibration's tolerance) with
        # ε ≤ target, so ε at σ is within the target and ε just below σ is beyond it.
        sigma = sigma_metric
        target_eps = float(v.positive("config.target_epsilon", target))
        lower = sigma * (1.0 - 1.001 * _CALIBRATION_TOLERANCE)
        if eps(sigma, steps) > target_eps * (1 + _REL) or (lower > 2e-3 and eps(lower, steps) <= target_eps):
            raise ValueError(
                f"metrics noise_multiplier={_num(sigma)} is not the noise multiplier calibrated to config target_epsilon={_num(target_eps)} over {steps} steps "
                f"under config accountant={config.get('accountant')!r} (a record calibrated by an older, unsound naive/strong analysis is one: retrain it with --force)"
            )
        sources[f"{gauss_path}.noise_multiplier"] = "metrics noise_multiplier (calibrated to config target_epsilon)"
    if target is None or sigma_cfg is None:
        if steps != cap:
            raise ValueError(f"metrics num_steps={steps} does not match config epochs={_num(epochs)}, which is {cap} steps of {steps_per_epoch} per epoch")
        sources[f"{dp_path}.count"] = "config epochs x steps per epoch"
    else:
        # Budget mode: as many steps as the target allows, up to the cap.
        target_eps = float(v.positive("config.target_epsilon", target))
        beyond = steps != cap and eps(sigma, steps + 1) <= target_eps
        if steps < 1 or eps(sigma, steps) > target_eps * (1 + _REL) or beyond or (cap is not None and steps > cap):
            raise ValueError(
                f"metrics num_steps={steps} is not the number of steps config target_epsilon={_num(target_eps)} allows at noise_multiplier={_num(sigma)} "
                f"under config accountant={config.get('accountant')!r} (a record planned by an older, unsound naive/strong analysis is one: retrain it with --force)"
            )
        sources[f"{dp_path}.count"] = "metrics num_steps (the steps config target_epsilon allows)"
    claim = DPClaim(event=_dp_event(config, q=q, sigma=sigma, steps=steps))
    return RebuiltClaim(claim=claim, sources=sources)


_PATE_PARAMETERS = {"lnmax": ("laplace_scale",), "gnmax": ("sigma",), "confident-gnmax": ("threshold", "threshold_sigma", "sigma")}


@register_claim_rebuilder("pate")
def _pate(stored: PrivacyClaim, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    """PATE: everything but the data-dependent curve from the config; the curve's ε against the run's."""
    assert isinstance(stored, PATEClaim)
    sources: dict[str, str] = {}
    settings = settings_used(config, metrics)

    def used(key: str) -> Any:
        # A value left unset was derived from public sizes; the run stores what it used as run_<key>.
        given = config.get(key) is not None
        sources[key] = f"config {key}" if given else f"metrics run_{key} (config {key} unset: derived from public sizes)"
        value = settings.get(key)
        if value is None:
            raise ValueError(f"{'config' if given else 'metrics'} is missing {key if given else 'run_' + key!r}, which the claim is rebuilt from")
        return value

    aggregator = used("aggregator")
    if aggregator not in _PATE_PARAMETERS:
        raise ValueError(f"config aggregator={aggregator!r} is not a PATE aggregator ({', '.join(_PATE_PARAMETERS)})")
    parameters = {k: float(used(k)) for k in _PATE_PARAMETERS[aggregator]}
    queries = used("queries")
    _agree("metrics num_queries", _get("metrics", metrics, "num_queries"), "config queries", queries)
    beta, sigma_ss = config.get("smooth_sensitivity_beta"), config.get("smooth_sensitivity_sigma")
    smooth = None if beta is None or sigma_ss is None else {"beta": float(beta), "sigma_ss": float(sigma_ss)}
    analysis = used("analysis")
    claim = PATEClaim(
        aggregator=aggregator,
        parameters=parameters,
        num_queries=queries,
        num_answered=_get("metrics", metrics, "num_answered"),
        orders=stored.orders,
        rdp=stored.rdp,
        analysis=analysis,
        smooth_sensitivity=smooth,
        neighbouring="add_or_remove_one",
    )
    # The RDP curve itself came from the votes: its ε must be the one the run measured.
    # Records stored before the release and the realised cost were named as such carry the old keys.
    names: tuple[str, ...]
    if smooth is not None:
        names = ("epsilon_noisy_estimate", "epsilon_smooth_sensitivity")
    elif analysis == "data-dependent":
        names = ("epsilon_data_dependent_realised", "epsilon_data_dependent")
    else:
        names = ("epsilon_data_independent",)
    measured = next((n for n in names if n in metrics), names[0])
    delta = float(_get("config", config, "delta"))
    _agree(f"claim epsilon at config delta={delta:g}", stored.epsilon(delta=delta), f"metrics {measured}", _get("metrics", metrics, measured))
    target = config.get("target_epsilon")
    if target is not None:
        # A budget run is planned by the data-independent bound with every query charged: the
        # parameters it used must meet the target whatever the votes were.
        from dpaudit.privacy.pate.budget import worst_case_epsilon

        if aggregator == "lnmax":
            raise ValueError("config target_epsilon is set but config aggregator='lnmax' has no budget plan")
        worst = worst_case_epsilon(num_queries=int(queries), sigma=parameters["sigma"], threshold_sigma=parameters.get("threshold_sigma"), delta=delta)
        if worst > float(target) * (1 + _REL):
            raise ValueError(f"metrics parameters spend epsilon={_num(worst)} over {queries} queries, above config target_epsilon={_num(float(target))}")
    sources.update(num_queries=sources.pop("queries"), num_answered="metrics num_answered", beta="config smooth_sensitivity_beta", sigma_ss="config smooth_sensitivity_sigma")
    return RebuiltClaim(claim=claim, sources=sources)


@register_claim_rebuilder("dssgd-svt")
def _dssgd(stored: PrivacyClaim, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    """DSSGD's DP upload: the sparse-vector parameters from the config, c and |Δw| from the run.

    With ``target_epsilon`` the config keeps ε per parameter or R unset: both are planned again
    from it and the public c (:func:`defenses.dssgd.plan.plan_budget`), and must be what the run
    used, so the claim can never spend more than the budget.
    """
    from dpaudit.privacy.dssgd import dssgd_svt_claim
    from dpaudit.privacy.dssgd_budget import fraction_count, plan_budget

    eps = _get("config", config, "dp_epsilon")
    target = config.get("target_epsilon")
    if eps is None and target is None:
        raise ValueError("config dp_epsilon=None states no DP upload, but the claim is of kind 'dssgd-svt'")
    num_parameters = _get("metrics", metrics, "num_parameters")
    c = _get("metrics", metrics, "uploads_per_turn")
    rounds = config.get("rounds")
    sources = {"epsilon_per_parameter": "config dp_epsilon", "num_rounds": "config rounds"}
    if target is not None:
        _agree("metrics uploads_per_turn", c, "config upload_fraction x metrics num_parameters", fraction_count("upload_fraction", _get("config", config, "upload_fraction"), num_parameters))
        plan = plan_budget(target_epsilon=target, dp_epsilon=eps, rounds=rounds, uploads_per_turn=c)
        if eps is None:
            eps = plan.dp_epsilon
            _agree("metrics run_dp_epsilon", _get("metrics", metrics, "run_dp_epsilon"), f"the dp_epsilon config target_epsilon={_num(target)} allows", eps)
            sources["epsilon_per_parameter"] = "config target_epsilon / (metrics uploads_per_turn x config rounds)"
        if rounds is None:
            rounds = plan.rounds
            _agree("metrics run_rounds", _get("metrics", metrics, "run_rounds"), f"the rounds config target_epsilon={_num(target)} allows", rounds)
            sources["num_rounds"] = "the rounds config target_epsilon allows at config dp_epsilon"
    claim = dssgd_svt_claim(
        epsilon_per_parameter=eps,
        bound=_get("config", config, "bound"),
        threshold=_get("config", config, "threshold"),
        split=_get("config", config, "budget_split"),
        uploads_per_round=c,
        num_rounds=_get("config", config, "rounds") if rounds is None else rounds,
        num_parameters=num_parameters,
    )
    sources.update(
        {
            "bound": "config bound",
            "threshold": "config threshold",
            "split": "config budget_split",
            "uploads_per_round": "metrics uploads_per_turn",
            "num_parameters": "metrics num_parameters",
        }
    )
    return RebuiltClaim(claim=claim, sources=sources)
