"""What ``dpaudit report`` checks before it writes a page: nothing it renders may lie.

A page sets evidence against a guarantee; a stored file edited by hand (or by a hostile party)
could make it say what no run measured. :func:`verify_run` refuses the run directory, before
anything is written, with one line naming the file, the field and the contradiction (exit 2 on
the command line), when:

* **a file escapes the run**: a symbolic link anywhere in it resolves outside the run directory
  (a record, a result or the ``reports`` folder itself would be read from, or written to,
  somewhere else);
* **a reference escapes the run**: a model id a result names (a membership or inversion attack's
  target, a certify summary's model, a comparison row's repeats) is not a plain name — an
  absolute path, ``..``, a separator or a glob pattern would load another run's record and show
  its claim beside this attack; a result stored under one target's directory names another; a
  record found under an id states a different one;
* **a link leaves the reports folder**: a comparison row's drill-down link is not a relative
  path inside the run's ``reports`` folder (:func:`reports.render.safe_href`: no scheme, no
  ``..``, no absolute path);
* **a result contradicts itself**: a comparison row's stored verdict says "no violation" while its
  ε_LB exceeds its tightest ε_UB (the rule ``compare`` decides verdicts by), or its ε_LB is below
  an attack's ε_LB it is the maximum of; an audit's stored ``violation`` differs from
  ε_LB > ε_UB, or its ε_UB differs from the one it lists for its own accountant; a certify
  summary stores no soundness violation where its own certificates and attacks show one.

Refusal rather than rendering the contradiction: a page cannot say which of two contradicting
numbers was edited, and a re-render that exits 3 (or 0) on a file that was edited would make
the exit status a CI job gates on depend on which number the editor changed. Exit 2 says the
run directory itself is not to be believed.

Records are checked by :func:`dpaudit.app.records.verify_record`, the verifier ``attack`` uses
(see :func:`verify_records`). The result files are read as JSON here (no torch).
"""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath
from typing import Any

from dpaudit import _validate as v
from dpaudit.results.record import RECORD_FILE, load_record
from dpaudit.store import RunDir, read_json, safe_stem

__all__ = ["plain_model_id", "verify_references", "verify_results", "verify_run", "verify_symlinks"]

# Relative slack when comparing two stored copies of one float (JSON round trips are exact; this only absorbs
# formatting).
_REL = 1e-9
_GLOB = frozenset("*?[]")


def _refuse(path: Path, message: str) -> v.InvalidArgument:
    # The file is the user's (their run directory): a usage error naming it (exit 2).
    return v.invalid(str(path), f"{str(path)!r}: {message}")


def plain_model_id(model_id: Any) -> bool:
    """Whether ``model_id`` is a plain name that can only resolve inside ``records/``.

    Not a path (no separator, not absolute, not ``.`` or ``..``), no glob pattern (the record
    lookup globs sub-model caches by id), no control character.
    """
    if not isinstance(model_id, str) or not model_id or model_id in (".", ".."):
        return False
    if "/" in model_id or "\\" in model_id or PurePosixPath(model_id).is_absolute():
        return False
    return not any(c in _GLOB or ord(c) < 32 for c in model_id)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def verify_symlinks(run: RunDir) -> None:
    """Refuses a run directory holding a symbolic link that resolves outside it.

    Raises:
        ValueError: names the link and where it points.
    """
    root = run.path.resolve()
    for top, dirs, files in os.walk(run.path):
        for name in (*dirs, *files):
            p = Path(top) / name
            if p.is_symlink() and not _inside(p.resolve(), root):
                raise _refuse(
                    p,
                    f"is a symbolic link to {str(p.resolve())!r}, outside the run directory "
                    f"{str(root)!r}; report reads only files inside the run",
                )


def _check_target(run: RunDir, directory: Path, files: list[Path]) -> str | None:
    """The one target the results in ``directory`` name, checked plain and matching the directory."""
    named: str | None = None
    for f in files:
        data = read_json(f)
        model_id = data.get("model_id") if isinstance(data, dict) else None
        if model_id is None:
            continue  # the result's own loader names a missing field
        if not plain_model_id(model_id):
            raise _refuse(
                f,
                f"model_id={v.short(model_id, 300)} is not a plain model id (a path, "
                "'..', a separator or a glob pattern): report resolves references only "
                "inside the run directory",
            )
        if safe_stem(model_id, default="target") != directory.name:
            raise _refuse(
                f,
                f"model_id={model_id!r} does not match its directory {directory.name!r}: "
                "the result was stored for another target",
            )
        if named is not None and model_id != named:
            raise _refuse(
                f, f"model_id={model_id!r} differs from {named!r}, named by the other results of {str(directory)!r}"
            )
        named = model_id
    return named


def _check_record_of(run: RunDir, model_id: str, referrer: Path) -> Path | None:
    """The record directory ``model_id`` resolves to, checked inside ``records/`` and stating that id."""
    found = run.find_record_dir(model_id)
    if found is None:
        return None
    if not _inside(found.resolve(), run.subdir("records").resolve()):
        raise _refuse(referrer, f"model_id={model_id!r} resolves to {str(found)!r}, outside the run's records")
    stated = load_record(found).model_id  # the record's own loader names a malformed file
    if stated != model_id:
        raise _refuse(
            found / RECORD_FILE,
            f"model_id={v.short(stated)} is not {model_id!r}, the id {str(referrer)!r} found this record under",
        )
    return found


def verify_references(run: RunDir) -> list[Path]:
    """Every reference a result makes (model ids, links) resolved inside the run only.

    Returns:
        The record directories the results refer to (for the record verifier).

    Raises:
        ValueError: names the file, the field and why.
    """
    from reports.render import safe_href

    referenced: list[Path] = []
    targets = [(d, sorted(d.glob("*.json"))) for d in run.membership_dirs()]
    targets += [(d, sorted(d.glob("inversion-*.json"))) for d in run.inversion_dirs()]
    for d, files in targets:
        model_id = _check_target(run, d, files)
        if model_id is not None and (found := _check_record_of(run, model_id, files[0])) is not None:
            referenced.append(found)
    for d in run.certify_dirs():
        path = d / "summary.json"
        data = read_json(path)
        model_id = data.get("model_id", d.name) if isinstance(data, dict) else d.name
        if not plain_model_id(model_id):
            raise _refuse(
                path,
                f"model_id={v.short(model_id, 300)} is not a plain model id (a path, "
                "'..', a separator or a glob pattern): report resolves references only "
                "inside the run directory",
            )
        if (found := _check_record_of(run, model_id, path)) is not None:
            referenced.append(found)
    for d in run.compare_dirs():
        path = d / "comparison.json"
        data = read_json(path)
        for i, row in enumerate(data.get("rows", ()) if isinstance(data, dict) else ()):
            if not isinstance(row, dict):
                continue  # the comparison's loader names it
            for j, model_id in enumerate(row.get("model_ids", ()) or ()):
                if not plain_model_id(model_id):
                    raise _refuse(
                        path,
                        f"rows[{i}].model_ids[{j}]={v.short(model_id, 300)} is not a plain model "
                        "id: report resolves references only inside the run directory",
                    )
            links = row.get("links", {})
            for name, href in links.items() if isinstance(links, dict) else ():
                if not safe_href(href):
                    raise _refuse(
                        path,
                        f"rows[{i}].links.{name}={v.short(href, 300)} is not a relative path "
                        "inside the run's reports folder (no scheme, no '..', no absolute "
                        "path): report links nothing else",
                    )
    return referenced


def _close(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= _REL * max(abs(a), abs(b)))


def _verify_comparison(path: Path) -> None:
    from dpaudit.results.comparison import load_comparison

    result = load_comparison(path)
    for i, row in enumerate(result.rows):
        ub = row.epsilon_ub_best
        at = f"rows[{i}] ({row.label!r})"
        # compare's own rule (dpaudit.results.compare_outcomes): a DP row whose best ε_LB exceeds its tightest ε_UB is a
        # violation.
        if row.epsilon_ub and row.epsilon_lb > ub and row.verdict != "violation":
            raise _refuse(
                path,
                f"{at} stores verdict={row.verdict!r} but its "
                f"epsilon_lb={row.epsilon_lb:g} > its tightest epsilon_ub={ub:g}: the "
                "row contradicts itself",
            )
        for attack, m in row.membership.items():
            lb = m.epsilon_lb
            if (
                isinstance(lb, (int, float))
                and not isinstance(lb, bool)
                and lb > row.epsilon_lb
                and not _close(float(lb), row.epsilon_lb)
            ):
                raise _refuse(
                    path,
                    f"{at} stores epsilon_lb={row.epsilon_lb:g} below its attack "
                    f"{attack!r}'s epsilon_lb={float(lb):g}, of which it is the maximum: the "
                    "row contradicts itself",
                )


def _verify_audit(path: Path) -> None:
    from dpaudit.results.audit import load_audit_result

    data = read_json(path)
    result = load_audit_result(path.parent)
    stored = data.get("violation") if isinstance(data, dict) else None
    if isinstance(stored, bool) and stored != result.violation:
        sign = ">" if result.violation else "<="
        raise _refuse(
            path,
            f"stores violation={str(stored).lower()} but "
            f"epsilon_lb={result.epsilon_lb:g} {sign} "
            f"epsilon_ub={result.epsilon_ub:g}: the result contradicts itself",
        )
    listed = result.epsilon_ub_by_accountant.get(result.accountant)
    if listed is not None and not _close(float(listed), result.epsilon_ub):
        raise _refuse(
            path,
            f"epsilon_ub={result.epsilon_ub:g} differs from "
            f"epsilon_ub_by_accountant.{result.accountant}={float(listed):g}, the "
            "same accountant's ε_UB: the result contradicts itself",
        )


def _verify_certified(run: RunDir) -> None:
    """A certify summary storing no soundness violation where its own certificates and attacks show one.

    The rule ``certify`` stores them by (:func:`dpaudit.robustness.certification.soundness_violations`,
    tolerance 10⁻⁹): at each radius, a certificate of the summary's norm against the lowest
    accuracy any stored attack left. Only this direction is refused: a violation stored where none
    is recomputed is shown as stored (exit 3), never hidden.
    """
    import numpy as np

    from dpaudit.robustness.certification import soundness_violations
    from reports.certified_runs import SUMMARY_FILE, load_certified_runs

    for cr in load_certified_runs(run):
        if cr.soundness_violations or not cr.attacks or not cr.certificates:
            continue
        path = run.certify_dir(str(cr.summary.model_id)) / SUMMARY_FILE
        radii = [float(r) for r in cr.radii]
        try:
            strongest = np.min(
                np.array([[res.robust_accuracy_at(r) for r in radii] for res in cr.attacks.values()]), axis=0
            )
        except ValueError as exc:
            raise _refuse(path, f"radii={radii} are not the radii its stored attacks ran at ({exc})") from None
        for cert in cr.certificates.values():
            if cert.norm != (cr.summary.norm or cert.norm):
                continue
            found = soundness_violations(
                cert.certified_accuracy(radii), strongest, radii=radii, certificate=cert.method, tolerance=1e-9
            )
            if found:
                x = found[0]
                raise _refuse(
                    path,
                    f"stores soundness_violations=[] but its certificate {cert.method!r} "
                    f"certifies {x.certified_accuracy:.3f} at radius {x.radius:g} > "
                    f"{x.robust_accuracy:.3f}, "
                    "the accuracy its stored attacks left: the summary contradicts its own results",
                )


def verify_results(run: RunDir) -> None:
    """Refuses a stored result whose verdict-relevant numbers contradict each other (see the module docstring).

    Raises:
        ValueError: names the file, the field and the contradiction.
    """
    for d in run.compare_dirs():
        _verify_comparison(d / "comparison.json")
    for d in run.audit_dirs():
        _verify_audit(d / "result.json")
    _verify_certified(run)


def verify_run(run: RunDir) -> list[Path]:
    """Every check above, in order: links out of the run, references, contradictions.

    Returns:
        The record directories results refer to (beside ``records/``'s own, for the record verifier).

    Raises:
        ValueError: one line naming the file, the field and why.
    """
    verify_symlinks(run)
    referenced = verify_references(run)
    verify_results(run)
    return referenced
