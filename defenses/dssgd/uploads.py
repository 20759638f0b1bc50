"""What a DSSGD participant uploads in a turn, and how it chooses it (Shokri & Shmatikov 2015, §4, step 4).

An :class:`Upload` is a sparse Δw: at most c = θ_u·|w| entries, chosen by an
:class:`UploadRule` — *largest values* (:func:`select_largest`), *random with threshold*
(:func:`select_random_threshold`), or the differentially private sparse-vector upload
(:mod:`defenses.dssgd.svt`). Apart from :mod:`defenses.dssgd.protocol`, which carries uploads
between participants and the server, because the choice decides what leaves a participant, and
with the DP variant what the claim covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dpaudit import _validate as v
from dpaudit.privacy.dssgd_budget import fraction_count

__all__ = ["SELECTIONS", "Upload", "UploadRule", "select_largest", "select_random_threshold"]

#: Upload criteria (fixed for a whole training, as in the paper).
SELECTIONS: tuple[str, ...] = ("largest", "random-threshold")


@dataclass(frozen=True, kw_only=True, eq=False)
class Upload:
    """What one participant sends the server in one turn: a sparse Δw.

    Attributes:
        participant: the sender's index.
        round: the round of the turn (0-based).
        indices: int64 positions in the flat parameter vector, distinct.
        values: float32 increments at those positions.
        loss: the participant's mean local training loss over the turn; NaN under the DP upload,
            whose claim covers the noised upload only (:func:`~defenses.dssgd.protocol.turn_reply`).
    """

    participant: int
    round: int
    indices: torch.Tensor
    values: torch.Tensor
    loss: float = math.nan

    def __post_init__(self) -> None:
        if self.indices.ndim != 1 or self.values.shape != self.indices.shape:
            raise v.invalid(
                "indices",
                "indices and values must be vectors of one length, got shapes "
                f"{tuple(self.indices.shape)} and {tuple(self.values.shape)}",
            )
        object.__setattr__(self, "indices", self.indices.to(torch.int64).cpu())
        object.__setattr__(self, "values", self.values.to(torch.float32).cpu())


def select_largest(delta: torch.Tensor, count: int) -> torch.Tensor:
    """Positions of the ``count`` entries of ``delta`` with the largest magnitude (ties: lower position first)."""
    count = min(v.integer("count", count, minimum=0), delta.numel())
    order = torch.sort(-delta.abs(), stable=True).indices[:count]
    return torch.sort(order).values


def select_random_threshold(
    delta: torch.Tensor, count: int, *, threshold: float, generator: torch.Generator
) -> torch.Tensor:
    """Positions of up to ``count`` entries drawn uniformly among those with |Δw_j| > ``threshold``."""
    count = v.integer("count", count, minimum=0)
    threshold = v.non_negative("selection_threshold", threshold)
    eligible = torch.nonzero(delta.abs() > threshold).flatten()
    pick = eligible[torch.randperm(eligible.numel(), generator=generator)[:count]]
    return torch.sort(pick).values


@dataclass(frozen=True, kw_only=True)
class UploadRule:
    """How a participant chooses what to upload (fixed for the whole training).

    Attributes:
        upload_fraction: θ_u; c = round(θ_u·|w|) entries at most per turn.
        selection: ``largest`` or ``random-threshold``.
        selection_threshold: τ of ``random-threshold`` (|Δw_j| must exceed it).
        dp_epsilon: ε per uploaded parameter per turn of the DP variant (``None``: not private).
        bound: γ, the DP variant's bound on every value.
        dp_threshold: τ of the DP variant's sparse-vector test.
        budget_split: ``sum`` or ``seed`` (:func:`defenses.dssgd.svt.svt_upload`).
    """

    upload_fraction: float
    selection: str = "largest"
    selection_threshold: float = 0.0
    dp_epsilon: float | None = None
    bound: float = 0.001
    dp_threshold: float = 0.0001
    budget_split: str = "sum"

    def __post_init__(self) -> None:
        fraction_count("upload_fraction", self.upload_fraction, 1)
        v.choice("selection", self.selection, SELECTIONS)
        v.non_negative("selection_threshold", self.selection_threshold)
        v.positive("bound", self.bound)
        if self.dp_epsilon is not None:
            v.positive("dp_epsilon", self.dp_epsilon)
            # The largest noise scale is 18γ/ε (release under the seed's split): it must be a number.
            if not math.isfinite(18.0 * self.bound / self.dp_epsilon):
                raise v.invalid(
                    "bound",
                    "bound / dp_epsilon must give a finite noise scale, got "
                    f"bound={self.bound!r} and dp_epsilon={self.dp_epsilon!r}",
                )
        v.non_negative("dp_threshold", self.dp_threshold)

    @property
    def private(self) -> bool:
        """Whether uploads go through the DP variant's sparse-vector release (then nothing else leaves a
        participant)."""
        return self.dp_epsilon is not None

    def count(self, num_parameters: int) -> int:
        """c, the most entries one turn may upload."""
        return fraction_count("upload_fraction", self.upload_fraction, num_parameters)

    def choose(
        self, delta: torch.Tensor, *, generator: torch.Generator, observe: Callable[[np.ndarray], None] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions, values) to upload for the local change ``delta``.

        ``observe`` (DP variant only) receives the bounded Δw as the sparse-vector mechanism
        takes it, before any noise (:func:`defenses.dssgd.svt.svt_upload`).
        """
        c = self.count(delta.numel())
        if self.dp_epsilon is not None:
            from defenses.dssgd.svt import svt_upload

            return svt_upload(
                delta,
                count=c,
                epsilon=self.dp_epsilon,
                bound=self.bound,
                threshold=self.dp_threshold,
                split=self.budget_split,
                generator=generator,
                observe=observe,
            )
        if self.selection == "largest":
            idx = select_largest(delta, c)
        else:
            idx = select_random_threshold(delta, c, threshold=self.selection_threshold, generator=generator)
        return idx, delta[idx].clone()
