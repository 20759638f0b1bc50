"""The test tiers the default suite leaves out are run by CI, except the ones CI cannot run.

The default suite (``make test``) excludes marked tiers so that it stays within its time budget;
a tier left out there and not run by ``.ci/run`` would be tested by nobody. ``slow``
(reproductions, hours) and ``gpu`` (no device in CI) are the deliberate exceptions.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
NOT_IN_CI = {"slow", "gpu"}


def _pytest_config() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def _excluded_by_default(addopts: str) -> set[str]:
    match = re.search(r"-m '([^']*)'", addopts)
    assert match, f"addopts selects no tiers: {addopts!r}"
    return set(re.findall(r"not (\w+)", match.group(1)))


def test_every_tier_the_default_suite_leaves_out_is_run_by_ci() -> None:
    config = _pytest_config()
    registered = {m.split(":")[0].strip() for m in config["markers"]}
    excluded = _excluded_by_default(config["addopts"])
    assert excluded <= registered, f"addopts names unregistered markers: {sorted(excluded - registered)}"
    ci = (ROOT / ".ci" / "run").read_text()
    run_by_ci = {
        tier
        for line in ci.splitlines()
        if "pytest" in line and not line.lstrip().startswith("#")
        for tier in re.findall(r"-m '?(\w+)", line)
    }
    assert "make test" in ci, ".ci/run must call the README's test command"
    assert excluded - NOT_IN_CI <= run_by_ci, f"tiers nobody runs: {sorted(excluded - NOT_IN_CI - run_by_ci)}"


def test_parser_reads_the_tiers_a_selection_leaves_out() -> None:
    # The check above fails when a new tier is added to addopts and not to .ci/run: the parser must see it.
    assert _excluded_by_default("-m 'not slow and not cluster and not extended' -ra") == {"slow", "cluster", "extended"}
