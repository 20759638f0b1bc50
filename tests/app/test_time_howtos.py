"""The README's how-to commands are the ones scripts/time_howtos.py times (they cannot drift apart).

A ```bash block of the README marked by a ``<!-- howto -->`` line before it holds how-to
commands: each must finish in a few minutes on 2 cores, which the script measures. Every command
of a marked block must be in the script's list and every listed command in a marked block.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "time_howtos.py"
README = ROOT / "README.md"
RESULTS = ROOT / "scripts" / "results" / "howtos" / "howtos.json"
MARKER = "<!-- howto -->"


@pytest.fixture(scope="module")
def howtos():
    spec = importlib.util.spec_from_file_location("time_howtos", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["time_howtos"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_readme_howto_blocks_are_the_timed_commands(howtos) -> None:
    text = README.read_text()
    assert MARKER in text
    in_readme = howtos.readme_howto_commands(text, MARKER)
    listed = [howtos.normalize(h.command) for h in howtos.HOWTOS]
    assert [c for c in in_readme if c not in listed] == [], "README how-to commands scripts/time_howtos.py does not time"
    assert [c for c in listed if c not in in_readme] == [], "timed commands missing from the README's how-to blocks"


def test_marked_blocks_are_parsed_as_a_reader_copies_them(howtos) -> None:
    readme = "\n".join(
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
    assert howtos.readme_howto_commands(readme, MARKER) == ["dpaudit epsilon --delta 1e-5", "dpaudit train --defense nonprivate --epochs 5 --out runs/x"]
    with pytest.raises(ValueError, match="must be followed by a ```bash block"):
        howtos.readme_howto_commands(MARKER + "\ntext\n", MARKER)


def test_names_are_unique_and_needs_come_first(howtos) -> None:
    names = [h.name for h in howtos.HOWTOS]
    assert len(names) == len(set(names))
    for i, h in enumerate(howtos.HOWTOS):
        assert all(n in names[:i] for n in h.needs), h.name


def test_results_are_written_and_a_rerun_skips_finished_commands(howtos, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_readme_times_are_the_scripts_measurements(howtos) -> None:
    # Every "# <time> on 2 cores" of a how-to is what the last run of the script measured:
    # rewriting the README from the stored results changes nothing.
    results = json.loads(RESULTS.read_text())["howtos"]
    text = README.read_text()
    assert howtos.readme_with_times(text, results) == text, "rerun: python scripts/time_howtos.py --update-readme README.md"
    commands = howtos.readme_howto_commands(text, MARKER)
    assert len(commands) == len(results) and all(r["exit_status"] == 0 and not r["over_limit"] for r in results)
