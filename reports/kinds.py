"""Report kinds: what ``dpaudit report`` renders, one registered kind per report.

A report kind finds the stored results it shows in a run directory (``load``), judges each item
(``verdict``: the box its page opens with and the status the index names beside its link) and
writes one page per item found (``render``: HTML and Markdown, with figures and tables beside
them). Each
kind registers itself in :data:`REPORT_KINDS` in the module that defines it; the report run
iterates the registry in ``order`` and the index lists every kind's pages under its ``group``
heading. A new report is one module that registers its kind — dropped into ``reports/`` it is
found by discovery; defined elsewhere, importing it registers it — and no edit anywhere else: its
verdict lives beside it, not in :mod:`dpaudit.results.verdicts` (which keeps the shared
:class:`~dpaudit.results.verdicts.Verdict` type and the verdicts the core judges for several
consumers).

Torch-free: a kind reads stored result and record values, never a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from dpaudit import _validate as v
from dpaudit.registry import Registry
from dpaudit.results.verdicts import Verdict
from dpaudit.store import RunDir

__all__ = ["Page", "ReportKind", "REPORT_KINDS", "ordered_kinds"]

Item = TypeVar("Item")

# Names the report output keeps for itself (``--json`` keys, attributes of the report index).
_RESERVED = frozenset(
    {"format", "index", "index_html", "index_md", "kinds", "pages", "pages_of", "tables", "violations"}
)


@dataclass(frozen=True, kw_only=True)
class Page:
    """One page a report kind wrote, as the index links it.

    Attributes:
        html: the HTML page; its Markdown twin has the same stem beside it.
        link: the link text on the index.
        tables: further files written for the page (CSV, JSON), listed on the index.
        violations: stored verdicts the page shows as violations, one line each — read from the
            results, never recomputed; ``dpaudit report`` exits 3 when there is any.
    """

    html: Path
    link: str
    tables: tuple[Path, ...] = ()
    violations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.html, Path):
            raise v.invalid_type("html", f"html must be a Path, got {self.html!r}")
        if not isinstance(self.link, str) or not self.link:
            raise v.invalid("link", f"link must be a non-empty string, got {self.link!r}")
        if not isinstance(self.tables, tuple) or not all(isinstance(p, Path) for p in self.tables):
            raise v.invalid_type("tables", f"tables must be a tuple of Paths, got {self.tables!r}")
        if not isinstance(self.violations, tuple) or not all(isinstance(x, str) for x in self.violations):
            raise v.invalid_type("violations", f"violations must be a tuple of strings, got {self.violations!r}")


@dataclass(frozen=True, kw_only=True)
class ReportKind(Generic[Item]):
    """What a report kind provides.

    Attributes:
        name: the registry key; also the key of the kind's pages in ``dpaudit report --json``
            and the attribute of :class:`~dpaudit.app.runs.report.ReportIndex` naming them.
        group: the index heading its pages are listed under.
        order: its place on the index and in the page list (ascending; ties by name).
        load: the items a run directory holds for this kind, one per page; empty (never an
            error) when it holds none. Reading happens here, before anything is written.
        verdict: the judgement of one item, read from its stored values: the page ``render``
            writes opens with it in a verdict box (:func:`reports.verdict_box.verdict_section`)
            and the index names its status beside the link — the contract suite holds every kind
            to both.
        render: writes the page of one item into the reports directory and says what it wrote.
    """

    name: str
    group: str
    order: int
    load: Callable[[RunDir], Sequence[Item]]
    verdict: Callable[[Item], Verdict]
    render: Callable[[Item, Path], Page]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            # An identifier: the name is a JSON key and an attribute of the report index.
            raise v.invalid("name", f"name must be a Python identifier, got {self.name!r}")
        if self.name in _RESERVED:
            raise v.invalid(
                "name",
                "name must not be one the report output uses for itself "
                f"({', '.join(sorted(_RESERVED))}), got {self.name!r}",
            )
        if not isinstance(self.group, str) or not self.group:
            raise v.invalid("group", f"group must be a non-empty string, got {self.group!r}")
        if isinstance(self.order, bool) or not isinstance(self.order, int):
            raise v.invalid_type("order", f"order must be an int, got {self.order!r}")
        for field in ("load", "verdict", "render"):
            if not callable(getattr(self, field)):
                raise v.invalid_type(field, f"{field} must be callable, got {getattr(self, field)!r}")


#: Every report kind, keyed by name; ``reports/`` modules are imported on first lookup.
REPORT_KINDS: Registry[ReportKind[Any]] = Registry("report kind", discover=("reports",))


def ordered_kinds() -> list[ReportKind[Any]]:
    """The registered kinds in index order."""
    return sorted(REPORT_KINDS.values(), key=lambda kind: (kind.order, kind.name))
