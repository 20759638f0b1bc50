"""Checks ``--dry-run``'s estimates against the real runs on five small jobs (issue 48, item 2).

For each job — LiRA shadows (``attack membership``), a multi-run audit, a ``compare`` grid, a
Secure-SGD training, ``certify`` — it runs the job's ``--dry-run --json`` twice (the two
estimates must agree within 25 %), then the job itself, timed from the command's start to its
end (what a user waits), and prints the estimate's range, its middle, the measured time and the
ratio middle / measured (within 2× on an idle machine is the goal). The targets the jobs attack
are trained first and not timed. Every command runs as ``dpaudit`` would (``python -c`` of the
CLI's ``main`` in a fresh process), with this checkout first on the path.

The machine's load (1-minute load average, cores) is printed with the table: times measured
beside other work are that machine's, not an idle one's.

Usage:
    python scripts/check_estimates.py [--out DIR] [--json FILE] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GRID = """
name = "estimates"
dataset = "digits"
model = "digits-mlp"
seeds = [0]
[[defenses]]
defense = "nonprivate"
epochs = 4
[[defenses]]
defense = "dpsgd"
target_epsilon = 4.0
epochs = 4
lot_size = 64
[attacks.membership]
attacks = ["loss"]
num_samples = 100
"""


def _dpaudit(argv: list[str], *, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Runs ``dpaudit ARGV`` in a fresh process; its wall time and result."""
    # main() without arguments reads sys.argv, as the console script does.
    code = "import sys; from dpaudit.app.cli import main; sys.exit(main())"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"dpaudit {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took, done


def _jobs(work: Path) -> dict[str, dict[str, list[str]]]:
    grid = work / "grid.toml"
    grid.write_text(GRID)
    target = str(work / "target")
    secure = str(work / "secure")
    return {
        "lira-shadows": {
            "prepare": [
                "train", "--defense", "nonprivate", "--dataset", "digits", "--model", "digits-mlp",
                "--epochs", "5", "--out", target, "--quiet",
            ],
            "job": [
                "attack", "membership", "--target", target, "--attack", "lira", "--num-shadows", "6",
                "--num-workers", "2", "--out", str(work / "lira"),
            ],
        },
        "multi-run-audit": {
            "job": [
                "audit", "--threat", "black-box", "--method", "multi-run", "--dataset", "digits",
                "--model", "digits-mlp", "--noise-multiplier", "1", "--num-steps", "40", "--num-trials", "4",
                "--num-members", "200", "--out", str(work / "audit"),
            ],
        },
        "compare-grid": {
            "job": ["compare", "--config", str(grid), "--num-workers", "2", "--out", str(work / "compare")],
        },
        "secure-sgd-train": {
            "job": [
                "train", "--defense", "secure-sgd", "--dataset", "digits", "--model", "digits-mlp",
                "--epochs", "4", "--out", secure,
            ],
        },
        "certify": {
            "prepare": [
                "train", "--defense", "secure-sgd", "--dataset", "digits", "--model", "digits-mlp",
                "--epochs", "2", "--out", str(work / "certified"), "--quiet",
            ],
            "job": [
                "certify", "--target", str(work / "certified"), "--num-examples", "100", "--no-attacks",
                "--out", str(work / "certify"),
            ],
        },
    }  # fmt: skip


def _estimate(plan: dict) -> tuple[float, float]:
    """The range of the wall time here, from a plan's JSON."""
    low, high = plan["wall_seconds_range"][str(plan["workers"])]
    return float(low), float(high)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="work directory (default: a fresh temporary one)")
    parser.add_argument("--json", help="also write the table as JSON here")
    parser.add_argument("--only", nargs="*", help="only these jobs")
    args = parser.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="check-estimates-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    rows = []
    load_before = os.getloadavg()[0]
    for name, job in _jobs(work).items():
        if args.only and name not in args.only:
            continue
        if "prepare" in job:
            _dpaudit(job["prepare"], env=env)
        plans = []
        for _ in range(2):
            _, done = _dpaudit([*job["job"], "--dry-run", "--json"], env=env)
            plans.append(json.loads(done.stdout))
        (low, high), (low2, high2) = _estimate(plans[0]), _estimate(plans[1])
        middle, middle2 = (low * high) ** 0.5, (low2 * high2) ** 0.5
        took, _ = _dpaudit(job["job"], env=env)
        row = {
            "job": name,
            "estimate_low_s": low,
            "estimate_high_s": high,
            "estimate_s": middle,
            "second_estimate_s": middle2,
            "agreement": abs(middle - middle2) / max(middle, middle2),
            "measured_s": took,
            "ratio": middle / took,
            "within_range": low <= took <= high,
        }
        rows.append(row)
        print(
            f"{name:18s} estimate {low:7.1f}–{high:7.1f} s (middle {middle:7.1f}, again {middle2:7.1f}, "
            f"{100 * row['agreement']:.0f} % apart)  measured {took:7.1f} s  ratio {row['ratio']:.2f}",
            flush=True,
        )
    load = {"load_1min_before": load_before, "load_1min_after": os.getloadavg()[0], "cpus": os.cpu_count()}
    print(f"load average (1 min) {load['load_1min_before']:.1f} before, {load['load_1min_after']:.1f} after; "
          f"{load['cpus']} CPUs")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, **load}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
