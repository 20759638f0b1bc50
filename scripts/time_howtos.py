"""Time every how-to command of the documentation and record the finding each one prints.

The how-to blocks of the README and of the pages under ``docs/`` (the ```bash blocks marked
``<!-- howto -->``) are promises to a first-time user: each command finishes in a few minutes on
a 2-core CPU and prints something a reader can see (an ε_LB above 0, an accuracy, a certified
radius). This script holds the one list of those commands (:data:`HOWTOS`, each written exactly
as the pages write it); a test compares the list with the pages' marked blocks, so the two cannot
drift apart.

Each command runs in a shell, in a work directory of its own (``examples/`` and ``scripts/`` are
linked into it, the data root comes from ``--data-root`` or ``$DPAUDIT_DATA_ROOT``), with the
``dpaudit`` of this interpreter first on the path. The script measures wall time and exit status,
keeps the output's headline line (the finding), and writes ``howtos.json`` and ``howtos.md``
atomically after every command. A rerun skips the commands already finished with exit status 0
(``--force`` reruns them all); a command whose inputs (an earlier how-to's run directory) are
gone from the work directory reruns what it needs first, untimed.

The commands run with the project's default thread plan: the variables the plan reads
(``dpaudit.api.THREAD_ENV_VARIABLES``) are removed from their environment, so the times are what
a user who sets nothing gets.

With ``--update-docs`` the script then sets each marked command's ``# <time> on 2 cores``
comment, in every page that has one (:func:`howto_pages`), from the results.

With ``--background-load N`` the script first starts N single-threaded CPU-bound processes
(a busy loop each), keeps them running while it times, and stops them at the end: the machine
a user shares with other work. Its results go to ``<out>/loaded/`` and its table sets each
time beside the quiet machine's (``<out>/howtos.json``, the times the pages print) with their
ratio; a how-to more than :data:`LOADED_RATIO` × its page's time is flagged (the pages' times
are a promise on a shared machine too).

Usage: ``python scripts/time_howtos.py [--only NAME ...] [--force] [--data-root DIR]
[--workdir DIR] [--out DIR] [--limit-seconds 300] [--update-docs] [--background-load N]``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpaudit.api import THREAD_ENV_VARIABLES

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "scripts" / "results" / "howtos"
MARKER = "<!-- howto -->"
#: What an audit's reader looks at: ε_LB, what the design could show, the claim and the verdict.
AUDIT_FINDING = r"^\s*(epsilon_lb|ceiling|epsilon_ub)\s+[\d.]+\s|^\s*(no )?violation"
#: The documentation's promise: every how-to finishes within this on 2 CPU cores.
LIMIT_SECONDS = 300.0
#: With a background load, a how-to may take at most this multiple of its page's (quiet) time.
LOADED_RATIO = 1.5
#: How-tos this short are not held to the ratio: their time is interpreter start-up and import,
#: where a fraction of a second of scheduling noise is a large ratio (they are listed all the same).
RATIO_FLOOR_SECONDS = 5.0


@dataclass(frozen=True)
class HowTo:
    """One how-to command of the documentation.

    Attributes:
        name: short key (results and ``--only``).
        use: what a reader runs it for.
        command: the command exactly as the pages write it, on one line.
        finding: a regular expression; the first output line it matches is the headline.
        needs: names of how-tos whose outputs this one reads (run first).
        creates: a path (relative to the work directory) whose presence means this how-to's
            outputs are there for the ones that need it.
    """

    name: str
    use: str
    command: str
    finding: str
    needs: tuple[str, ...] = ()
    creates: str | None = None


#: The how-to commands, in the order a reader meets them. One place: tests/app/test_time_howtos.py
#: compares it with the ``<!-- howto -->`` blocks of :func:`howto_pages`.
HOWTOS: tuple[HowTo, ...] = (
    HowTo(
        "epsilon",
        "ε under each accountant",
        "dpaudit epsilon --sampling-rate 0.01 --noise-multiplier 4 --num-steps 10000 --delta 1e-5",
        r"^\s*pld\s",
    ),
    HowTo(
        "epsilon-sigma",
        "the smallest σ reaching a target ε",
        "dpaudit epsilon --sampling-rate 0.01 --num-steps 10000 --delta 1e-5 --target-epsilon 2",
        r"noise multiplier sigma",
    ),
    HowTo(
        "epsilon-steps",
        "the most steps at a given σ",
        "dpaudit epsilon --sampling-rate 0.01 --noise-multiplier 4 --delta 1e-5 --target-epsilon 2 --solve num-steps",
        r"at most T =",
    ),
    HowTo(
        "epsilon-gaussian",
        "one Gaussian mechanism's σ",
        "dpaudit epsilon --mechanism gaussian --target-epsilon 1 --delta 1e-5",
        r"^\s*analytic\s",
    ),
    HowTo("datasets", "what the data root holds", "dpaudit datasets", r"^mnist\s"),
    HowTo(
        "pate-analyze",
        "PATE's ε from a teacher-vote matrix",
        "dpaudit pate analyze --votes votes.npy --sigma 40 --threshold 200 --threshold-sigma 150 --delta 1e-5",
        r"epsilon, data-independent",
    ),
    HowTo(
        "pate-analyze-release",
        "a private release of PATE's data-dependent ε",
        "dpaudit pate analyze --votes votes.npy --sigma 40 --threshold 200 "
        "--threshold-sigma 150 --answered answered.npy "
        "--smooth-sensitivity-beta 0.0329 --smooth-sensitivity-sigma 15",
        r"epsilon, released",
    ),
    HowTo(
        "train",
        "train a defense",
        "dpaudit train --defense nonprivate --dataset mnist --model abadi-mnist --epochs 5 --out runs/mnist",
        r"test accuracy",
        creates="runs/mnist/records",
    ),
    HowTo(
        "compare",
        "every defense of a grid under the same attacks",
        "dpaudit compare --config examples/compare-digits.toml --out runs/compare",
        r"^\s*nonprivate\s",
    ),
    HowTo(
        "train-overfit",
        "a target that leaks (for the membership attacks)",
        "dpaudit train --defense nonprivate --dataset digits --model digits-mlp "
        "--epochs 100 --member-fraction 0.25 --out runs/digits",
        r"test accuracy",
        creates="runs/digits/records",
    ),
    HowTo(
        "membership",
        "membership inference with every attack",
        "dpaudit attack membership --target runs/digits --attack all --num-shadows 16 --out runs/digits",
        r"^\s*rmia\s",
        needs=("train-overfit",),
    ),
    HowTo(
        "train-faces",
        "a face-recognition target (for MI-Face)",
        "dpaudit train --defense nonprivate --dataset faces --model "
        "softmax-regression --epochs 100 --learning-rate 0.01 --batch-size 32 "
        "--member-fraction 0.75 --out runs/faces",
        r"test accuracy",
        creates="runs/faces/records",
    ),
    HowTo(
        "inversion",
        "model inversion (MI-Face), judged by an independent evaluator",
        "dpaudit attack inversion --target runs/faces --attack mi-face "
        "--max-iterations 1000 --evaluator-epochs 20 --out runs/faces",
        r"^\s*mi-face\s+[\d.]+",
        needs=("train-faces",),
    ),
    HowTo(
        "train-faces-mlp",
        "a faces-mlp target trained with the default flags (for MI-Face's defaults)",
        "dpaudit train --defense nonprivate --dataset faces --model faces-mlp --out runs/faces-mlp",
        r"test accuracy",
        creates="runs/faces-mlp/records",
    ),
    HowTo(
        "inversion-default",
        "MI-Face with its default flags: each class stops on convergence or the 3-minute budget",
        "dpaudit attack inversion --target runs/faces-mlp --attack mi-face --out runs/faces-mlp",
        r"^\s*mi-face\s+[\d.]+",
        needs=("train-faces-mlp",),
    ),
    HowTo(
        "train-smoothing",
        "a defense that certifies (randomized smoothing)",
        "dpaudit train --defense smoothing --dataset digits --model digits-mlp "
        "--epochs 30 --smoothing-sigma 0.5 --out runs/smoothing",
        r"test accuracy",
        creates="runs/smoothing/records",
    ),
    HowTo(
        "certify",
        "certified beside robust accuracy (evasion attacks)",
        "dpaudit certify --target runs/smoothing --radii 0.25,0.5,1 --num-examples 200 --out runs/smoothing",
        r"^\s*certified smoothing\s",
        needs=("train-smoothing",),
        creates="runs/smoothing/certify",
    ),
    HowTo(
        "report",
        "re-render every report of a run",
        "dpaudit report runs/smoothing",
        r"index|report",
        needs=("certify",),
    ),
    HowTo(
        "audit-white-box",
        "white-box canary audit of DP-SGD",
        "dpaudit audit --threat white-box --dataset digits --model digits-mlp "
        "--target-epsilon 2 --delta 1e-5 --num-workers 2 --out runs/audit",
        AUDIT_FINDING,
    ),
    HowTo(
        "audit-budget",
        "white-box audit on a time budget",
        "dpaudit audit --threat white-box --target-epsilon 1 --budget-seconds 60 --num-workers 2 --out runs/audit",
        AUDIT_FINDING,
    ),
    HowTo(
        "audit-black-box",
        "black-box audit from a worst-case start (final models only)",
        "dpaudit audit --threat black-box --method multi-run --dataset digits "
        "--model digits-mlp --num-members 50 --sampling-rate 1 "
        "--num-steps 20 --clip-norm 2 --learning-rate 0.01 --target-epsilon 8 "
        "--init worst-case --canary clipbkd --num-trials 100 "
        "--num-workers 2 --out runs/audit",
        AUDIT_FINDING,
    ),
    HowTo(
        "audit-one-run",
        "black-box one-run audit (one training)",
        "dpaudit audit --threat black-box --method one-run --target-epsilon 4 "
        "--num-canaries 500 --one-run-bound fdp --out runs/audit",
        AUDIT_FINDING,
    ),
    HowTo(
        "audit-train-fn",
        "audit your own training code (Opacus) in one run",
        "dpaudit audit --train-fn scripts/opacus_train_fn.py:train --threat "
        "black-box --method one-run --num-canaries 200 "
        "--num-members 300 --claim-noise-multiplier 6.6 --claim-sampling-rate "
        "0.1 --claim-num-steps 300 --out runs/opacus",
        AUDIT_FINDING,
    ),
    HowTo(
        "check-opacus",
        "the conformance battery on correct Opacus DP-SGD",
        "dpaudit check --train-fn examples/dp_bugs/correct_opacus.py:train "
        "--model-fn examples/dp_bugs/correct_opacus.py:model "
        "--claim-noise-multiplier 3 --claim-sampling-rate 0.1 --claim-num-steps "
        "50 --num-workers 2 --junit runs/check/results.xml --out runs/check",
        r"no violation|^\s*VIOLATED",
    ),
)


def normalize(command: str) -> str:
    """One line, single spaces: how a page's command and a :data:`HOWTOS` entry are compared."""
    return " ".join(command.replace("\\\n", " ").split())


def howto_pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold how-to blocks: the README (the front page) and every page of ``docs/``.

    Links are not followed: ``docs/results/files`` shows ``scripts/results`` to the docs build,
    and the scripts' own Markdown there holds no how-to.
    """
    pages = [root / "README.md"]
    for folder, dirs, files in os.walk(root / "docs"):  # os.walk does not enter linked folders
        dirs.sort()
        pages += [Path(folder) / f for f in sorted(files) if f.endswith(".md")]
    return pages


def howto_commands(page: str, marker: str = MARKER) -> list[str]:
    """The commands of every ```bash block that the line before marks with ``marker``.

    Continuation lines (a trailing backslash) are joined, comment lines and trailing ``# …``
    comments dropped, and each command normalised (:func:`normalize`).
    """
    commands: list[str] = []
    lines = page.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != marker:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or lines[j].strip() != "```bash":
            raise ValueError(f"line {i + 1}: {marker} must be followed by a ```bash block")
        pending = ""
        for body in lines[j + 1 :]:
            if body.strip() == "```":
                break
            text = body.strip()
            if not pending and (not text or text.startswith("#")):
                continue
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            text = re.sub(r"\s+#.*$", "", pending + text)
            pending = ""
            commands.append(normalize(text))
    return commands


TIME_COMMENT = re.compile(r"\s+#\s*[0-9][0-9. a-z]* on 2 cores\s*$")


def with_times(page: str, results: Sequence[dict[str, object]], marker: str = MARKER) -> str:
    """``page`` with each how-to command's trailing ``# <time> on 2 cores`` set from ``results``.

    The comment goes on the command's last line (after a continuation, the line without a
    backslash). A command without a result keeps its line as it is.
    """
    seconds = {normalize(str(r["command"])): float(r["seconds"]) for r in results}  # type: ignore[arg-type]
    lines = page.splitlines(keepends=True)
    inside, pending = False, ""
    for i, line in enumerate(lines):
        text = line.rstrip("\n")
        if not inside:
            if text.strip() == "```bash" and i > 0 and any(lines[k].strip() == marker for k in range(max(0, i - 2), i)):
                inside = True
            continue
        if text.strip() == "```":
            inside, pending = False, ""
            continue
        body = TIME_COMMENT.sub("", text)
        if not pending and (not body.strip() or body.strip().startswith("#")):
            continue
        if body.rstrip().endswith("\\"):
            pending += body.strip()[:-1] + " "
            continue
        command = normalize(re.sub(r"\s+#.*$", "", pending + body.strip()))
        pending = ""
        if command in seconds:
            lines[i] = f"{body.rstrip()}   # {_fmt_seconds(seconds[command])} on 2 cores\n"
    return "".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fmt_seconds(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    return f"{int(s // 60)} min {int(round(s % 60)):02d} s"


def write_pate_inputs(workdir: Path) -> None:
    """The vote matrix the PATE how-tos read: 250 teachers, 1,000 queries, 10 classes.

    Most queries have a clear plurality (the case where the data-dependent analysis pays
    little), a fifth are split; ``answered.npy`` marks the queries Confident-GNMax answered.
    """
    rng = np.random.default_rng(0)
    num_queries, num_teachers, num_classes = 1000, 250, 10
    votes = np.zeros((num_queries, num_classes), dtype=np.int64)
    for q in range(num_queries):
        agree = 0.9 if q % 5 else 0.35
        top = rng.integers(num_classes)
        p = np.full(num_classes, (1 - agree) / (num_classes - 1))
        p[top] = agree
        votes[q] = rng.multinomial(num_teachers, p)
    np.save(workdir / "votes.npy", votes)
    np.save(workdir / "answered.npy", votes.max(axis=1) >= 200)


def _prepare(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("examples", "scripts"):
        link = workdir / name
        if not link.exists():
            link.symlink_to(ROOT / name, target_is_directory=True)
    if not (workdir / "votes.npy").exists():
        write_pate_inputs(workdir)


def _environment(data_root: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if data_root:
        env["DPAUDIT_DATA_ROOT"] = data_root
    for name in THREAD_ENV_VARIABLES:  # the default thread plan, as a user who sets nothing gets it
        env.pop(name, None)
    return env


#: One busy, single-threaded process: the "second CPU-bound process" of a shared machine.
_SPIN = "while True: pass"


def host_speed_seconds() -> float:
    """Seconds one interpreter takes for 5 million additions, the best of three: the host's speed when timed.

    A shared or virtual host's speed drifts (the same loop took 0.7 s and 3 s on this project's
    2-core machine on different days), so each table says how fast the host was while it was measured.
    """
    best = float("inf")
    for _ in range(3):
        started, total = time.perf_counter(), 0
        for i in range(5_000_000):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best, 2)


def start_background_load(count: int) -> list[subprocess.Popen[bytes]]:
    """Starts ``count`` single-threaded CPU-bound processes; the caller stops them (:func:`stop_background_load`)."""
    return [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]


def stop_background_load(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def ratio_bound(quiet: dict[str, object]) -> float:
    """The loaded/quiet ratio a how-to is held to: :data:`LOADED_RATIO`, or its quiet parallelism if larger.

    A how-to whose quiet run kept p cores busy (CPU time / wall time = p) gets one core beside a
    busy process and cannot finish in less than about p times its quiet time, however its threads
    are planned; a serial one is held to the 1.5x the issue sets.
    """
    wall, cpu = float(quiet["seconds"]), float(quiet.get("cpu_seconds") or 0.0)  # type: ignore[arg-type]
    return max(LOADED_RATIO, cpu / wall if wall > 0 else 0.0)


def loaded_rows(loaded: Sequence[dict[str, object]], quiet: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """Each loaded time beside the quiet machine's time of the same command, their ratio, and whether it holds.

    A how-to whose quiet time is under :data:`RATIO_FLOOR_SECONDS` is shown but not held; the
    others are held to :func:`ratio_bound`. One the quiet run did not time (or timed with another
    command) has no ratio.
    """
    by_name = {str(r["name"]): r for r in quiet}
    rows = []
    for r in loaded:
        q = by_name.get(str(r["name"]))
        base = float(q["seconds"]) if q is not None and q["command"] == r["command"] else None  # type: ignore[arg-type]
        seconds = float(r["seconds"])  # type: ignore[arg-type]
        ratio = None if base is None or base <= 0 else seconds / base
        held = base is not None and base >= RATIO_FLOOR_SECONDS
        bound = ratio_bound(q) if q is not None and base is not None else LOADED_RATIO
        ok = r["exit_status"] == 0 and (not held or (ratio is not None and ratio <= bound))
        rows.append(
            {
                "name": r["name"],
                "quiet": base,
                "loaded": seconds,
                "ratio": ratio,
                "bound": bound,
                "held": held,
                "ok": ok,
            }
        )
    return rows


def render_loaded_markdown(rows: Sequence[dict[str, object]], *, meta: dict[str, object]) -> str:
    held = [r for r in rows if r["held"]]
    within = sum(1 for r in held if r["ok"])
    ratios = [float(r["ratio"]) for r in held if r["ratio"] is not None]  # type: ignore[arg-type]
    worst = f"; the largest ratio is {max(ratios):.2f}×" if ratios else ""
    lines = [
        "# How-tos under a background load",
        "",
        f"Measured by `scripts/time_howtos.py --background-load {meta['background_load']}` on {meta['cpus']} CPU "
        f"cores: {meta['background_load']} single-threaded busy process(es) ran beside every command, which ran "
        f"with the default thread plan (no thread variable set). Load average at start {meta['load_at_start']}; "
        f"host speed {meta.get('host_speed_seconds', '—')} s for 5 million interpreted additions (before the busy "
        "processes started). "
        f"The quiet time is the one the pages print (`howtos.json`). {within} of the {len(held)} how-tos that take "
        f"{RATIO_FLOOR_SECONDS:g} s or more stayed within their bound ({LOADED_RATIO:g}×, or a how-to's "
        "quiet parallelism, its CPU time over its wall time, where that is larger: a run that kept p cores "
        f"busy gets one beside the busy process){worst}. Shorter ones are listed but not held (their time is "
        "start-up).",
        "",
        "| how-to | quiet (pages) | loaded | ratio | bound | within |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        quiet = "—" if r["quiet"] is None else _fmt_seconds(float(r["quiet"]))  # type: ignore[arg-type]
        ratio = "—" if r["ratio"] is None else f"{float(r['ratio']):.2f}×"  # type: ignore[arg-type]
        verdict = ("yes" if r["ok"] else "**no**") if r["held"] else "not held (short)"
        bound = f"{float(r.get('bound', LOADED_RATIO)):.2f}×"  # type: ignore[arg-type]
        loaded_time = _fmt_seconds(float(r["loaded"]))  # type: ignore[arg-type]
        lines.append(f"| {r['name']} | {quiet} | {loaded_time} | {ratio} | {bound} | {verdict} |")
    return "\n".join(lines) + "\n"


def find(h: HowTo, out: str, err: str = "") -> str:
    """The headline: the output lines (stdout first) that ``h.finding`` matches, joined by " · "."""
    pattern = re.compile(h.finding, re.IGNORECASE)
    # Progress bars redraw with carriage returns; keep what a terminal shows last.
    lines = [" ".join(ln.split("\r")[-1].split()) for ln in (out + "\n" + err).splitlines()]
    return " · ".join(ln for ln in lines if ln and pattern.search(ln))


def run_one(h: HowTo, workdir: Path, env: dict[str, str], *, timeout: float) -> dict[str, object]:
    """Runs one how-to in ``workdir``; its wall time, exit status, finding and output's tail."""
    started = time.perf_counter()
    # CPU seconds of the command and every process it waited for: on a shared machine the wall
    # time grows with the load, the CPU time hardly, so CPU / cores estimates a quiet machine.
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(
            ["bash", "-c", h.command], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc = 124
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    seconds = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return {
        "name": h.name,
        "use": h.use,
        "command": h.command,
        "exit_status": rc,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "finding": find(h, out, err),
        "stdout_tail": out[-3000:],
        "stderr_tail": err[-1000:] if rc else "",
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def render_markdown(results: Sequence[dict[str, object]], *, meta: dict[str, object]) -> str:
    lines = [
        "# How-tos, timed",
        "",
        f"Measured by `scripts/time_howtos.py` on {meta['cpus']} CPU cores "
        f"({meta['note']}); load average at start {meta['load_at_start']}; "
        f"host speed {meta.get('host_speed_seconds', '—')} s for 5 million interpreted additions. "
        "CPU time is the command's and its worker processes' user + system "
        "time: on a busy machine the wall time grows with the load "
        "and the CPU time hardly, so CPU time / cores estimates the wall time on a quiet machine.",
        "",
        "| how-to | command | exit | wall time | CPU time | finding |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        cmd = str(r["command"]).replace("|", "\\|")
        finding = str(r["finding"])
        finding = (finding if len(finding) <= 300 else finding[:299] + "…").replace("|", "\\|") or "—"
        lines.append(
            f"| {r['name']} | `{cmd}` | {r['exit_status']} | "
            f"{_fmt_seconds(float(r['seconds']))} | "
            f"{_fmt_seconds(float(r.get('cpu_seconds', 0.0)))} | {finding} |"
        )  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def _load(path: Path) -> tuple[dict[str, dict[str, object]], dict[str, object] | None]:
    if not path.is_file():
        return {}, None
    data = json.loads(path.read_text())
    return {r["name"]: r for r in data.get("howtos", [])}, data.get("meta")


def _time_chosen(
    chosen: Sequence[HowTo],
    done: dict[str, dict[str, object]],
    args: argparse.Namespace,
    env: dict[str, str],
    meta: dict[str, object],
    ensure_inputs: Callable[[HowTo], None],
    out_json: Path,
) -> bool:
    """Times the chosen how-tos not finished before, writing the results after each; whether any ran."""
    ran = False
    for h in chosen:
        prev = done.get(h.name)
        if prev is not None and prev["exit_status"] == 0 and prev["command"] == h.command:
            print(f"[howtos] {h.name}: finished before ({prev['seconds']} s), skipped", file=sys.stderr)
            prev["finding"] = find(h, str(prev.get("stdout_tail", "")))  # the headline as the list now defines it
            continue
        ensure_inputs(h)
        print(f"[howtos] {h.name}: {h.command}", file=sys.stderr)
        result = run_one(h, args.workdir, env, timeout=args.timeout)
        ran = True
        result["over_limit"] = float(result["seconds"]) > args.limit_seconds  # type: ignore[arg-type]
        done[h.name] = result
        print(
            f"[howtos] {h.name}: exit {result['exit_status']} in "
            f"{_fmt_seconds(float(result['seconds']))}: {result['finding']}",
            file=sys.stderr,
        )  # type: ignore[arg-type]
        ordered = [done[x.name] for x in HOWTOS if x.name in done]
        _write_atomic(out_json, json.dumps({"meta": meta, "howtos": ordered}, indent=2) + "\n")
        _write_atomic(args.out / "howtos.md", render_markdown(ordered, meta=meta))
    return ran


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=[h.name for h in HOWTOS],
        help="run only these how-tos (and what they need)",
    )
    p.add_argument("--force", action="store_true", help="rerun how-tos already finished (default: skip them)")
    p.add_argument(
        "--data-root", default=os.environ.get("DPAUDIT_DATA_ROOT"), help="data root (default: $DPAUDIT_DATA_ROOT)"
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "dpaudit-howtos",
        help="where the commands run (kept between runs, wiped by --force)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where howtos.json and howtos.md go")
    p.add_argument(
        "--limit-seconds",
        type=float,
        default=LIMIT_SECONDS,
        help="the documentation's promise per command (a slower one is flagged)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="kill a command after this many seconds")
    p.add_argument("--note", default="shared machine", help="how busy the machine was, for the table's caption")
    p.add_argument(
        "--update-docs",
        action="store_true",
        help="after the run, set each how-to's '# <time> on 2 cores' comment in README.md and docs/ from the results",
    )
    p.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="run N single-threaded busy processes beside every command; results go to <out>/loaded/ and are "
        f"set against <out>/howtos.json (a how-to over {LOADED_RATIO:g}x its page's time is flagged)",
    )
    args = p.parse_args(argv)
    if args.background_load < 0:
        p.error(f"--background-load: must be >= 0, got {args.background_load}")
    if args.background_load and args.update_docs:
        p.error("--update-docs: the pages print the quiet machine's times; not with --background-load")
    quiet_json = args.out / "howtos.json"
    if args.background_load:
        args.out = args.out / "loaded"
    out_json = args.out / "howtos.json"
    done, stored_meta = _load(out_json)
    if args.force:
        # --force reruns what was chosen; with --only, the other how-tos keep their measurements.
        done = {k: r for k, r in done.items() if args.only and k not in args.only}
        stored_meta = None
        if not args.only and args.workdir.exists():
            shutil.rmtree(args.workdir)
    _prepare(args.workdir)
    env = _environment(args.data_root)
    by_name = {h.name: h for h in HOWTOS}
    chosen = [h for h in HOWTOS if not args.only or h.name in args.only]
    meta = {
        "cpus": os.cpu_count(),
        "load_at_start": round(os.getloadavg()[0], 1),
        "host_speed_seconds": host_speed_seconds(),
        "note": args.note,
        "limit_seconds": args.limit_seconds,
        "data_root": args.data_root,
        "threads": "the default plan (no thread variable set)",
        "background_load": args.background_load,
    }
    ran = False  # a rerun that only skips keeps the caption of the run that measured

    def ensure_inputs(h: HowTo) -> None:
        for need in h.needs:
            dep = by_name[need]
            ensure_inputs(dep)
            if dep.creates is None or not (args.workdir / dep.creates).exists():
                print(f"[howtos] {h.name} needs {need}: running it first (untimed)", file=sys.stderr)
                run_one(dep, args.workdir, env, timeout=args.timeout)

    load = start_background_load(args.background_load)
    try:
        ran = _time_chosen(chosen, done, args, env, meta, ensure_inputs, out_json)
    finally:
        stop_background_load(load)
    ordered = [done[x.name] for x in HOWTOS if x.name in done]
    if not ran and stored_meta is not None:
        meta = stored_meta
    _write_atomic(out_json, json.dumps({"meta": meta, "howtos": ordered}, indent=2) + "\n")
    _write_atomic(args.out / "howtos.md", render_markdown(ordered, meta=meta))
    if args.background_load:
        quiet = json.loads(quiet_json.read_text())["howtos"] if quiet_json.is_file() else []
        rows = loaded_rows(ordered, quiet)
        _write_atomic(args.out / "comparison.json", json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        _write_atomic(args.out / "comparison.md", render_loaded_markdown(rows, meta=meta))
        slow = [str(r["name"]) for r in rows if not r["ok"]]
        print(
            f"[howtos] with {args.background_load} busy process(es): "
            f"{sum(1 for r in rows if r['held'] and r['ok'])} of {sum(1 for r in rows if r['held'])} held how-tos "
            "within their bound of the quiet times" + (f"; not: {', '.join(slow)}" if slow else ""),
            file=sys.stderr,
        )
        return 1 if slow else 0
    if args.update_docs:
        for page in howto_pages():
            text = page.read_text()
            timed = with_times(text, ordered)
            if timed != text:
                _write_atomic(page, timed)
                print(f"[howtos] times written into {page.relative_to(ROOT)}", file=sys.stderr)
    failed = [r["name"] for r in ordered if r["exit_status"] != 0 or r.get("over_limit")]
    if failed:
        print(f"[howtos] failed or over {args.limit_seconds:g} s: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
