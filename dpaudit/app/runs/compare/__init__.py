"""``dpaudit compare``: every defense of a grid under the same attacks, on the executors.

A *grid* (TOML, :func:`load_grid`) names a dataset, the defense settings to train (a parameter
given as a list expands into one setting per value, the non-private baseline always included),
the repeats (seeds), and the attacks every trained record faces: membership inference (any
registered attack; shadows shared between targets), evasion radii (certified accuracy where a
defense certifies), model inversion, and canary audits of the training algorithm.

The grid becomes independent jobs, run on the existing executors (a local process pool, or Ray
with an address) in two waves: every (setting, seed) trains (or finds its record), then every
trained record is attacked, certified and inverted, and every DP setting audited. Each job's
outcome is written atomically to ``RUN_DIR/compare/NAME/jobs/KEY.json`` with a hash of what
it was asked, so a rerun (or a run after an interruption) does only the jobs that are missing,
and says how many it reused. The trained records, shadows, certificates and attack results
land where the other verbs put them, so their reports drill down from the comparison.

The outcomes are condensed into a :class:`~dpaudit.results.comparison.ComparisonResult` (the
defense × measure matrix, computed in the torch-free core by
:func:`dpaudit.results.compare_outcomes.condense`; ``reports.compare`` only renders it).
Measures follow Jayaraman & Evans (USENIX Security 2019, §4) — accuracy loss against the
baseline, ε_UB under each accountant, attack advantage against e^ε − 1 — and Aerni et al.
(CCS 2024): membership on the most vulnerable samples (ranked by the shadows alone, never the
target) beside the average.

The package's rooms: :mod:`~dpaudit.app.runs.compare.grid` (parsing and validating a grid),
:mod:`~dpaudit.app.runs.compare.sections` (the typed values a grid's tables are read into),
:mod:`~dpaudit.app.runs.compare.jobs` (the five job kinds and their :class:`JobKey`),
:mod:`~dpaudit.app.runs.compare.orchestration` (the waves, the job store, the matrix).
"""

from __future__ import annotations

from dpaudit.app.runs.compare.grid import COMPARE_SECTIONS, CompareGrid, GridError, Setting, load_grid, parse_grid
from dpaudit.app.runs.compare.jobs import JobKey, inversion_configs, train_job, trained_algorithm
from dpaudit.app.runs.compare.orchestration import CompareSpec, condense, run_compare

__all__ = [
    "COMPARE_SECTIONS",
    "CompareGrid",
    "CompareSpec",
    "GridError",
    "JobKey",
    "Setting",
    "condense",
    "inversion_configs",
    "load_grid",
    "parse_grid",
    "run_compare",
    "train_job",
    "trained_algorithm",
]
