"""Every flag of every verb, given hostile values, exits 2 with one line naming it (issue 11).

The table is built from the parser itself (:func:`dpaudit.app.cli.build_parser`), so a flag
added later is covered without editing this file — or, if it takes a kind of value this file
cannot classify, the coverage test fails and says which flag to classify.

Each case runs ``dpaudit`` in-process with an otherwise valid command. The work functions
(training, the audit, the attacks, certification) are replaced by a sentinel, so a value the
suite accepts costs nothing: the case then checks that the value is one a user may really
mean (listed in :data:`ACCEPTED`), and that it got as far as the work without an error.
Files and records with hostile contents are run for real in the sibling modules
(``test_records.py``, ``test_data_root.py``); this module is about arguments.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpaudit.app.cli import _leaf_parsers, build_parser, main

NUMERIC_VALUES = ("0", "-1", "nan", "inf", "-inf", "1e300", "abc", "")
CHOICE_VALUES = ("", "bogus")
#: Flags whose value is a path to an existing file, and flags naming a directory (created or read).
FILE_FLAGS = {"--claim", "--weights", "--member-ids", "--non-member-ids", "--votes", "--answered", "--config"}
DIR_FLAGS = {"--out", "--data-root", "--target"}
#: Flags whose value is free text with its own syntax, and the hostile values each gets.
TEXT_FLAGS: dict[str, tuple[str, ...]] = {
    "--train-fn": ("", "nocolon", "missing_module_xyz:train", ":train", "{missing}.py:train", "{dir}:train"),
    "--model-fn": ("", "nocolon", "missing_module_xyz:build", "{missing}.py:build"),
    "--device": ("", "gpu", "cuda:abc", "cuda:99"),
    "--name": ("", "../escape", "a/b", ".hidden"),
    "--address": ("",),
    "--radii": ("", ",", "0.1,,0.2", "-1", "nan", "inf", "abc"),
    "--attack": ("", "bogus", ","),
    "--classes": ("", ",", "abc", "-1", "3-1", "99", "0,0"),
    "--public-data": ("", "bogus", "mnist:abc", "mnist:99", "digits"),
    "--checks": ("", ",", "bogus", "worst-case,,worst-case"),
    "--junit": ("", "{dir}", "{missing}/results.xml"),
}
#: (verb, flag, value) triples that are legitimate requests, with why.
ACCEPTED: dict[tuple[str, str, str], str] = {
    ("train", "--seed", "0"): "seed 0 is a seed",
    ("train", "--split-seed", "0"): "seed 0 is a seed",
    ("train", "--aggregator-seed", "0"): "seed 0 is a seed (PATE's noise, reproducible and not private)",
    ("audit", "--seed", "0"): "seed 0 is a seed",
    ("check", "--seed", "0"): "seed 0 is a seed",
    ("certify", "--seed", "0"): "seed 0 is a seed",
    ("attack membership", "--seed", "0"): "seed 0 is a seed",
    ("attack inversion", "--seed", "0"): "seed 0 is a seed",
    ("attack inversion", "--start-value", "0"): "a black start (the paper's x0 = 0)",
    ("attack inversion", "--step-size", "1e300"): "a step that lands on a corner of [0, 1]^d (clamped): valid, crude",
    ("attack inversion", "--identity-weight", "0"): "the GAN's prior alone: a valid ablation",
    ("attack inversion", "--gradient-penalty", "0"): "WGAN without the gradient penalty: a valid ablation",
    ("attack inversion", "--gmi-step-size", "1e300"): "z is clamped to [-1, 1] after every step: valid, crude",
    ("attack inversion", "--gmi-momentum", "0"): "plain SGD on z",
    ("attack inversion", "--cost-threshold", "0"): "never stop on confidence: run to patience or the cap",
    ("attack inversion", "--tolerance", "0"): "the paper's rule: stop a class once its cost stops improving",
    ("attack inversion", "--gmi-tolerance", "0"): "stop a latent only once its objective stops improving at all",
    ("train", "--momentum", "0"): "no momentum",
    ("train", "--weight-decay", "0"): "no weight decay",
    ("train", "--noise-ramp-fraction", "0"): "noise at full size from the start",
    ("certify", "--radii", "0"): "radius 0 is conventional accuracy",
    ("train", "--target-epsilon", "inf"): "inf asks for no noise (budget mode)",
    ("train", "--target-epsilon", "1e300"): "a huge budget is a (useless) valid request",
    ("audit", "--target-epsilon", "1e300"): "a huge budget is a (useless) valid request",
    ("train", "--learning-rate", "1e300"): "diverges at the first step: training stops with exit 2 (test_records)",
    ("audit", "--learning-rate", "1e300"): "diverges at the first step (the trainer's NaN check)",
    ("train", "--clip-norm", "1e300"): "clipping that never binds is a valid (non-private) choice",
    ("audit", "--clip-norm", "1e300"): "clipping that never binds is a valid choice",
    ("train", "--final-learning-rate", "0"): "decay to zero",
    ("train", "--inflation", "1e300"): "checked against the model when training starts",
    ("train", "--redistribution-exponent", "0"): "uniform redistribution",
    ("train", "--inflation", "0"): "β = 0: noise in proportion to the forward derivative (Phan et al. 2019, Eq. 7)",
    ("train", "--redistribution-exponent", "1e300"): "checked when training starts",
    ("train", "--robustness-epsilon", "1e300"): "a huge robustness budget is a valid request",
    ("train", "--attack-norm-bound", "1e300"): "a huge norm bound is a valid request",
    ("attack membership", "--gamma", "1e300"): "a threshold no ratio reaches: a valid, useless attack",
    ("attack membership", "--offline-a", "0"): "a = 0 is RMIA's reference-only approximation",
    ("epsilon", "--sensitivity", "1e300"): "a huge sensitivity is a valid question (ε is huge)",
    ("epsilon", "--target-epsilon", "1e300"): "solved: σ tiny, answer printed",
    ("epsilon", "--noise-multiplier", "1e300"): "ε ≈ 0 is the answer",
    ("pate analyze", "--sigma", "1e300"): "so much noise that ε ≈ 0: the answer",
    ("pate analyze", "--laplace-scale", "1e300"): "so much noise that ε ≈ 0: the answer",
    ("pate analyze", "--threshold", "1e300"): "a threshold never met: nothing is answered, ε is the threshold step's",
    ("pate analyze", "--threshold-sigma", "1e300"): "a threshold step that reveals nothing",
    ("pate analyze", "--smooth-sensitivity-sigma", "1e300"): "a release drowned in noise: valid, useless",
    ("pate analyze", "--seed", "0"): "seed 0 is a seed",
    ("pate audit", "--sigma", "1e300"): "so much noise that every answer is a coin flip: the audit passes",
    ("pate audit", "--laplace-scale", "1e300"): "so much noise that every answer is a coin flip: the audit passes",
    ("pate audit", "--threshold-sigma", "1e300"): "a threshold step that reveals nothing: the audit passes",
    ("pate audit", "--seed", "0"): "seed 0 is a seed",
    ("pate attack", "--seed", "0"): "seed 0 is a seed",
    ("attack uploads", "--seed", "0"): "seed 0 is a seed",
    ("train", "--noise-multiplier", "1e300"): "a claim of ε ≈ 0 for a model that is all noise: valid, useless",
    ("audit", "--noise-multiplier", "1e300"): "a claim of ε ≈ 0: valid, useless",
    ("audit", "--claim-noise-multiplier", "1e300"): "a third party may claim ε ≈ 0; the audit then tests it",
    ("check", "--claim-noise-multiplier", "1e300"): "a third party may claim ε ≈ 0; the battery then tests it",
    (
        "train",
        "--weight-decay",
        "1e300",
    ): "diverges at the first step: training stops with exit 2 and no record (test_records)",
    ("train", "--final-learning-rate", "1e300"): "diverges: training stops with exit 2 and no record",
    ("train", "--expected-lot-size", "1e300"): "a divisor that makes every update vanish: valid, useless",
    ("train", "--lr-decay-epochs", "1e300"): "a decay that never happens",
    ("train", "--sigma", "1e300"): "PATE votes drowned in noise: ε ≈ 0 and useless labels, a valid request",
    ("train", "--threshold", "0"): "T = 0: Confident-GNMax answers (almost) every query",
    ("train", "--threshold", "1e300"): "a threshold never met: training stops with one line (no query answered)",
    ("train", "--threshold-sigma", "1e300"): "a threshold check that reveals nothing",
    ("train", "--laplace-scale", "1e300"): "LNMax drowned in noise: ε ≈ 0, a valid request",
    (
        "train",
        "--student-learning-rate",
        "1e300",
    ): "the student diverges at the first step: its NaN check stops training (exit 2)",
    ("train", "--unlabeled-weight", "0"): "no weight on the unlabelled loss: the supervised student",
    ("train", "--unlabeled-weight", "1e300"): "diverges: the student's NaN check stops training (exit 2)",
    ("train", "--selection-threshold", "0"): "every changed parameter is eligible for a random-threshold upload",
    (
        "train",
        "--selection-threshold",
        "1e300",
    ): "no change is eligible: nothing is uploaded, a valid (useless) federation",
    (
        "train",
        "--dp-epsilon",
        "1e300",
    ): "a per-parameter epsilon so large the DP upload adds no noise: the record claims it",
    (
        "train",
        "--bound",
        "1e300",
    ): "bound unused without --dp-epsilon; with it, noise of scale ~gamma/epsilon (finite scales are checked)",
    ("train", "--observe-participant", "0"): "participant 0 is a participant",
}


@dataclass(frozen=True)
class Case:
    verb: str
    flag: str
    kind: str  # numeric, choice, file, dir, text, switch, positional


def _flags() -> Iterator[tuple[str, argparse.Action]]:
    parser = build_parser(None)
    yield from ((" ", a) for a in parser._actions if a.option_strings)
    for leaf in _leaf_parsers(parser):
        verb = leaf.prog.removeprefix("dpaudit ").strip()
        for action in leaf._actions:
            yield verb, action


def _kind(flag: str, action: argparse.Action) -> str | None:
    if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
        return "switch"
    if not action.option_strings:
        return "positional"
    if flag in TEXT_FLAGS:
        return "text"
    if flag in FILE_FLAGS:
        return "file"
    if flag in DIR_FLAGS:
        return "dir"
    if action.choices is not None:
        return "choice"
    if action.type is not None and action.type is not str:
        return "numeric"
    return None


def _all_cases() -> tuple[list[Case], list[str]]:
    cases, unclassified = [], []
    for verb, action in _flags():
        flag = action.option_strings[-1] if action.option_strings else action.dest
        kind = _kind(flag, action)
        if kind is None:
            unclassified.append(f"{verb} {flag}")
        else:
            cases.append(Case(verb.strip(), flag, kind))
    return cases, unclassified


CASES, UNCLASSIFIED = _all_cases()


def _names_of_verbs() -> dict[str, set[str]]:
    """What ``--json``'s ``argument`` may hold for each verb: its flags and its positionals' names."""
    names: dict[str, set[str]] = {}
    for verb, action in _flags():
        names.setdefault(verb.strip(), set()).update(action.option_strings or {str(action.metavar or action.dest)})
    return names


ARGUMENTS = _names_of_verbs()


def _is_path(action: argparse.Action) -> bool:
    """A flag typed by the shared path type (:func:`dpaudit.app.common.path_type`)."""
    return getattr(action.type, "__qualname__", "").startswith("path_type.")


PATH_CASES = sorted(
    {
        (verb.strip(), action.option_strings[-1])
        for verb, action in _flags()
        if action.option_strings and _is_path(action)
    }
)


def test_every_flag_is_covered() -> None:
    """A new flag whose value this table cannot classify must be classified here, not forgotten."""
    assert not UNCLASSIFIED, f"add these flags to FILE_FLAGS, DIR_FLAGS or TEXT_FLAGS: {UNCLASSIFIED}"
    verbs = {c.verb for c in CASES}
    assert {
        "epsilon",
        "datasets",
        "train",
        "audit",
        "attack membership",
        "attack inversion",
        "attack uploads",
        "certify",
        "report",
        "pate analyze",
        "pate audit",
        "pate attack",
    } <= verbs


# ----------------------------------------------------------------------------- running one case
class Reached(BaseException):
    """The command got past argument checking into the work itself."""


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*args: object, **kwargs: object) -> None:
        raise Reached

    import dpaudit.app.runs.audit as audit_run
    import dpaudit.app.runs.check as check_run
    import dpaudit.app.runs.compare as compare_run
    import dpaudit.app.runs.dssgd as dssgd_run
    import dpaudit.app.runs.inversion as inversion_run
    import dpaudit.app.runs.membership as membership_run
    import dpaudit.app.runs.pate as pate_run
    import dpaudit.app.runs.train as train_run
    import dpaudit.app.verbs.certify as certify_verb

    monkeypatch.setattr(audit_run, "run_audit", stop)
    monkeypatch.setattr(check_run, "run_check", stop)
    monkeypatch.setattr(membership_run, "run_membership", stop)
    monkeypatch.setattr(inversion_run, "run_inversion", stop)
    monkeypatch.setattr(dssgd_run, "attack_uploads", stop)
    monkeypatch.setattr(pate_run, "attack_aggregator", stop)
    monkeypatch.setattr(train_run, "train_or_load", stop)
    monkeypatch.setattr(certify_verb, "run_certify", stop)
    monkeypatch.setattr(compare_run, "run_compare", stop)


def _owner_of(verb: str, flag: str) -> list[str]:
    """Extra arguments that make ``flag`` apply (the defense or attack declaring it)."""
    from dpaudit.options import option_specs

    if verb == "train":
        from defenses import DEFENSES

        for name, spec in DEFENSES.items():
            if flag in {s.flag for s in option_specs(spec.config_type)}:
                return ["--defense", name]
        return ["--defense", "nonprivate"]
    if verb == "attack membership":
        from attacks.membership import MEMBERSHIP_ATTACKS

        for name, spec in MEMBERSHIP_ATTACKS.items():
            if flag in {s.flag for s in option_specs(spec.config_type)}:
                return ["--attack", name]
        return [] if flag == "--attack" else ["--attack", "loss"]
    if verb == "attack inversion":
        from attacks.inversion import INVERSION_ATTACKS

        for name, spec in INVERSION_ATTACKS.items():
            types = [spec.config_type] + ([spec.prior.config_type] if spec.prior is not None else [])
            if flag in {s.flag for t in types for s in option_specs(t)} and flag != "--restarts":
                return (
                    ["--attack", name, "--classes", "0-4", "--public-data", "digits:5-9"]
                    if spec.prior is not None
                    else ["--attack", name]
                )
        if flag == "--public-data":
            return ["--attack", "gmi", "--classes", "0-4"]
        return [] if flag == "--attack" else ["--attack", "mi-face"]
    return []


def _base(verb: str, flag: str, work: Path, record_dir: Path, external: dict[str, str]) -> list[str]:
    out = str(work / "out")
    if verb == "":
        return ["epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--num-steps", "10"]
    if verb == "epsilon":
        if flag in ("--target-epsilon", "--solve"):
            return ["epsilon", "--sampling-rate", "0.01", "--num-steps", "10"]
        if flag in ("--sensitivity", "--calibration"):
            return ["epsilon", "--mechanism", "gaussian", "--target-epsilon", "1"]
        return ["epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--num-steps", "10"]
    if verb == "datasets":
        return ["datasets"]
    if verb == "train":
        model = (
            ["--model", "hgm-cnn"]
            if "hgm" in _owner_of(verb, flag) or "secure-sgd" in _owner_of(verb, flag)
            else ["--model", "digits-mlp"]
        )
        return ["train", *_owner_of(verb, flag), *model, "--out", out]
    if verb == "audit":
        if flag.startswith("--claim") or flag in ("--train-fn", "--model-fn"):
            # --model-fn only means something for a --train-fn audited from a worst-case start
            start = ["--init", "worst-case"] if flag == "--model-fn" else []
            return [
                "audit",
                "--train-fn",
                external["train_fn"],
                *start,
                "--claim-noise-multiplier",
                "1",
                "--claim-sampling-rate",
                "0.01",
                "--claim-num-steps",
                "10",
                "--out",
                out,
            ]
        if flag in ("--noise-multiplier",):
            return ["audit", "--out", out]
        return ["audit", "--target-epsilon", "2", "--out", out]
    if verb == "check":
        return [
            "check",
            "--train-fn",
            external["train_fn"],
            "--claim-noise-multiplier",
            "1",
            "--claim-sampling-rate",
            "0.01",
            "--claim-num-steps",
            "10",
            "--out",
            out,
        ]
    if verb == "attack membership":
        if flag in ("--model-fn", "--weights", "--dataset", "--member-ids", "--non-member-ids"):
            return [
                "attack",
                "membership",
                "--model-fn",
                external["model_fn"],
                "--weights",
                external["weights"],
                "--dataset",
                "digits",
                "--member-ids",
                external["ids"],
                *_owner_of(verb, flag),
                "--out",
                out,
            ]
        extra = ["--executor", "ray"] if flag == "--address" else []
        return ["attack", "membership", "--target", str(record_dir), *_owner_of(verb, flag), *extra, "--out", out]
    if verb == "attack inversion":
        return ["attack", "inversion", "--target", str(record_dir), *_owner_of(verb, flag), "--out", out]
    if verb == "attack uploads":
        return ["attack", "uploads", "--target", str(record_dir), "--out", out]
    if verb == "certify":
        return ["certify", "--target", str(record_dir), "--out", out]
    if verb == "report":
        return ["report"]
    if verb == "compare":
        extra = ["--executor", "ray"] if flag == "--address" else []
        return ["compare", "--config", external["grid"], *extra, "--out", out]
    if verb == "pate analyze":
        votes = ["pate", "analyze", "--votes", external["votes"]]
        if flag == "--laplace-scale":
            return [*votes, "--laplace-scale", "20"]
        if flag in ("--threshold", "--threshold-sigma", "--answered"):
            return [
                *votes,
                "--sigma",
                "40",
                "--threshold",
                "200",
                "--threshold-sigma",
                "150",
                "--answered",
                external["answered"],
            ]
        if flag.startswith("--smooth-sensitivity") or flag == "--seed":  # --seed seeds the release only
            return [*votes, "--sigma", "40", "--smooth-sensitivity-beta", "0.03", "--smooth-sensitivity-sigma", "15"]
        return [*votes, "--sigma", "40"]
    if verb == "pate attack":
        return ["pate", "attack", "--target", str(record_dir), "--out", out]
    if verb == "pate audit":  # runs for real (no stub), so few trials
        game = ["pate", "audit", "--trials", "2000", "--num-teachers", "50"]
        if flag == "--laplace-scale":
            return [*game, "--laplace-scale", "20"]
        if flag in ("--threshold", "--threshold-sigma"):
            return [*game, "--sigma", "40", "--threshold", "20", "--threshold-sigma", "15"]
        return [*game, "--sigma", "40"]
    raise AssertionError(f"no base command for verb {verb!r}")


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` with ``flag`` and its value removed (the case supplies its own)."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == flag:
            skip = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            continue
        out.append(a)
    return out


def _hostile_values(case: Case, work: Path) -> tuple[str, ...]:
    corrupt = work / "corrupt.json"
    corrupt.write_bytes(b"\x00\xff{not json")
    missing = str(work / "missing")
    if case.kind == "numeric":
        return NUMERIC_VALUES
    if case.kind == "choice":
        return CHOICE_VALUES
    if case.kind == "file":
        return ("", missing, str(work), str(corrupt))
    if case.kind == "dir":
        # --out may be created, but never be a file or empty; --target and --data-root must exist.
        return ("", str(corrupt)) if case.flag == "--out" else ("", missing, str(corrupt))
    if case.kind == "positional":
        return ("", missing, str(corrupt), str(work / "empty"))
    if case.kind == "text":
        return tuple(val.format(missing=missing, dir=work) for val in TEXT_FLAGS[case.flag])
    return ()


VALUE_CASES = [c for c in CASES if c.kind != "switch"]


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A valid external model (file.py:build, weights, member ids) and a valid file.py:train."""
    import torch
    from safetensors.torch import save_file

    d = tmp_path_factory.mktemp("external")
    (d / "extmodel.py").write_text(
        "import torch.nn as nn\n\n\ndef build():\n    return "
        "nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n\n\ndef train(dataset, "
        "*, seed):\n    return build()\n"
    )
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    save_file({k: t.contiguous() for k, t in model.state_dict().items()}, str(d / "w.safetensors"))
    (d / "ids.json").write_text(json.dumps(list(range(0, 200))))
    import numpy as np

    np.save(d / "votes.npy", np.array([[200, 30, 10, 10, 0, 0, 0, 0, 0, 0]] * 20, dtype=np.int64))
    np.save(d / "answered.npy", np.arange(20) % 2 == 0)
    (d / "grid.toml").write_text('[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = 1\n')
    return {
        "grid": str(d / "grid.toml"),
        "votes": str(d / "votes.npy"),
        "answered": str(d / "answered.npy"),
        "model_fn": f"{d / 'extmodel.py'}:build",
        "train_fn": f"{d / 'extmodel.py'}:train",
        "weights": str(d / "w.safetensors"),
        "ids": str(d / "ids.json"),
    }


@pytest.mark.extended
@pytest.mark.parametrize("case", VALUE_CASES, ids=lambda c: f"{c.verb or 'top'}:{c.flag}")
def test_hostile_values_exit_2_with_one_line(
    case: Case,
    cli,
    no_work,
    trained_run: Path,
    external: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "empty").mkdir()
    record_dir = tmp_path / "record-run"
    shutil.copytree(trained_run, record_dir)
    monkeypatch.chdir(work)
    base = _base(case.verb, case.flag, work, record_dir, external)
    failures = []
    for value in _hostile_values(case, work):
        before = sorted(p.name for p in work.iterdir())
        argv = [*base, value] if case.kind == "positional" else [*_without(base, case.flag), f"{case.flag}={value}"]
        if case.verb == "" and case.flag == "--debug":
            continue
        try:
            code, out, err = cli.run(*argv, "--json")
        except Reached:
            if (case.verb, case.flag, value) not in ACCEPTED:
                failures.append(f"{value!r}: accepted and reached the work")
            continue
        after = sorted(p.name for p in work.iterdir())
        stray = set(after) - set(before) - {"out"}
        if stray:
            failures.append(f"{value!r}: wrote {sorted(stray)} outside --out")
        if (case.verb, case.flag, value) in ACCEPTED:
            if code not in (0, 2):
                failures.append(f"{value!r}: accepted value gave exit {code}: {err.strip()[-200:]}")
            continue
        lines = err.strip().splitlines()
        if code != 2:
            failures.append(f"{value!r}: exit {code}, expected 2: {err.strip()[-300:]}")
        elif "Traceback" in err or len(lines) != 1:
            failures.append(f"{value!r}: {len(lines)} lines on stderr, expected one: {err.strip()[-300:]}")
        else:
            named = (
                case.flag in lines[0]
                or case.flag.lstrip("-").replace("-", "_") in lines[0]
                or (case.kind == "positional")
            )
            if not named:
                failures.append(f"{value!r}: the error does not name {case.flag}: {lines[0]}")
            argument = json.loads(out)["argument"]
            # --json's argument is a flag of this verb (found, never guessed from the message), or null
            if (
                argument is not None
                and argument not in ARGUMENTS[case.verb]
                and not (case.verb == "compare" and not argument.startswith("-"))
            ):
                failures.append(
                    f"{value!r}: --json names argument {argument!r}, which is no flag of "
                    f"`dpaudit {case.verb}`: {lines[0]}"
                )
    assert not failures, f"dpaudit {case.verb} {case.flag}:\n  " + "\n  ".join(failures)


@pytest.mark.extended
@pytest.mark.parametrize(("verb", "flag"), PATH_CASES, ids=lambda x: x)
def test_paths_the_file_system_refuses_exit_2_naming_the_flag(
    verb: str,
    flag: str,
    cli,
    no_work,
    trained_run: Path,
    external: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name over NAME_MAX or a symbolic link loop is bad input naming the flag, never an OSError traceback (issue 31).

    The cases come from the parser (every flag of the shared path type), so a new path flag is covered.
    """
    assert {f for _, f in PATH_CASES} >= {
        "--out",
        "--votes",
        "--answered",
        "--config",
        "--target",
        "--data-root",
        "--claim",
        "--weights",
        "--member-ids",
    }
    work = tmp_path / "work"
    work.mkdir()
    (work / "loop").symlink_to("loop")
    record_dir = tmp_path / "record-run"
    shutil.copytree(trained_run, record_dir)
    monkeypatch.chdir(work)
    base = _without(_base(verb, flag, work, record_dir, external), flag)
    long_name = "x" * 300
    values = {
        str(work / long_name): ("255", "long"),
        str(work / long_name / "run"): ("255", "long"),
        str(work / "loop"): ("loop",),
        str(work / "loop" / "run"): ("loop",),
    }
    failures = []
    for value, says in values.items():
        try:
            code, out, err = cli.run(*base, f"{flag}={value}", "--json")
        except Reached:
            failures.append(f"{value[-20:]!r}: accepted and reached the work")
            continue
        lines = err.strip().splitlines()
        if code != 2 or "Traceback" in err or len(lines) != 1:
            failures.append(f"{value[-20:]!r}: exit {code}, {len(lines)} lines: {err.strip()[-300:]}")
        elif flag not in lines[0] or not any(word in lines[0] for word in says):
            failures.append(f"{value[-20:]!r}: the error does not name {flag} and say {says[-1]!r}: {lines[0]}")
        elif json.loads(out)["argument"] != flag:
            failures.append(f"{value[-20:]!r}: --json names {json.loads(out)['argument']!r}, not {flag}")
    assert not failures, f"dpaudit {verb} {flag}:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize(
    "argv",
    [
        ["epsilon", "--noise-multiplier", "nan"],
        ["attack", "membership", "--attack", ""],
        ["audit", "--num-trials", "100000", "--out", "o"],
    ],
)
def test_json_errors_are_one_object_on_stdout(
    argv: list[str], cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --json an error still leaves one JSON object on stdout, naming the argument."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli.run(*argv, "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1
    payload = json.loads(out)
    assert set(payload) == {"error", "argument", "exit_status"} and payload["exit_status"] == 2
    assert payload["argument"] == next(a for a in argv if a.startswith("--"))


def test_size_limits_need_i_know(cli, no_work, trained_run: Path, tmp_path: Path) -> None:
    """Finding 7: huge sizes are refused naming the flag and the limit; --i-know lets them through."""
    record_dir = tmp_path / "rec"
    shutil.copytree(trained_run, record_dir)
    out = str(tmp_path / "out")
    cases = [
        [
            "attack",
            "membership",
            "--target",
            str(record_dir),
            "--attack",
            "lira",
            "--num-shadows",
            "100000",
            "--out",
            out,
        ],
        ["train", "--defense", "nonprivate", "--model", "digits-mlp", "--epochs", "100000000", "--out", out],
        ["certify", "--target", str(record_dir), "--num-draws", str(10**12), "--out", out],
        ["audit", "--target-epsilon", "1", "--num-steps", str(10**12), "--out", out],
        ["audit", "--target-epsilon", "1", "--sampling-rate", "1e-300", "--out", out],
    ]
    for argv in cases:
        code, _, err = cli.run(*argv)
        assert code == 2 and "--i-know" in err and len(err.strip().splitlines()) == 1, (argv, err)
        with pytest.raises(Reached):
            main([*argv, "--i-know"])
