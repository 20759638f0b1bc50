"""Accounting of differentially private DSSGD's upload (Shokri & Shmatikov, CCS 2015, §5).

The paper states its ε *per uploaded parameter per round*. One participant uploads up to
c = θ_u·|Δw| values in a round, so what the round spends on that participant's data is c
times as much, and R rounds R times that (basic composition). This module derives the cost
of every piece of the mechanism from its noise scales, never from a label, and the claim
kind :class:`DSSGDClaim` reports the composed figure beside the paper's.

The mechanism (``defenses.dssgd.svt``) is Dwork & Roth's NumericSparse (The Algorithmic
Foundations of Differential Privacy, 2014, Algorithm 3, Theorem 3.28): values bounded to
[−γ, γ]; a noisy threshold τ + Lap(b_t) redrawn after every positive answer; each visited
entry's |value| + Lap(b_q) compared to it; a positive answer released as value + Lap(b_r).
Torch-free on purpose: records and audits load claims without the training stack.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from dpaudit import _validate as v
from dpaudit.privacy.claims import CLAIM_KINDS, PrivacyClaim
from dpaudit.privacy.dssgd_budget import fraction_count, plan_budget
from dpaudit.privacy.record_claims import RebuiltClaim, agree, format_number, register_claim_rebuilder, required

__all__ = [
    "SPLITS",
    "SELECTION_SHARE",
    "NoiseScales",
    "noise_scales",
    "upload_costs",
    "round_epsilon",
    "DSSGDClaim",
    "dssgd_svt_claim",
]

#: ``"sum"``: selection 8/9, release 1/9 of ε (shares sum to ε); ``"seed"``: the seed's printed 8/9 and 2/9.
SPLITS = ("sum", "seed")
#: The share of ε spent on selecting one upload (the seed's ε1 = 8/9 ε, kept by both splits).
SELECTION_SHARE = 8.0 / 9.0


@dataclass(frozen=True)
class NoiseScales:
    """The Laplace scales of one participant's upload and what they cost.

    Attributes:
        epsilon_per_parameter: the paper's ε (per uploaded parameter per round).
        bound: γ; values are bounded to [−γ, γ] before anything is computed.
        sensitivity: Δf = 2γ.
        split: ``"sum"`` or ``"seed"``.
        threshold: scale b_t of the threshold noise (redrawn after every upload).
        query: scale b_q of the noise added to each visited |value|.
        release: scale b_r of the noise added to an uploaded value.
    """

    epsilon_per_parameter: float
    bound: float
    sensitivity: float
    split: str
    threshold: float
    query: float
    release: float

    @property
    def selection_cost(self) -> float:
        """ε of one above-threshold segment: Δf/b_t + 2Δf/b_q (Dwork & Roth, Thm 3.23's proof)."""
        return self.sensitivity / self.threshold + 2.0 * self.sensitivity / self.query

    @property
    def release_cost(self) -> float:
        """ε of one release: Δf/b_r (the Laplace mechanism)."""
        return self.sensitivity / self.release

    @property
    def upload_cost(self) -> float:
        """ε of one upload, selection plus release; equals the paper's ε under both splits."""
        return self.selection_cost + self.release_cost


def noise_scales(*, epsilon: float, bound: float, split: str = "sum") -> NoiseScales:
    """The noise scales of DP-DSSGD's upload at the paper's ε per parameter per round.

    The seed's round budget is c·ε with σ(x) = 2cΔf/x; evaluated at shares of c·ε the c
    cancels, so the scales do not depend on c: threshold Lap(2Δf/(s1·ε)), query
    Lap(4Δf/(s1·ε)) (AboveThreshold's pair for an (s1·ε)-DP segment), release Lap(b_r).

    - ``"sum"``: s1 = 8/9, s2 = 1/9, b_r = Δf/(s2·ε): the shares sum to ε, each charged at
      what its noise costs.
    - ``"seed"``: as printed, ε1 = 8/9 ε, ε2 = 2/9 ε, b_r = σ(ε2) = 2Δf/ε2. The printed shares
      add to 10/9 ε, which reads as over-spending, but 2Δf/ε2 is twice the Laplace scale for
      ε2, so the release costs ε2/2 = ε/9 and the total is ε: both splits release with the
      same noise (b_r = 9Δf/ε). The cost here is derived from the scales, whatever the label.

    Δf = 2γ: after bounding, a value can move anywhere in [−γ, γ] when the participant's data
    change (the queried |value| moves by at most γ ≤ Δf, so the selection is charged
    conservatively). Bounding *before* the release matters: the seed adds the release noise
    to the raw value, whose sensitivity is unbounded.

    Raises:
        ValueError: ``epsilon`` or ``bound`` not finite and > 0, or an unknown ``split``.
    """
    eps = v.positive("epsilon", epsilon)
    gamma = v.positive("bound", bound)
    v.choice("split", split, SPLITS)
    sens = 2.0 * gamma
    eps1 = SELECTION_SHARE * eps
    release = sens / (eps / 9.0) if split == "sum" else 2.0 * sens / (2.0 * eps / 9.0)
    return NoiseScales(
        epsilon_per_parameter=eps,
        bound=gamma,
        sensitivity=sens,
        split=split,
        threshold=2.0 * sens / eps1,
        query=4.0 * sens / eps1,
        release=release,
    )


def upload_costs(
    *, sensitivity: float, threshold_scale: float, query_scale: float, release_scale: float
) -> tuple[float, float]:
    """(selection segment ε, release ε) of one upload, from the noise scales.

    A segment of AboveThreshold with threshold noise Lap(b_t) and query noise Lap(b_q) on
    sensitivity-Δ queries is (Δ/b_t + 2Δ/b_q)-DP (Dwork & Roth 2014, proof of Thm 3.23: the
    threshold shift costs Δ/b_t, the positive query's shift of 2Δ costs 2Δ/b_q); the release
    with Lap(b_r) is Δ/b_r-DP.
    """
    sens = v.positive("sensitivity", sensitivity)
    bt = v.positive("threshold_scale", threshold_scale)
    bq = v.positive("query_scale", query_scale)
    br = v.positive("release_scale", release_scale)
    return sens / bt + 2.0 * sens / bq, sens / br


def round_epsilon(scales: NoiseScales, *, uploads: int, exhausted: bool = False) -> float:
    """Pure ε of one participant's round that uploaded ``uploads`` values.

    ``uploads`` positive segments and releases (NumericSparse, Dwork & Roth Thm 3.28). When
    the sweep visited every entry before reaching c uploads (``exhausted``), the last open
    segment answered only "below" and costs its threshold shift Δf/b_t more; that is still
    below the c·ε the claim charges, since then uploads ≤ c − 1.
    """
    if not isinstance(scales, NoiseScales):
        raise v.invalid_type("scales", f"scales must be a NoiseScales, got {v.short(scales)}")
    used = v.integer("uploads", uploads, minimum=0)
    extra = scales.sensitivity / scales.threshold if exhausted else 0.0
    return used * scales.upload_cost + extra


@CLAIM_KINDS.register
@dataclass(frozen=True, kw_only=True)
class DSSGDClaim(PrivacyClaim):
    """One DSSGD participant's guarantee under the DP upload, composed over uploads and rounds.

    Each of the c uploads of a round is one above-threshold segment plus one release, each a
    pure-DP piece whose ε follows from its noise scale (:func:`upload_costs`). Accountants:

    - ``"pure"``: basic composition, R·c·(selection + release) — R·c·ε at the paper's ε.
    - ``"zcdp"``: each ε0-DP piece is ε0²/2-zCDP (Bun & Steinke 2016, Prop. 1.4); ρ adds over
      all 2·R·c pieces and ε = ρ + 2·sqrt(ρ·ln(1/δ)) (Prop. 1.3).

    Neighbouring relation: ``"replace_one"``. Since every value is bounded to [−γ, γ] and
    Δf = 2γ covers any move within it, the bound holds for any change of the participant's
    data in a round (so for add/remove too); replace-one is the relation Δf = 2γ is the
    sensitivity for.

    Attributes:
        epsilon_per_parameter: the paper's ε per uploaded parameter per round.
        bound: γ. sensitivity: Δf (= 2γ). threshold: τ. split: ``"sum"`` or ``"seed"``.
        threshold_scale, query_scale, release_scale: the Laplace scales (must match
            :func:`noise_scales`, so a record's ε and its noise cannot disagree).
        uploads_per_round: c, the most values uploaded in a round.
        num_rounds: R, rounds in which this participant uploaded.
        num_parameters: |Δw|.
    """

    kind: ClassVar[str] = "dssgd-svt"
    accountants: ClassVar[tuple[str, ...]] = ("pure", "zcdp")

    neighbouring: str = "replace_one"
    epsilon_per_parameter: float
    bound: float
    sensitivity: float
    threshold: float
    split: str
    threshold_scale: float
    query_scale: float
    release_scale: float
    uploads_per_round: int
    num_rounds: int
    num_parameters: int

    def __post_init__(self) -> None:
        super().__post_init__()
        # Validated under the field names first, so a bad file names the field it got wrong.
        eps = v.positive("epsilon_per_parameter", self.epsilon_per_parameter)
        gamma = v.positive("bound", self.bound)
        v.choice("split", self.split, SPLITS)
        scales = noise_scales(epsilon=eps, bound=gamma, split=self.split)
        threshold = v.real("threshold", self.threshold)
        if not math.isfinite(threshold):
            raise v.invalid("threshold", f"threshold must be finite, got {self.threshold!r}")
        object.__setattr__(self, "epsilon_per_parameter", scales.epsilon_per_parameter)
        object.__setattr__(self, "bound", scales.bound)
        object.__setattr__(self, "threshold", threshold)
        for name, want in (
            ("sensitivity", scales.sensitivity),
            ("threshold_scale", scales.threshold),
            ("query_scale", scales.query),
            ("release_scale", scales.release),
        ):
            got = v.positive(name, getattr(self, name))
            if not math.isclose(got, want, rel_tol=1e-9):
                raise v.invalid(
                    name,
                    f"{name} must be {want!r} for "
                    f"epsilon_per_parameter={scales.epsilon_per_parameter!r}, "
                    f"bound={scales.bound!r}, split={self.split!r}; got {got!r}",
                )
            object.__setattr__(self, name, got)
        n = v.integer("num_parameters", self.num_parameters, minimum=1)
        c = v.integer("uploads_per_round", self.uploads_per_round, minimum=1)
        if c > n:
            raise v.invalid("uploads_per_round", f"uploads_per_round must be <= num_parameters ({n}), got {c!r}")
        v.integer("num_rounds", self.num_rounds, minimum=0)
        if not self.description:
            object.__setattr__(self, "description", self._describe())

    @classmethod
    def build(
        cls,
        *,
        epsilon_per_parameter: float,
        bound: float,
        threshold: float,
        uploads_per_round: int,
        num_rounds: int,
        num_parameters: int,
        split: str = "sum",
    ) -> DSSGDClaim:
        """The claim with the scales :func:`noise_scales` gives (what the defense records)."""
        s = noise_scales(epsilon=epsilon_per_parameter, bound=bound, split=split)
        return cls(
            epsilon_per_parameter=s.epsilon_per_parameter,
            bound=s.bound,
            sensitivity=s.sensitivity,
            threshold=threshold,
            split=split,
            threshold_scale=s.threshold,
            query_scale=s.query,
            release_scale=s.release,
            uploads_per_round=uploads_per_round,
            num_rounds=num_rounds,
            num_parameters=num_parameters,
        )

    def _costs(self) -> tuple[float, float]:
        return upload_costs(
            sensitivity=self.sensitivity,
            threshold_scale=self.threshold_scale,
            query_scale=self.query_scale,
            release_scale=self.release_scale,
        )

    @property
    def epsilon_per_round(self) -> float:
        """Pure ε of one round: c·(selection + release)."""
        sel, rel = self._costs()
        return self.uploads_per_round * (sel + rel)

    @property
    def epsilon_per_upload(self) -> float:
        """ε of one uploaded parameter, derived from the scales: equals the paper's ``epsilon_per_parameter``."""
        sel, rel = self._costs()
        return sel + rel

    def _describe(self) -> str:
        total = self.num_rounds * self.epsilon_per_round
        return (
            f"DSSGD DP upload ({self.split} split): ε = "
            f"{self.epsilon_per_parameter:g} per parameter per round (paper's "
            "figure); "
            f"composed over c = {self.uploads_per_round} uploads × {self.num_rounds} rounds: ε = {total:g} (pure)"
        )

    def epsilon(self, *, delta: float, accountant: str = "pure") -> float:
        """ε_UB at ``delta``: ``"pure"`` (δ ignored) or ``"zcdp"``."""
        v.choice("accountant", accountant, self.accountants)
        d = v.open_unit("delta", delta)
        sel, rel = self._costs()
        pieces = self.num_rounds * self.uploads_per_round
        if accountant == "pure":
            return pieces * (sel + rel)
        rho = pieces * (sel * sel + rel * rel) / 2.0
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / d))


def dssgd_svt_claim(
    *,
    epsilon_per_parameter: float,
    bound: float,
    threshold: float,
    uploads_per_round: int,
    num_rounds: int,
    num_parameters: int,
    split: str = "sum",
) -> DSSGDClaim:
    """The claim of one participant of DP-DSSGD (:meth:`DSSGDClaim.build`; the name the defense imports)."""
    return DSSGDClaim.build(
        epsilon_per_parameter=epsilon_per_parameter,
        bound=bound,
        threshold=threshold,
        uploads_per_round=uploads_per_round,
        num_rounds=num_rounds,
        num_parameters=num_parameters,
        split=split,
    )


def _number(config: Mapping[str, object], key: str) -> float | None:
    """``config[key]`` as stored (an int stays an int), ``None`` when unset; a ValueError naming it if not a number."""
    value = config.get(key)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise ValueError(f"config {key}={format_number(value)} is not a number")


def _count(config: Mapping[str, object], key: str) -> int | None:
    """``config[key]``, ``None`` when unset; a ValueError naming it when it is not an integer."""
    value = config.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"config {key}={format_number(value)} is not an integer")


@register_claim_rebuilder("dssgd-svt")
def _dssgd(
    stored: PrivacyClaim, config: Mapping[str, object], metrics: Mapping[str, object], num_members: int
) -> RebuiltClaim:
    """DSSGD's DP upload: the sparse-vector parameters from the config, c and |Δw| from the run.

    With ``target_epsilon`` the config keeps ε per parameter or R unset: both are planned again
    from it and the public c (:func:`defenses.dssgd.plan.plan_budget`), and must be what the run
    used, so the claim can never spend more than the budget.
    """
    eps = required("config", config, "dp_epsilon")
    target = _number(config, "target_epsilon")
    if eps is None and target is None:
        raise ValueError("config dp_epsilon=None states no DP upload, but the claim is of kind 'dssgd-svt'")
    num_parameters = required("metrics", metrics, "num_parameters")
    c = required("metrics", metrics, "uploads_per_turn")
    rounds = _count(config, "rounds")
    sources = {"epsilon_per_parameter": "config dp_epsilon", "num_rounds": "config rounds"}
    if target is not None:
        agree(
            "metrics uploads_per_turn",
            c,
            "config upload_fraction x metrics num_parameters",
            fraction_count("upload_fraction", required("config", config, "upload_fraction"), num_parameters),
        )
        plan = plan_budget(target_epsilon=target, dp_epsilon=eps, rounds=rounds, uploads_per_turn=c)
        if eps is None:
            eps = plan.dp_epsilon
            agree(
                "metrics run_dp_epsilon",
                required("metrics", metrics, "run_dp_epsilon"),
                f"the dp_epsilon config target_epsilon={format_number(target)} allows",
                eps,
            )
            sources["epsilon_per_parameter"] = "config target_epsilon / (metrics uploads_per_turn x config rounds)"
        if rounds is None:
            rounds = plan.rounds
            agree(
                "metrics run_rounds",
                required("metrics", metrics, "run_rounds"),
                f"the rounds config target_epsilon={format_number(target)} allows",
                rounds,
            )
            sources["num_rounds"] = "the rounds config target_epsilon allows at config dp_epsilon"
    claim = dssgd_svt_claim(
        epsilon_per_parameter=eps,
        bound=required("config", config, "bound"),
        threshold=required("config", config, "threshold"),
        split=required("config", config, "budget_split"),
        uploads_per_round=c,
        num_rounds=required("config", config, "rounds") if rounds is None else rounds,
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
