"""Render every report kind and screenshot every page at 1,280 px, for a reviewer to look at (issue 34, item 5).

Each run directory given is rendered with ``dpaudit report`` (HTML, every registered report
kind it holds) and each page — the index and every report — is opened in headless Chromium at
1,280 px width and saved as a full-page PNG ``<run>--<page>.png`` in the output folder; the
list of screenshots is printed, one per line, with the page's problems (console errors, images
that did not load) when there are any.

Without run directories, ``--build DIR`` first produces small ones with the CLI on digits and
faces (a DP-SGD target attacked for membership, a white-box audit, a certified smoothing model,
a PATE student, a DSSGD federation, a model inversion, a train-only run; a few minutes on 2
cores) and screenshots those. The report test fixtures (``tests/reports/conftest.py``) are
smaller still; a test session can write them to a folder and pass them here.

The browser is the system's Chromium (``$DPAUDIT_CHROMIUM``, else ``chromium`` or
``chromium-browser`` on PATH), driven by Playwright.

Usage::

    python scripts/screenshot_reports.py RUN_DIR [RUN_DIR ...] [--out DIR]
    python scripts/screenshot_reports.py --build runs/screens [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "scripts" / "results" / "screenshots"
WIDTH = 1280

#: (run directory name, CLI commands producing it) — small runs on digits and faces; {run} is the run directory.
BUILDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "membership",
        (
            "train --defense dpsgd --dataset digits --model digits-mlp --epochs 5 --target-epsilon 8 --out {run}",
            "attack membership --target {run} --attack loss --attack lira --attack rmia --num-shadows 4 --out {run}",
        ),
    ),
    (
        "audit",
        (
            "audit --threat white-box --dataset digits --model digits-mlp "
            "--target-epsilon 2 --delta 1e-5 --budget-seconds 20 --out {run}",
        ),
    ),
    (
        "certified",
        (
            "train --defense smoothing --dataset digits --model digits-mlp --epochs "
            "10 --smoothing-sigma 0.5 --out {run}",
            "certify --target {run} --radii 0.25,0.5 --num-examples 50 --out {run}",
        ),
    ),
    (
        "pate",
        (
            "train --defense pate --dataset digits --model digits-mlp --teachers 10 "
            "--queries 100 --epochs 5 --out {run}",
        ),
    ),
    ("dssgd", ("train --defense dssgd --dataset digits --model digits-mlp --participants 5 --rounds 3 --out {run}",)),
    (
        "inversion",
        (
            "train --defense nonprivate --dataset faces --model softmax-regression "
            "--epochs 50 --learning-rate 0.01 --batch-size 32 --member-fraction "
            "0.75 --out {run}",
            "attack inversion --target {run} --attack mi-face --max-iterations 200 --evaluator-epochs 10 --out {run}",
        ),
    ),
    ("train-only", ("train --defense nonprivate --dataset digits --model digits-mlp --epochs 5 --out {run}",)),
)


def build_runs(folder: Path) -> list[Path]:
    """Runs :data:`BUILDS` with the CLI into ``folder``; a run whose command fails is reported and left out."""
    from dpaudit.api import cli_main

    runs = []
    for name, commands in BUILDS:
        run = folder / name
        for command in commands:
            argv = command.format(run=run).split()
            print(f"$ dpaudit {' '.join(argv)}", file=sys.stderr, flush=True)
            code = cli_main(argv)
            if code != 0:
                print(f"  exit {code}: run {name} left out", file=sys.stderr)
                break
        else:
            runs.append(run)
    return runs


def _chromium() -> str:
    override = os.environ.get("DPAUDIT_CHROMIUM")
    found = (
        (override if override and Path(override).is_file() else shutil.which(override))
        if override
        else shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not found:
        raise SystemExit("no Chromium found: install Debian's chromium or set DPAUDIT_CHROMIUM")
    return found


def render(runs: Sequence[Path]) -> list[tuple[Path, list[Path]]]:
    """Each run's pages (index first), rendered with ``dpaudit report``; a run with nothing to render is said and
    skipped."""
    from dpaudit.api import render_reports

    rendered = []
    for run in runs:
        try:
            index = render_reports(run)
        except ValueError as exc:  # nothing to render, or a record that contradicts itself
            print(f"{run}: not rendered: {exc}", file=sys.stderr)
            continue
        rendered.append((run, [index.index, *index.pages]))
    return rendered


def screenshot(rendered: Sequence[tuple[Path, list[Path]]], out: Path) -> list[tuple[Path, list[str]]]:
    """Full-page screenshots at :data:`WIDTH` px of every page: (screenshot, problems) per page."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        try:
            for run, pages in rendered:
                for page_path in pages:
                    problems: list[str] = []
                    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
                    page = context.new_page()
                    page.on(
                        "console",
                        lambda msg, p=problems: p.append(f"console: {msg.text}") if msg.type == "error" else None,
                    )
                    page.on("pageerror", lambda exc, p=problems: p.append(f"script error: {exc}"))
                    page.goto(Path(page_path).resolve().as_uri(), wait_until="load")
                    broken = page.evaluate(
                        "() => Array.from(document.images).filter(i => i.complete && "
                        "i.naturalWidth === 0).map(i => i.getAttribute('src'))"
                    )
                    problems += [f"image did not load: {src}" for src in broken]
                    target = out / re.sub(r"[^\w.-]+", "_", f"{Path(run).name}--{Path(page_path).stem}.png")
                    page.screenshot(path=str(target), full_page=True)
                    context.close()
                    shots.append((target, problems))
        finally:
            browser.close()
    return shots


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="*", type=Path, metavar="RUN_DIR", help="run directories to render and screenshot"
    )
    parser.add_argument(
        "--build",
        type=Path,
        metavar="DIR",
        help="first produce small runs of every kind with the CLI into DIR (and screenshot those too)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"folder of the screenshots (default {DEFAULT_OUT.relative_to(ROOT)})",
    )
    args = parser.parse_args(argv)
    runs = list(args.runs) + (build_runs(args.build) if args.build else [])
    if not runs:
        parser.error("give run directories, or --build DIR to produce them")
    shots = screenshot(render(runs), args.out)
    for path, problems in shots:
        print(path)
        for problem in problems:
            print(f"  PROBLEM {problem}")
    return 1 if any(problems for _, problems in shots) else 0


if __name__ == "__main__":
    raise SystemExit(main())
