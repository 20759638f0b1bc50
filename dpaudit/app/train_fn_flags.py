"""The flags that name a third-party training function and the claim it is held to.

``dpaudit audit`` and ``dpaudit check`` both test code the suite did not write: a
``--train-fn MODULE:FUNCTION`` (``train(dataset, *, seed, initial_state=None) -> nn.Module``),
optionally the ``--model-fn`` that builds its architecture, and the privacy claim its author
makes, as a JSON file (``--claim``) or as the three DP-SGD numbers (``--claim-*``). The flags
are declared here once, so both verbs word, validate and refuse them the same way.

Torch-free: the claim and the callables are imported when the command runs, not when the
parser is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import UsageError, arg, path_type

__all__ = [
    "TRAIN_FN_HELP",
    "pos_int",
    "add_train_fn_flag",
    "add_model_fn_flag",
    "add_claim_flags",
    "claim_from_args",
    "resolve_callables",
]

TRAIN_FN_HELP = "third-party train(dataset, *, seed) -> nn.Module, as module:function or path/to/file.py:function"


def pos_int(name: str) -> Any:
    """An argparse ``type`` for a count of at least 1 (validated as ``name``)."""
    return arg(name, lambda n, x: v.integer(n, x, minimum=1), int)


def add_train_fn_flag(p: Any, *, required: bool = False, help: str = TRAIN_FN_HELP) -> None:
    """``--train-fn MODULE:FUNCTION`` on ``p`` (a parser or a mutually exclusive group)."""
    p.add_argument("--train-fn", metavar="MODULE:FUNCTION", required=required, help=help)


def add_model_fn_flag(p: argparse.ArgumentParser, *, help: str) -> None:
    """``--model-fn MODULE:FUNCTION``: a zero-argument builder of the architecture ``--train-fn`` trains."""
    p.add_argument("--model-fn", metavar="MODULE:FUNCTION", help=help)


def add_claim_flags(p: argparse.ArgumentParser) -> None:
    """The claim a ``--train-fn`` is held to: a JSON file or the DP-SGD parameters."""
    p.add_argument(
        "--claim",
        type=path_type("--claim", must_exist="file"),
        metavar="FILE",
        help="--train-fn: the claim as JSON (dpaudit claim format)",
    )
    p.add_argument(
        "--claim-noise-multiplier",
        type=arg("--claim-noise-multiplier", v.positive),
        metavar="SIGMA",
        help="--train-fn: claimed DP-SGD noise multiplier",
    )
    p.add_argument(
        "--claim-sampling-rate",
        type=arg("--claim-sampling-rate", v.half_open_unit),
        metavar="Q",
        help="--train-fn: claimed Poisson sampling rate",
    )
    p.add_argument(
        "--claim-num-steps", type=pos_int("--claim-num-steps"), metavar="T", help="--train-fn: claimed number of steps"
    )


def claim_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~dpaudit.privacy.claims.PrivacyClaim` the claim flags state, or ``None`` when none was given.

    Raises:
        UsageError: ``--claim`` together with ``--claim-*``, only some of the three ``--claim-*``,
            or a claim file that is missing or not a claim.
    """
    from dpaudit.privacy.claims import check_claim_size, claim_from_dict, dpsgd_claim
    from dpaudit.store import read_json

    parts = (args.claim_noise_multiplier, args.claim_sampling_rate, args.claim_num_steps)
    if args.claim is not None:
        if any(p is not None for p in parts):
            raise UsageError(
                "--claim FILE conflicts with "
                "--claim-noise-multiplier/--claim-sampling-rate/--claim-num-steps; give "
                "one or the other",
                argument="--claim",
            )
        path = Path(args.claim)
        if not path.is_file():
            raise UsageError(f"--claim: file {args.claim!r} does not exist", argument="--claim")
        try:
            data = read_json(path)
            check_claim_size(data, argument="--claim", i_know=getattr(args, "i_know", False))
            return claim_from_dict(data)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--claim {args.claim!r}: {exc}", argument="--claim") from None
    if all(p is None for p in parts):
        return None
    if any(p is None for p in parts):
        raise UsageError(
            "--claim-noise-multiplier, --claim-sampling-rate and --claim-num-steps go together",
            argument="--claim-noise-multiplier",
        )
    return dpsgd_claim(
        sampling_rate=args.claim_sampling_rate,
        noise_multiplier=args.claim_noise_multiplier,
        num_steps=args.claim_num_steps,
        description=f"claimed by {args.train_fn}: DP-SGD q={args.claim_sampling_rate:g} "
        f"sigma={args.claim_noise_multiplier:g} T={args.claim_num_steps}",
    )


def resolve_callables(args: argparse.Namespace) -> None:
    """Resolves ``--train-fn`` and ``--model-fn`` (when given) so a bad spec fails in one line before any data loads."""
    from dpaudit.callables import resolve_callable

    if getattr(args, "train_fn", None) is not None:
        resolve_callable(args.train_fn, argument="--train-fn")
    if getattr(args, "model_fn", None) is not None:
        resolve_callable(args.model_fn, argument="--model-fn")
