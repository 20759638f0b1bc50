"""The privacy claim of a PATE student's labels, beside the analysis that states it (torch-free).

:class:`PATEClaim` states the answers of a PATE aggregator (Papernot et al. 2017, 2018) by the
total RDP curve of the answered queries: data-independent, data-dependent, or a data-dependent
bound released with smooth sensitivity. It registers itself as the claim kind ``"pate"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dpaudit import _validate as v
from dpaudit.privacy.claims import CLAIM_KINDS, PrivacyClaim
from dpaudit.privacy.pate.analysis import PateAnalysis, rdp_to_epsilon
from dpaudit.privacy.pate.budget import worst_case_epsilon
from dpaudit.privacy.pate.smooth_sensitivity import SmoothSensitivityRelease
from dpaudit.privacy.record_claims import (
    RELATIVE_TOLERANCE,
    RebuiltClaim,
    agree,
    format_number,
    register_claim_rebuilder,
    required,
)

__all__ = ["PATE_ANALYSES", "PATEClaim", "pate_claim", "settings_used"]


#: How a PATE claim's RDP curve was obtained.
PATE_ANALYSES = ("data-independent", "data-dependent")
_PATE_PARAMETERS = {
    "lnmax": ("laplace_scale",),
    "gnmax": ("sigma",),
    "confident-gnmax": ("threshold", "threshold_sigma", "sigma"),
}


@CLAIM_KINDS.register
@dataclass(frozen=True, kw_only=True)
class PATEClaim(PrivacyClaim):
    """The privacy of a PATE student's labels: the aggregator's answers, as a total RDP curve.

    PATE's guarantee covers what leaves the teachers, the noisy answers to the student's
    queries (Papernot et al. 2017, §3; 2018, §4). Its data-dependent bound is computed from the
    votes themselves, so unlike a DP-SGD claim it cannot be recomputed from parameters: the
    claim carries the total RDP of the answers at each order, and ε at any δ follows by the
    standard conversion ε = min_λ RDP(λ) + ln(1/δ)/(λ − 1) the papers use (Mironov 2017,
    Proposition 3). A data-dependent ε released with smooth sensitivity (2018, §4.2) is stated at
    its one order λ (fixed from public parameters), as the noisy RDP estimate plus the release's
    own cost: a noisy estimate, not a bound.

    Attributes:
        aggregator: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        parameters: the aggregator's noise (``laplace_scale``; ``sigma``; ``threshold``,
            ``threshold_sigma`` and ``sigma``).
        num_queries: queries the student asked.
        num_answered: queries answered (all of them except under Confident-GNMax).
        orders: RDP orders λ > 1.
        rdp: total RDP of the answers at each order.
        analysis: ``"data-independent"`` or ``"data-dependent"`` (then ε is private information).
        smooth_sensitivity: ``{"beta": β, "sigma_ss": σ_ss}`` when the data-dependent bound was
            released with smooth sensitivity (then ``orders`` holds the one release order).
    """

    # Stored with the analysis before the curve, as PATE claims always were.
    __spec_keys__: ClassVar[tuple[str, ...]] = (
        *PrivacyClaim.__spec_keys__,
        "aggregator",
        "parameters",
        "num_queries",
        "num_answered",
        "analysis",
    )
    kind: ClassVar[str] = "pate"
    accountants: ClassVar[tuple[str, ...]] = ("rdp",)

    aggregator: str
    parameters: Mapping[str, float]
    num_queries: int
    num_answered: int
    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    analysis: str = "data-independent"
    smooth_sensitivity: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        v.choice("aggregator", self.aggregator, tuple(_PATE_PARAMETERS))
        v.choice("analysis", self.analysis, PATE_ANALYSES)
        if not isinstance(self.parameters, Mapping):
            raise v.invalid_type("parameters", f"parameters must be a mapping, got {v.short(self.parameters)}")
        wanted = _PATE_PARAMETERS[self.aggregator]
        if set(self.parameters) != set(wanted):
            raise v.invalid(
                "parameters",
                f"parameters of {self.aggregator} must be exactly {', '.join(wanted)}; "
                f"got {', '.join(sorted(self.parameters)) or 'none'}",
            )
        params = {k: v.positive(f"parameters.{k}", self.parameters[k]) for k in wanted}
        object.__setattr__(self, "parameters", params)
        queries = v.integer("num_queries", self.num_queries, minimum=0)
        answered = v.integer("num_answered", self.num_answered, minimum=0)
        if answered > queries:
            raise v.invalid("num_answered", f"num_answered must be <= num_queries ({queries}), got {answered!r}")
        orders = tuple(v.positive(f"orders[{i}]", x) for i, x in enumerate(self.orders))
        rdp = tuple(v.non_negative(f"rdp[{i}]", x) for i, x in enumerate(self.rdp))
        if not orders or len(orders) != len(rdp) or any(o <= 1 for o in orders):
            raise v.invalid(
                "orders",
                "orders and rdp must be equally long and non-empty, with every order > "
                f"1; got {len(orders)} orders, {len(rdp)} values",
            )
        object.__setattr__(self, "orders", orders)
        object.__setattr__(self, "rdp", rdp)
        if self.smooth_sensitivity is not None:
            if self.analysis != "data-dependent":
                raise v.invalid("smooth_sensitivity", "smooth_sensitivity applies to a data-dependent analysis only")
            if not isinstance(self.smooth_sensitivity, Mapping) or set(self.smooth_sensitivity) != {"beta", "sigma_ss"}:
                raise v.invalid(
                    "smooth_sensitivity",
                    f"smooth_sensitivity must hold exactly beta and sigma_ss, got {v.short(self.smooth_sensitivity)}",
                )
            ss = {k: v.positive(f"smooth_sensitivity.{k}", self.smooth_sensitivity[k]) for k in ("beta", "sigma_ss")}
            if len(orders) != 1:
                raise v.invalid("orders", f"a smooth-sensitivity release is stated at one order, got {len(orders)}")
            object.__setattr__(self, "smooth_sensitivity", ss)

    @property
    def data_dependent(self) -> bool:
        return self.analysis == "data-dependent"

    @property
    def sanitised(self) -> bool:
        return self.smooth_sensitivity is not None

    def epsilon(self, *, delta: float, accountant: str = "rdp") -> float:
        """ε at ``delta`` by the standard RDP conversion over the claim's orders."""
        v.choice("accountant", accountant, self.accountants)
        return rdp_to_epsilon(self.orders, self.rdp, delta=delta)[0]

    def epsilon_improved(self, *, delta: float) -> float:
        """ε at ``delta`` by the improved conversion (Balle et al. 2020), reported beside :meth:`epsilon`."""
        return min(
            rdp_to_epsilon(self.orders, self.rdp, delta=delta, conversion="improved")[0], self.epsilon(delta=delta)
        )


def pate_claim(
    analysis: PateAnalysis,
    *,
    parameters: dict[str, float],
    num_answered: int,
    data_dependent: bool = True,
    release: SmoothSensitivityRelease | None = None,
    description: str | None = None,
) -> PATEClaim:
    """The :class:`PATEClaim` of an analysed run of the aggregator.

    Args:
        analysis: the analysis of the vote matrix of the student's queries.
        parameters: the aggregator's noise parameters (as the claim names them).
        num_answered: how many queries were answered.
        data_dependent: state the data-dependent bound (else the data-independent one).
        release: the smooth-sensitivity release of the data-dependent bound, when it was made;
            the claim is then its noisy estimate, stated at the release's order.
        description: a human-readable account (default: derived).
    """
    bound = analysis.data_dependent if data_dependent else analysis.data_independent
    if release is not None:
        if not data_dependent:
            raise v.invalid("release", "release applies to the data-dependent bound; pass data_dependent=True")
        orders: tuple[float, ...] = (release.order,)
        # A low noise draw can push the estimate below zero; clipping it at 0 is post-processing.
        rdp: tuple[float, ...] = (max(0.0, release.rdp_noisy_estimate + release.rdp_release),)
        smooth: dict[str, float] | None = {"beta": release.beta, "sigma_ss": release.sigma_ss}
    else:
        orders = analysis.orders
        rdp = analysis.rdp_data_dependent if data_dependent else analysis.rdp_data_independent
        smooth = None
    kind = "data-dependent" if data_dependent else "data-independent"
    text = description or (
        f"PATE {bound.aggregator} "
        f"{', '.join(f'{k}={x:g}' for k, x in parameters.items())}: "
        f"{num_answered} of {bound.num_queries} queries answered, {kind}"
        + (" (smooth-sensitivity release)" if release is not None else "")
    )
    return PATEClaim(
        aggregator=bound.aggregator,
        parameters=parameters,
        num_queries=bound.num_queries,
        num_answered=num_answered,
        orders=orders,
        rdp=rdp,
        analysis=kind,
        smooth_sensitivity=smooth,
        description=text,
    )


def settings_used(config: Mapping[str, object], metrics: Mapping[str, object]) -> dict[str, object]:
    """The PATE settings a run used: its config, completed where a value was left unset.

    A PATE run derives what the user left unset (teachers, noise, threshold, queries, the
    aggregator) from public sizes, and keeps the values it used in its metrics as
    ``run_<key>``; the config itself keeps the values as asked (they name the record).
    """
    used = dict(config)
    for key, value in metrics.items():
        if key.startswith("run_") and used.get(key[4:]) is None:
            used[key[4:]] = value
    return used


def _optional_number(config: Mapping[str, object], key: str) -> float | None:
    """``config[key]`` as a float, ``None`` when unset; a ValueError naming the key when it is not a number."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config {key}={format_number(value)} is not a number")
    return float(value)


@register_claim_rebuilder("pate")
def _pate(
    stored: PrivacyClaim, config: Mapping[str, object], metrics: Mapping[str, object], num_members: int
) -> RebuiltClaim:
    """PATE: everything but the data-dependent curve from the config; the curve's ε against the run's."""
    assert isinstance(stored, PATEClaim)
    sources: dict[str, str] = {}
    settings = settings_used(config, metrics)

    def used(key: str) -> Any:
        # A value left unset was derived from public sizes; the run stores what it used as run_<key>.
        given = config.get(key) is not None
        sources[key] = (
            f"config {key}" if given else f"metrics run_{key} (config {key} unset: derived from public sizes)"
        )
        value = settings.get(key)
        if value is None:
            raise ValueError(
                f"{'config' if given else 'metrics'} is missing "
                f"{key if given else 'run_' + key!r}, which the claim is rebuilt from"
            )
        return value

    aggregator = used("aggregator")
    if aggregator not in _PATE_PARAMETERS:
        raise ValueError(f"config aggregator={aggregator!r} is not a PATE aggregator ({', '.join(_PATE_PARAMETERS)})")
    parameters = {k: float(used(k)) for k in _PATE_PARAMETERS[aggregator]}
    queries = used("queries")
    agree("metrics num_queries", required("metrics", metrics, "num_queries"), "config queries", queries)
    beta, sigma_ss = (
        _optional_number(config, "smooth_sensitivity_beta"),
        _optional_number(config, "smooth_sensitivity_sigma"),
    )
    smooth = None if beta is None or sigma_ss is None else {"beta": beta, "sigma_ss": sigma_ss}
    analysis = used("analysis")
    claim = PATEClaim(
        aggregator=aggregator,
        parameters=parameters,
        num_queries=queries,
        num_answered=required("metrics", metrics, "num_answered"),
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
    delta = float(required("config", config, "delta"))
    agree(
        f"claim epsilon at config delta={delta:g}",
        stored.epsilon(delta=delta),
        f"metrics {measured}",
        required("metrics", metrics, measured),
    )
    target = _optional_number(config, "target_epsilon")
    if target is not None:
        # A budget run is planned by the data-independent bound with every query charged: the
        # parameters it used must meet the target whatever the votes were.
        if aggregator == "lnmax":
            raise ValueError("config target_epsilon is set but config aggregator='lnmax' has no budget plan")
        worst = worst_case_epsilon(
            num_queries=int(queries),
            sigma=parameters["sigma"],
            threshold_sigma=parameters.get("threshold_sigma"),
            delta=delta,
        )
        if worst > target * (1 + RELATIVE_TOLERANCE):
            raise ValueError(
                f"metrics parameters spend epsilon={format_number(worst)} over {queries} "
                f"queries, above config target_epsilon={format_number(target)}"
            )
    sources.update(
        num_queries=sources.pop("queries"),
        num_answered="metrics num_answered",
        beta="config smooth_sensitivity_beta",
        sigma_ss="config smooth_sensitivity_sigma",
    )
    return RebuiltClaim(claim=claim, sources=sources)
