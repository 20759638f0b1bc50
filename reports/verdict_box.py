"""The verdict box every report page opens with: a core :class:`~dpaudit.results.verdicts.Verdict` as a section.

The verdict is judged in the core (:mod:`dpaudit.results.verdicts`); this module only lays it
out as the first section of a page, titled :data:`VERDICT_TITLE`, which the shared template
block (``reports/templates/_blocks.*.j2``) draws as one coloured box: the status, the headline
sentence and the supporting lines. Built from the plain blocks every output format knows (a
banner and a list), so a format that has no box still prints the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpaudit import _validate as v
from dpaudit.results.verdicts import TONES, Verdict
from reports.render import Banner, Items, Section, Text

__all__ = ["VERDICT_TITLE", "VerdictBanner", "verdict_section", "with_status"]

#: The title of the verdict section; the templates draw a section of this title as the verdict box.
VERDICT_TITLE = "Verdict"


@dataclass(frozen=True, kw_only=True)
class VerdictBanner(Banner):
    """The verdict's headline, in one of the verdict tones (:data:`~dpaudit.results.verdicts.TONES`)."""

    def __post_init__(self) -> None:
        v.choice("level", self.level, TONES)


def with_status(link: str, sections: Sequence[Section]) -> str:
    """An index link naming the page's verdict: "multi — no violation" (``link`` alone when the page has none)."""
    for section in sections:
        if section.title == VERDICT_TITLE and section.blocks and isinstance(section.blocks[0], Text):
            return f"{link} — {section.blocks[0].text}"
    return link


def verdict_section(verdict: Verdict) -> Section:
    """The verdict as the page's first section: status, headline (in the verdict's tone), supporting lines."""
    if not isinstance(verdict, Verdict):
        raise v.invalid_type("verdict", f"verdict must be a Verdict, got {type(verdict).__name__}")
    blocks: list[object] = [Text(text=verdict.status), VerdictBanner(text=verdict.headline, level=verdict.tone)]
    if verdict.lines:
        blocks.append(Items(items=list(verdict.lines)))
    return Section(title=VERDICT_TITLE, blocks=blocks)
