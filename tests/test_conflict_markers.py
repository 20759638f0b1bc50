"""No merge-conflict marker is committed anywhere in the repository's text files.

Two pages of the documentation once carried committed conflict markers, and both the strict
MkDocs build and the docs tests passed, because a marker is valid Markdown. This test reads every
file git tracks (text files only) and fails on a line that opens, separates or closes a conflict.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Git writes seven markers and, for the outer two, a space and a label; a bare "=======" line is
# only a conflict separator when an opening marker precedes it, so it is matched within a block.
OPEN = re.compile(r"^<{7}(?: |$)")
SEPARATOR = re.compile(r"^={7}$")
CLOSE = re.compile(r"^>{7}(?: |$)")


def conflict_lines(text: str) -> list[int]:
    """Line numbers (1-based) of conflict markers in ``text``: every opener and closer, and separators inside an open
    block."""
    hits, inside = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if OPEN.match(line):
            hits.append(number)
            inside = True
        elif CLOSE.match(line):
            hits.append(number)
            inside = False
        elif inside and SEPARATOR.match(line):
            hits.append(number)
    return hits


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            head = path.read_bytes()[:8192]
            if b"\0" not in head:  # binary files (PNG, NPZ) cannot hold a textual conflict
                files.append(path)
    return files


def test_the_detector_finds_a_conflict_and_ignores_markdown_rules() -> None:
    conflict = "a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\nb\n"
    assert conflict_lines(conflict) == [2, 4, 6]
    # A setext heading underline of seven '=' outside any conflict block is Markdown, not a marker.
    assert conflict_lines("Title\n=======\n\ntext <<<<<<< inline\n") == []


def test_no_tracked_file_holds_a_conflict_marker() -> None:
    found = {}
    for path in tracked_text_files():
        lines = conflict_lines(path.read_text(encoding="utf-8", errors="replace"))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, f"merge-conflict markers committed (file: line numbers): {found}"
