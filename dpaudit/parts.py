"""What the core and the reports learn from a registered part's spec, by its name: a defense's
artefacts, report kind and run module, and the plot style of a defense or an attack.

The specs live in ``defenses/`` and ``attacks/``, which the core and ``reports`` never import
(docs/architecture.md, "Import rule"), so a report asks "which page shows this record?" or
"which colour is this attack?" of the part's own declaration instead of testing its name, in
one of two ways:

* the application layer reads every declaration once into a :class:`PartCatalogue` of the
  torch-free values defined here (:func:`catalogue_from_registries`) and renders inside
  :func:`using_parts`: the pages then import neither torch nor any part (``dpaudit report``);
* with no catalogue in use (a script, a test), a lookup reaches the registries by name at run
  time, as :class:`dpaudit.registry.Registry` discovery does, loading them and their parts.

Torch-free at import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol, cast

from dpaudit import _validate as v

__all__ = [
    "Artefact",
    "PlotStyle",
    "DefenseParts",
    "DefenseDeclaration",
    "PartCatalogue",
    "PART_REGISTRIES",
    "catalogue_from_registries",
    "using_parts",
    "defense_parts",
    "record_report_kind",
    "part_style",
]

#: The registries of the parts that have a plot style, as (module, attribute): read by name, never imported statically.
PART_REGISTRIES: tuple[tuple[str, str], ...] = (
    ("defenses.registry", "DEFENSES"),
    ("attacks.membership.spec", "MEMBERSHIP_ATTACKS"),
    ("attacks.evasion.spec", "EVASION_ATTACKS"),
    ("attacks.inversion.spec", "INVERSION_ATTACKS"),
)


@dataclass(frozen=True, kw_only=True)
class Artefact:
    """A file (or folder) a record of a defense holds beside ``record.json`` and its weights.

    Attributes:
        name: its path relative to the record directory (POSIX, no ``..``); a folder ends in ``/``.
        what: one line saying what it holds (and whether it may be published).
        required: the defense's report kind shows only records that hold it (PATE's ``pate.npz``:
            a record without it is given the generic trained-model page).
    """

    name: str
    what: str
    required: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip("/"):
            raise v.invalid("name", f"name must be a non-empty relative path, got {self.name!r}")
        path = PurePosixPath(self.name.rstrip("/"))
        if path.is_absolute() or ".." in path.parts or "\\" in self.name:
            raise v.invalid(
                "name", f"name must be a path inside the record directory (POSIX, no '..'), got {self.name!r}"
            )
        if not isinstance(self.what, str) or not self.what:
            raise v.invalid("what", f"what must be a non-empty string, got {self.what!r}")
        if not isinstance(self.required, bool):
            raise v.invalid_type("required", f"required must be a bool, got {self.required!r}")

    @property
    def is_folder(self) -> bool:
        """Whether it is a folder (its name ends in ``/``)."""
        return self.name.endswith("/")

    def in_record(self, record_dir: Path) -> Path:
        """Where it lies for the record stored in ``record_dir``."""
        return record_dir / self.name.rstrip("/")

    def present(self, record_dir: Path) -> bool:
        """Whether the record stored in ``record_dir`` holds it (a folder as a folder, a file as a file)."""
        path = self.in_record(record_dir)
        return path.is_dir() if self.is_folder else path.is_file()


#: Matplotlib's dash forms: a named style, or (offset, (on, off, ...)).
Dash = str | tuple[int, tuple[int, ...]]


@dataclass(frozen=True, kw_only=True)
class PlotStyle:
    """How a part is drawn in every figure: its colour, marker and dash.

    Attributes:
        colour: a hex colour (``#RRGGBB``).
        marker: a Matplotlib marker (``o``, ``s``, ``^``, …).
        dash: a Matplotlib line style: ``-``, ``--``, ``:``, ``-.`` or ``(offset, (on, off, …))``.
    """

    colour: str
    marker: str
    dash: Dash = "-"

    def __post_init__(self) -> None:
        if not (
            isinstance(self.colour, str)
            and len(self.colour) == 7
            and self.colour[0] == "#"
            and all(c in "0123456789abcdefABCDEF" for c in self.colour[1:])
        ):
            raise v.invalid("colour", f"colour must be a hex colour '#RRGGBB', got {self.colour!r}")
        if not isinstance(self.marker, str) or not self.marker:
            raise v.invalid("marker", f"marker must be a non-empty Matplotlib marker, got {self.marker!r}")
        named = isinstance(self.dash, str) and self.dash in ("-", "--", ":", "-.")
        pattern = (
            isinstance(self.dash, tuple)
            and len(self.dash) == 2
            and isinstance(self.dash[0], int)
            and isinstance(self.dash[1], tuple)
            and len(self.dash[1]) % 2 == 0
            and all(isinstance(x, int) and x > 0 for x in self.dash[1])
        )
        if not (named or pattern):
            raise v.invalid("dash", f"dash must be '-', '--', ':', '-.' or (offset, (on, off, ...)), got {self.dash!r}")

    def plot_kwargs(self) -> dict[str, Dash]:
        """Keyword arguments for ``Axes.plot``."""
        return {"color": self.colour, "marker": self.marker, "linestyle": self.dash}


class DefenseParts(Protocol):
    """What of a defense's spec (:class:`defenses.registry.DefenseSpec`) the core and the reports read."""

    @property
    def artefacts(self) -> tuple[Artefact, ...]: ...
    @property
    def report_kind(self) -> str | None: ...
    @property
    def run_module(self) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class DefenseDeclaration:
    """A defense's :class:`DefenseParts`, copied out of its spec (see :class:`defenses.registry.DefenseSpec`)."""

    artefacts: tuple[Artefact, ...] = ()
    report_kind: str | None = None
    run_module: str | None = None


@dataclass(frozen=True, kw_only=True)
class PartCatalogue:
    """What every registered part declares for the reports, as torch-free values.

    Attributes:
        styles: part name → its plot style (the parts that declare one).
        defenses: defense name → its files, report kind and run module.
    """

    styles: Mapping[str, PlotStyle] = field(default_factory=dict)
    defenses: Mapping[str, DefenseDeclaration] = field(default_factory=dict)


_IN_USE: ContextVar[PartCatalogue | None] = ContextVar("dpaudit_parts_in_use", default=None)


@contextmanager
def using_parts(catalogue: PartCatalogue) -> Iterator[PartCatalogue]:
    """Answers every lookup of this module from ``catalogue`` inside the ``with`` block (no registry is loaded)."""
    if not isinstance(catalogue, PartCatalogue):
        raise v.invalid_type("catalogue", f"catalogue must be a PartCatalogue, got {type(catalogue).__name__}")
    token = _IN_USE.set(catalogue)
    try:
        yield catalogue
    finally:
        _IN_USE.reset(token)


def _registry(module: str, attribute: str) -> Mapping[str, object]:
    registry: Mapping[str, object] = getattr(importlib.import_module(module), attribute)
    return registry


def catalogue_from_registries() -> PartCatalogue:
    """Every registered part's declarations, read from the registries (which this loads, and their parts with them)."""
    styles: dict[str, PlotStyle] = {}
    for module, attribute in PART_REGISTRIES:
        for name, spec in _registry(module, attribute).items():
            style = getattr(spec, "style", None)
            if isinstance(style, PlotStyle):
                styles.setdefault(name, style)
    defenses = {
        name: DefenseDeclaration(
            artefacts=getattr(spec, "artefacts", ()),
            report_kind=getattr(spec, "report_kind", None),
            run_module=getattr(spec, "run_module", None),
        )
        for name, spec in _registry(*PART_REGISTRIES[0]).items()
    }
    return PartCatalogue(styles=styles, defenses=defenses)


def defense_parts(name: str) -> DefenseParts | None:
    """What the registered defense ``name`` declares, or ``None`` when no defense is registered under it."""
    catalogue = _IN_USE.get()
    if catalogue is not None:
        return catalogue.defenses.get(name)
    spec = _registry(*PART_REGISTRIES[0]).get(name)
    return None if spec is None else cast(DefenseParts, spec)


def record_report_kind(defense: str, record_dir: Path) -> str | None:
    """The report kind that gives the record of ``defense`` stored in ``record_dir`` its page.

    The defense's own :attr:`~defenses.registry.DefenseSpec.report_kind` when it names one and
    the record holds every artefact the defense marks ``required``; else ``None``: the record is
    one for the generic trained-model page.
    """
    spec = defense_parts(defense)
    if spec is None or spec.report_kind is None:
        return None
    return spec.report_kind if all(a.present(record_dir) for a in spec.artefacts if a.required) else None


def part_style(name: str) -> PlotStyle | None:
    """The plot style the registered defense or attack ``name`` declares, or ``None`` (none declared, or no such
    part)."""
    catalogue = _IN_USE.get()
    if catalogue is not None:
        return catalogue.styles.get(name)
    for module, attribute in PART_REGISTRIES:
        style = getattr(_registry(module, attribute).get(name), "style", None)
        if isinstance(style, PlotStyle):
            return style
    return None
