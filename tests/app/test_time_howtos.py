"""The documentation's how-to commands are the ones scripts/time_howtos.py times (they cannot drift apart).

A ```bash block of the README or of a page under ``docs/`` marked by a ``<!-- howto -->`` line
before it holds how-to commands: each must finish in a few minutes on 2 cores, which the script
measures. Every command of a marked block must be in the script's list and every listed command
in a marked block of some page.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "time_howtos.py"
RESULTS = ROOT / "scripts" / "results" / "howtos" / "howtos.json"
MARKER = "<!-- howto -->"


@pytest.fixture(scope="module")
def howtos():
    spec = importlib.util.spec_from_file_location("time_howtos", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["time_howtos"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _marked(howtos) -> dict[str, list[str]]:
    """Each page's how-to commands, by its path relative to the root (pages without a block left out)."""
    pages = {str(p.relative_to(ROOT)): howtos.howto_commands(p.read_text(), MARKER) for p in howtos.howto_pages(ROOT)}
    return {k: c for k, c in pages.items() if c}


def test_the_pages_read_are_the_front_page_and_the_docs(howtos) -> None:
    pages = [str(p.relative_to(ROOT)) for p in howtos.howto_pages(ROOT)]
    assert pages[0] == "README.md" and "docs/cli.md" in pages and "docs/results/audits.md" in pages
    assert not [p for p in pages if p.startswith("docs/results/files/")], "the link to scripts/results is not followed"
    # The front page shows one timed example per use; the full list lives in the docs.
    assert "README.md" in _marked(howtos) and len(_marked(howtos)) > 1


def test_marked_blocks_are_the_timed_commands(howtos) -> None:
    in_pages = [c for commands in _marked(howtos).values() for c in commands]
    listed = [howtos.normalize(h.command) for h in howtos.HOWTOS]
    assert [c for c in in_pages if c not in listed] == [], (
        "how-to commands of the docs that scripts/time_howtos.py does not time"
    )
    assert [c for c in listed if c not in in_pages] == [], "timed commands missing from every page's how-to blocks"


def test_marked_blocks_are_parsed_as_a_reader_copies_them(howtos) -> None:
    page = "\n".join(
        [
            "```bash",
            "dpaudit unmarked --not-a-howto",
            "```",
            MARKER,
            "```bash",
            "# a comment line",
            "dpaudit epsilon --delta 1e-5   # 2 s on 2 cores",
            "dpaudit train --defense nonprivate \\",
            "    --epochs 5 --out runs/x",
            "```",
        ]
    )
    assert howtos.howto_commands(page, MARKER) == [
        "dpaudit epsilon --delta 1e-5",
        "dpaudit train --defense nonprivate --epochs 5 --out runs/x",
    ]
    with pytest.raises(ValueError, match="must be followed by a ```bash block"):
        howtos.howto_commands(MARKER + "\ntext\n", MARKER)


def test_names_are_unique_and_needs_come_first(howtos) -> None:
    names = [h.name for h in howtos.HOWTOS]
    assert len(names) == len(set(names))
    for i, h in enumerate(howtos.HOWTOS):
        assert all(n in names[:i] for n in h.needs), h.name


def test_results_are_written_and_a_rerun_skips_finished_commands(
    howtos, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = (
        howtos.HowTo("first", "prints a finding", "echo 'eps_LB 0.94 (rmia)' && touch made", r"eps_LB", creates="made"),
        howtos.HowTo("second", "fails", "echo nothing; exit 3", r"eps_LB", needs=("first",)),
    )
    monkeypatch.setattr(howtos, "HOWTOS", fake)
    argv = ["--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--data-root", str(tmp_path)]
    assert howtos.main(argv) == 1  # "second" failed
    first = json.loads((tmp_path / "out" / "howtos.json").read_text())
    rows = {r["name"]: r for r in first["howtos"]}
    assert rows["first"]["exit_status"] == 0 and rows["first"]["finding"] == "eps_LB 0.94 (rmia)"
    assert rows["second"]["exit_status"] == 3 and rows["second"]["finding"] == ""
    assert "| first | `echo 'eps_LB 0.94 (rmia)' && touch made` | 0 |" in (tmp_path / "out" / "howtos.md").read_text()
    # A rerun keeps the finished command's measurement and retries only the failed one.
    assert howtos.main(argv) == 1
    again = {r["name"]: r for r in json.loads((tmp_path / "out" / "howtos.json").read_text())["howtos"]}
    assert again["first"]["finished"] == rows["first"]["finished"]
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_a_background_load_is_timed_beside_the_quiet_times_and_the_ratio_judged(
    howtos, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The quiet run writes <out>/howtos.json; the loaded run writes <out>/loaded/ and its
    # comparison, and the busy processes it started are gone when it returns.
    fake = (howtos.HowTo("nap", "sleeps", "sleep 0.2; echo done", r"done"),)
    monkeypatch.setattr(howtos, "HOWTOS", fake)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    argv = ["--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--data-root", str(tmp_path)]
    assert howtos.main(argv) == 0
    started = []
    real_start = howtos.start_background_load
    monkeypatch.setattr(howtos, "start_background_load", lambda n: started.extend(real_start(n)) or started)
    assert howtos.main([*argv, "--background-load", "1", "--workdir", str(tmp_path / "work2")]) == 0
    assert len(started) == 1 and started[0].poll() is not None  # stopped at the end
    rows = json.loads((tmp_path / "out" / "loaded" / "comparison.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["nap"] and rows[0]["quiet"] is not None and not rows[0]["held"]
    assert "| nap |" in (tmp_path / "out" / "loaded" / "comparison.md").read_text()
    assert json.loads((tmp_path / "out" / "howtos.json").read_text())["meta"]["background_load"] == 0
    # The commands ran with the default thread plan: the user's thread variable was not passed on.
    assert "OMP_NUM_THREADS" not in howtos._environment(None)


def test_loaded_rows_hold_only_how_tos_long_enough_to_judge(howtos) -> None:
    quiet = [
        {"name": "a", "command": "x", "seconds": 10.0},
        {"name": "b", "command": "y", "seconds": 10.0},
        {"name": "c", "command": "z", "seconds": 1.0},
        {"name": "d", "command": "old", "seconds": 10.0},
    ]
    loaded = [
        {"name": "a", "command": "x", "seconds": 14.9, "exit_status": 0},
        {"name": "b", "command": "y", "seconds": 15.1, "exit_status": 0},
        {"name": "c", "command": "z", "seconds": 3.0, "exit_status": 0},
        {"name": "d", "command": "new", "seconds": 10.0, "exit_status": 0},
    ]
    rows = {r["name"]: r for r in howtos.loaded_rows(loaded, quiet)}
    assert rows["a"]["ok"] and not rows["b"]["ok"] and abs(rows["b"]["ratio"] - 1.51) < 1e-9
    assert rows["c"]["ok"] and not rows["c"]["held"]  # 3x, but a 1 s command is start-up
    assert rows["d"]["ratio"] is None and not rows["d"]["held"]  # another command: nothing to compare
    text = howtos.render_loaded_markdown(
        list(rows.values()), meta={"background_load": 1, "cpus": 2, "load_at_start": 1.0}
    )
    assert "1 of the 2 how-tos" in text and "1.51×" in text and "**no**" in text


def test_the_pages_times_cannot_come_from_a_loaded_run(howtos, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        howtos.main(["--background-load", "1", "--update-docs", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        howtos.main(["--background-load", "-1", "--out", str(tmp_path)])


def test_page_times_are_the_scripts_measurements(howtos) -> None:
    # Every "# <time> on 2 cores" of a how-to is what the last run of the script measured:
    # rewriting any page from the stored results changes nothing.
    results = json.loads(RESULTS.read_text())["howtos"]
    for page in howtos.howto_pages(ROOT):
        text = page.read_text()
        assert howtos.with_times(text, results) == text, (
            f"{page.relative_to(ROOT)}: rerun python scripts/time_howtos.py --update-docs"
        )
    commands = {c for cs in _marked(howtos).values() for c in cs}
    assert len(commands) == len(results) and all(r["exit_status"] == 0 and not r["over_limit"] for r in results)


def test_update_docs_sets_the_times_in_every_page(howtos, tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    stale = "\n".join([MARKER, "```bash", "dpaudit epsilon --delta 1e-5   # 9 s on 2 cores", "```", ""])
    (tmp_path / "README.md").write_text(stale)
    (tmp_path / "docs" / "sub" / "page.md").write_text(stale)
    results = [{"command": "dpaudit epsilon --delta 1e-5", "seconds": 1.23}]
    pages = howtos.howto_pages(tmp_path)
    assert [p.relative_to(tmp_path).parts for p in pages] == [("README.md",), ("docs", "sub", "page.md")]
    for page in pages:
        assert "# 1.2 s on 2 cores" in howtos.with_times(page.read_text(), results)


def test_the_command_line_guide_holds_every_timed_how_to(howtos) -> None:
    # The README says every how-to is in docs/cli.md: its marked blocks are exactly the timed list,
    # both ways (the audit, certify and check how-tos were once only on other pages).
    in_guide = howtos.howto_commands((ROOT / "docs" / "cli.md").read_text(), MARKER)
    listed = [howtos.normalize(h.command) for h in howtos.HOWTOS]
    assert [h.name for h in howtos.HOWTOS if howtos.normalize(h.command) not in in_guide] == [], (
        "timed how-tos missing from docs/cli.md"
    )
    assert [c for c in in_guide if c not in listed] == [], (
        "docs/cli.md how-tos that scripts/time_howtos.py does not time"
    )
    assert len(in_guide) == len(set(in_guide)) == len(listed)


def test_the_loaded_table_in_the_docs_is_the_scripts_last_comparison(howtos) -> None:
    # docs/performance.md prints the --background-load table: it is the script's output, row for row,
    # and every how-to long enough to judge stayed within the ratio the issue sets.
    loaded = ROOT / "scripts" / "results" / "howtos" / "loaded"
    table = [ln for ln in (loaded / "comparison.md").read_text().splitlines() if ln.startswith("|")]
    page = (ROOT / "docs" / "performance.md").read_text()
    assert table and all(line in page for line in table)
    rows = json.loads((loaded / "comparison.json").read_text())["rows"]
    assert {r["name"] for r in rows} == {h.name for h in howtos.HOWTOS}
    quiet_runs = json.loads((ROOT / "scripts" / "results" / "howtos" / "howtos.json").read_text())["howtos"]
    quiet = {r["name"]: r for r in quiet_runs}
    assert all(r["ok"] for r in rows)
    # Held to 1.5x, or to a how-to's quiet parallelism where larger (one core of the p it used).
    assert all(r["ratio"] <= howtos.ratio_bound(quiet[r["name"]]) for r in rows if r["held"])


def test_a_how_to_is_held_to_its_quiet_parallelism_when_that_exceeds_the_ratio(howtos) -> None:
    # One core beside a busy process: a run that kept 1.8 cores busy cannot finish within 1.5x.
    serial = {"name": "a", "command": "x", "seconds": 10.0, "cpu_seconds": 11.0, "exit_status": 0}
    parallel = {"name": "b", "command": "y", "seconds": 10.0, "cpu_seconds": 18.0, "exit_status": 0}
    assert howtos.ratio_bound(serial) == howtos.LOADED_RATIO and howtos.ratio_bound(parallel) == pytest.approx(1.8)
    loaded = [dict(serial, seconds=16.0), dict(parallel, seconds=16.0)]
    rows = {r["name"]: r for r in howtos.loaded_rows(loaded, [serial, parallel])}
    assert not rows["a"]["ok"] and rows["b"]["ok"]  # both 1.6x: over 1.5, under 1.8
