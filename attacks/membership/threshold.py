"""Threshold attacks: the target's output on the sample alone.

``loss`` (Yeom et al. 2018, §3.2: score = −cross-entropy), ``confidence`` (Salem et al. 2019,
§V: the log of the top softmax probability), ``entropy`` (Salem et al. 2019: score = −H(p)) and
``modified-entropy`` (Song & Mittal 2021, §3.1, Eq. 4); the scores are
:func:`attacks.membership.scores.threshold_scores`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attacks.membership.scores import threshold_scores
from attacks.membership.spec import MEMBERSHIP_ATTACKS, MembershipAttackSpec, MembershipContext
from dpaudit.parts import PlotStyle
from dpaudit.results import MembershipResult

__all__ = ["ThresholdConfig"]


@dataclass(frozen=True, kw_only=True)
class ThresholdConfig:
    """Threshold attacks have no parameters: they read the target's output on the sample alone."""


def _threshold(kind: str) -> Callable[[MembershipContext, Any], MembershipResult]:
    def run(context: MembershipContext, config: ThresholdConfig) -> MembershipResult:
        scores = threshold_scores(context.query_logits(), context.labels, kind=kind)
        return context.result(kind, scores, {"num_queries": 1})

    return run


_SUMMARIES = {
    "loss": "negative cross-entropy of the true label (Yeom et al. 2018, §3.2)",
    "confidence": "log of the top softmax probability (Salem et al. 2019, §V)",
    "entropy": "negative prediction entropy (Salem et al. 2019, §V)",
    "modified-entropy": "negative modified entropy Mentr(p, y) (Song & Mittal 2021, §3.1, Eq. 4)",
}
#: Each threshold attack's look in every figure (dashed apart: they often share an axes with the shadow-model attacks).
_STYLES = {
    "loss": PlotStyle(colour="#6B6B6B", marker="o", dash=":"),
    "confidence": PlotStyle(colour="#999933", marker="s", dash="-."),
    "entropy": PlotStyle(colour="#8C564B", marker="^", dash="--"),
    "modified-entropy": PlotStyle(colour="#332288", marker="D", dash=(0, (3, 1, 1, 1))),
}
for _kind, _summary in _SUMMARIES.items():
    MEMBERSHIP_ATTACKS.register(
        MembershipAttackSpec(
            name=_kind, summary=_summary, config_type=ThresholdConfig, run=_threshold(_kind), style=_STYLES[_kind]
        )
    )
