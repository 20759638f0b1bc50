"""What ``dpaudit certify`` chooses when the user does not: radii, example counts, and which models it certifies.

Split from :mod:`dpaudit.app.runs.certify` (the run), which re-exports these names.
"""

from __future__ import annotations

from typing import Any

from dpaudit.results.certification import CertificationResult

__all__ = [
    "CERTIFY_BUDGET_SECONDS",
    "DEFAULT_RADII",
    "MAX_DEFAULT_EXAMPLES",
    "MIN_DEFAULT_EXAMPLES",
    "certifiable_defenses",
    "chosen_radii",
    "default_num_examples",
    "no_noise_layer_message",
]

DEFAULT_RADII = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)


def _listing(names: tuple[str, ...]) -> str:
    return " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"


def certifiable_defenses() -> tuple[str, ...]:
    """Registered defenses that store a certification spec (read from the registry)."""
    from defenses import DEFENSES

    return tuple(name for name, d in DEFENSES.items() if d.certification is not None)


def no_noise_layer_message(model_id: str, defense: str) -> str:
    """The one wording for a model ``certify`` cannot certify: it names the commands to use instead."""
    return (
        f"model {model_id} (defense {defense}) has no noise layer; certify needs a model trained with "
        f"{_listing(certifiable_defenses())}: train one with 'dpaudit train --defense NAME' and certify that "
        "record; for this model's robust accuracy under attack, run 'dpaudit compare' with an "
        "[attacks.evasion] table"
    )


def chosen_radii(own: CertificationResult | None, smooth: CertificationResult | None) -> tuple[tuple[float, ...], str]:
    """The radii a run without ``radii`` reports at, and how they were chosen (stored as ``radii_source``).

    From the model's own certificate (CERTIFY for a smoothing model):
    :meth:`~dpaudit.results.certification.CertificationResult.suggested_radii`, i.e. 0 and the
    10/25/50/75/90 % quantiles of its certified radii rounded down, so the certified accuracy at
    the smallest non-zero radius is not 0. A model that certifies no test point gets 0 and
    :data:`DEFAULT_RADII` (its certificate is then vacuous at every radius, and the attacks still
    measure something).
    """
    from dpaudit.results.certification import RADIUS_QUANTILES

    primary = own if own is not None else smooth
    assert primary is not None
    radii = primary.suggested_radii()
    quantiles = "/".join(f"{q:.0%}".rstrip("%") for q in RADIUS_QUANTILES)
    if len(radii) > 1:
        return radii, (
            f"chosen by certify (no radii given): 0 and the {quantiles} % quantiles of the radii "
            f"{primary.method} certified on correctly predicted test points, rounded down to two digits"
        )
    return (0.0, *DEFAULT_RADII), (
        f"chosen by certify (no radii given): {primary.method} certified no test point, so 0 and the fixed defaults"
    )


#: The default example count's budget for the certification draws on 2 CPU cores
#: (:mod:`dpaudit.compute_budget`); the evasion attacks on the same examples come on top.
CERTIFY_BUDGET_SECONDS = 180.0
#: The default example count's range: at least this many (a certified accuracy's resolution)...
MIN_DEFAULT_EXAMPLES = 100
#: ... and at most this many (all that a small model needs).
MAX_DEFAULT_EXAMPLES = 500


def default_num_examples(*, model_name: str, input_shape: Any, num_classes: int, model_options: Any, draws: int) -> int:
    """``certify``'s default example count: as many as fit ``CERTIFY_BUDGET_SECONDS`` of draws, within [100, 500].

    Each example costs ``draws`` forward passes (estimation and selection), counted from the
    architecture (:func:`dpaudit.compute_budget.forward_flops`), so the count is the same on every
    machine: 500 for the digits MLP, 112 for hgm-cnn on MNIST at 2,000 + 100 draws.
    """
    from dpaudit.compute_budget import examples_within, forward_flops

    flops = forward_flops(model_name, input_shape=input_shape, num_classes=num_classes, model_options=model_options)
    fit = examples_within(CERTIFY_BUDGET_SECONDS, flops_per_example=flops * max(1, int(draws)))
    return int(min(MAX_DEFAULT_EXAMPLES, max(MIN_DEFAULT_EXAMPLES, fit)))
