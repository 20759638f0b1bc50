"""What every defense's ``train`` and ``replay`` receive: one :class:`TrainRequest`.

Before it, each of the nine train and four replay functions restated the same keyword list
(data set, split, architecture, its options, config, seed, device, progress) and passed it on
field by field to the next; a request is built once by its caller and handed down whole, with
:func:`dataclasses.replace` where a wrapping defense changes one field (its own config, the
noise layer's model option).

Torch-free: the data and device types are named, not imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dpaudit import _validate as v

if TYPE_CHECKING:
    import torch

    from dpaudit.data import DatasetBundle, Splits

__all__ = ["TrainRequest"]

ConfigT = TypeVar(
    "ConfigT", covariant=True
)  # a request for a subclass config is one for its base (smoothing → non-private)


@dataclass(frozen=True, kw_only=True)
class TrainRequest(Generic[ConfigT]):
    """One training of a defense: which data, which model, which settings, where.

    Keyword-only, like the privacy parameters inside ``config`` (the defense's own frozen config
    type, whose fields stay keyword-only).

    Attributes:
        bundle: the data set; its train split holds the ids ``splits`` names.
        splits: the membership split; only ``splits.members`` are trained on.
        model_name: the zoo architecture (:func:`dpaudit.models.build_model`).
        config: the defense's hyper-parameters (its ``DefenseSpec.config_type``).
        model_options: keyword options of the architecture, as asked for (a copy: the caller's
            mapping is never changed by a defense that adds its derived options).
        seed: the root seed; a defense derives its independent streams from it.
        device: where to train (a name or a ``torch.device``).
        progress: whether to report progress on stderr.
    """

    bundle: DatasetBundle
    splits: Splits
    model_name: str
    config: ConfigT
    # Any: the keyword arguments of an architecture's builder, whatever its signature accepts.
    model_options: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    device: str | torch.device = "cpu"
    progress: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise v.invalid_type(
                "model_name", f"model_name must be a zoo architecture's name, got {v.short(self.model_name)}"
            )
        if self.model_options is None:  # the old keyword's "no options"
            object.__setattr__(self, "model_options", {})
        elif not isinstance(self.model_options, Mapping):
            raise v.invalid_type(
                "model_options",
                f"model_options must be a mapping of option names to values, got {v.short(self.model_options)}",
            )
        else:
            object.__setattr__(self, "model_options", dict(self.model_options))
        v.integer("seed", self.seed)
        if not isinstance(self.progress, bool):
            raise v.invalid_type("progress", f"progress must be True or False, got {v.short(self.progress)}")

    def options(self) -> dict[str, Any]:
        """A fresh copy of :attr:`model_options`, for a defense to add its derived options to."""
        return dict(self.model_options)
