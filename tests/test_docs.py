"""Every citation in the code points into docs/ (or to a paper), never to a file outside the repository.

The code used to cite the architecture notes and formula references kept beside the checkout
(``DESIGN.md``, ``certified.md``, ``reference/*.md``), which the next maintainer could not follow.
Their content lives in docs/ now, with numbered sections (``## §N …``), so a citation such as
``docs/defenses/noise-layer.md §2 (a)`` names a page that exists, a section it has and the item
within it. This test reads every .py file of the packages, scripts and tests and fails on:

* any mention of ``DESIGN.md`` or of a ``reference/…md`` file;
* a bare name of one of the old reference files (``audit.md §4``), which no longer exist;
* a ``docs/….md`` path that does not exist, a ``§N`` that page has no heading for, an item
  ``(a)`` its section does not mention, or a quoted section (``docs/architecture.md, "Style"``)
  that is not one of its headings.

The strict MkDocs build (``make test``) checks the links between the pages themselves.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("dpaudit", "attacks", "defenses", "reports", "scripts", "tests")
SELF = Path(__file__).resolve()

OUTSIDE = re.compile(r"DESIGN\.md|reference/[\w./-]*\.md")
OLD_NAMES = re.compile(r"(?<![\w/.-])(?:certified|pate|audit|accounting|attacks|dssgd)\.md\b")
_SEC = r"§\d+(?:\.\d+)?(?:\s*[–-]\s*§?\d+)?(?:\s*\([a-f]\)(?:\s*[–,]\s*\([a-f]\))*)?"
DOCS_CITATION = re.compile(
    r"(?P<path>docs/[\w/.-]+?\.md)(?:``)?(?P<after>(?:[ "
    rf"\t]*{_SEC}(?:\s*,\s*{_SEC})*)|(?:(?:[ \t]*[,(]\s*|[ \t]+)\"[^\"]+\"))?"
)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*(?:\{[^}]*\})?\s*$", re.MULTILINE)


def python_files() -> list[Path]:
    files = sorted(ROOT.glob("*.py"))
    for folder in FOLDERS:
        files += sorted(p for p in (ROOT / folder).rglob("*.py") if "results" not in p.relative_to(ROOT).parts[:2])
    return [p for p in files if p.resolve() != SELF]


def sections(page: str) -> dict[str, str]:
    """``§N`` / ``§N.M`` of a page's headings -> the text under that heading, up to the next heading of its level or
    above."""
    found: dict[str, str] = {}
    heads = list(HEADING.finditer(page))
    for i, h in enumerate(heads):
        m = re.match(r"§(\d+(?:\.\d+)?)\b", h[2])
        if not m:
            continue
        level = len(h[1])
        end = next((x.start() for x in heads[i + 1 :] if len(x[1]) <= level), len(page))
        found[m[1]] = page[h.end() : end]
    return found


def headings(page: str) -> set[str]:
    return {" ".join(h[2].split()) for h in HEADING.finditer(page)}


def _numbers(sec: str) -> list[str]:
    """``§3–5`` -> 3, 4, 5; ``§2 (a)`` -> 2; ``§1.2`` -> 1.2."""
    m = re.match(r"§(\d+(?:\.\d+)?)(?:\s*[–-]\s*§?(\d+))?", sec)
    assert m is not None
    if m[2] is None:
        return [m[1]]
    return [str(n) for n in range(int(float(m[1])), int(m[2]) + 1)]


def problems(text: str, docs_root: Path) -> list[str]:
    """What is wrong with the citations of one file's text, each as one line."""
    found = [f"cites a file outside the repository: {m[0]!r}" for m in OUTSIDE.finditer(text)]
    found += [f"cites a reference file that moved into docs/: {m[0]!r}" for m in OLD_NAMES.finditer(text)]
    for m in DOCS_CITATION.finditer(text):
        rel = m["path"][len("docs/") :]
        page_path = docs_root / rel
        if not page_path.is_file():
            found.append(f"cites {m['path']}, which does not exist")
            continue
        after = m["after"] or ""
        page = page_path.read_text()
        quoted = re.search(r"\"([^\"]+)\"", after)
        if quoted:
            name = " ".join(quoted[1].split())
            if name not in headings(page):
                found.append(f'cites {m["path"]}, "{name}": the page has no such heading')
            continue
        have = sections(page)
        for sec in re.findall(_SEC, after):
            for number in _numbers(sec):
                if number not in have:
                    found.append(f"cites {m['path']} §{number}: the page has no '§{number}' heading")
                    continue
                for item in re.findall(r"\(([a-f])\)", sec):
                    if f"({item})" not in have[number]:
                        found.append(f"cites {m['path']} §{number} ({item}): its section has no item ({item})")
    return found


def test_every_citation_points_into_docs_or_a_paper() -> None:
    bad = [f"{p.relative_to(ROOT)}: {line}" for p in python_files() for line in problems(p.read_text(), ROOT / "docs")]
    assert bad == [], (
        "run the citation rewrite (see the docs branch's report), then fix what is left:\n"
        + "\n".join(bad[:40])
        + (f"\n… and {len(bad) - 40} more" if len(bad) > 40 else "")
    )


# The checker itself, on text whose verdict is known (so the test above cannot pass vacuously).


@pytest.fixture()
def docs(tmp_path: Path) -> Path:
    (tmp_path / "defenses").mkdir()
    (tmp_path / "defenses" / "noise.md").write_text(
        "# Noise\n\n## §1 Idea\n\ntext\n\n## §2 HGM\n\n- **(a)** one\n- **(b)** two\n"
    )
    (tmp_path / "architecture.md").write_text("# Architecture\n\n## Import rule\n\n## Style\n")
    return tmp_path


@pytest.mark.parametrize(
    "text",
    [
        "see docs/defenses/noise.md §1.",
        "(``docs/defenses/noise.md`` §1–2)",
        "docs/defenses/noise.md §2 (a), (b)",
        'docs/architecture.md, "Import\nrule"',
        'docs/architecture.md ("Style")',
        "Papers only: Abadi et al. (2016), Theorem 1.",
        'report pages such as "index.md" and certified.html',
    ],
)
def test_good_citations_pass(text: str, docs: Path) -> None:
    assert problems(text, docs) == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('(DESIGN.md, "Style")', "outside the repository"),
        ("``reference/audit.md`` §1", "outside the repository"),
        ("../shared/reference/pate.md", "outside the repository"),
        ("(audit.md §4)", "moved into docs/"),
        ("``certified.md`` §2", "moved into docs/"),
        ("docs/defenses/missing.md §1", "does not exist"),
        ("docs/defenses/noise.md §3", "no '§3' heading"),
        ("docs/defenses/noise.md §1–3", "no '§3' heading"),
        ("docs/defenses/noise.md §2 (c)", "no item (c)"),
        ('docs/architecture.md, "Scale"', "no such heading"),
    ],
)
def test_bad_citations_are_named(text: str, needle: str, docs: Path) -> None:
    found = problems(text, docs)
    assert found and any(needle in f for f in found), found


def test_every_reference_section_has_its_page() -> None:
    # The pages keep the section numbers the code cites (the old reference files' numbering).
    expect = {
        "privacy/accounting.md": 6,
        "audits/statistics.md": 8,
        "defenses/pate.md": 6,
        "defenses/dssgd.md": 5,
        "defenses/noise-layer.md": 2,
    }
    for rel, last in expect.items():
        have = sections((ROOT / "docs" / rel).read_text())
        assert [str(n) for n in range(1, last + 1) if str(n) not in have] == [], rel
    assert "3" in sections((ROOT / "docs" / "defenses" / "smoothing.md").read_text())
    for rel, number in (("attacks/membership.md", "1"), ("attacks/inversion.md", "2"), ("attacks/evasion.md", "3")):
        assert number in sections((ROOT / "docs" / rel).read_text()), rel
    noise = sections((ROOT / "docs" / "defenses" / "noise-layer.md").read_text())["2"]
    assert all(f"**({x})**" in noise for x in "abcdef")


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    # The README is the docs' front page (at most 300 lines): the measured results live in docs/results/.
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "make demo" in readme and "make test" in readme
    links = re.findall(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert any(link.startswith("docs/") for link in links)
    assert [link for link in links if not (ROOT / link).exists()] == []


_CROSS_REFERENCE = re.compile(
    r":(?:mod|class|func|data|meth|attr|exc|obj):`~?((?:dpaudit|attacks|defenses|reports)(?:\.\w+)+)"
)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_every_cross_reference_names_something_that_exists():
    # A module or name moved in a renovation leaves its old dotted path behind in docstrings
    # (``:class:`dpaudit.privacy.audit.AuditResult```); the next maintainer cannot follow it.
    dangling = {}
    for folder in ("dpaudit", "attacks", "defenses", "reports", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for match in _CROSS_REFERENCE.finditer(path.read_text(encoding="utf-8")):
                if not _resolves(match.group(1)):
                    dangling.setdefault(match.group(1), path.relative_to(ROOT).as_posix())
    assert not dangling, f"cross-references to names that do not exist: {dangling}"


def test_the_dangling_reference_check_can_fail():
    assert _resolves("dpaudit.registry.Registry") and _resolves("dpaudit.results")
    assert not _resolves("dpaudit.registry.NoSuchThing") and not _resolves("dpaudit.no_such_module.Thing")
