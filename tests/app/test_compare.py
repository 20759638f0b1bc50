"""``dpaudit compare``: grid validation, the matrix, resuming an interrupted grid, Ray = local."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from dpaudit.app.runs import compare as cmp
from dpaudit.app.runs.compare import CompareSpec, GridError, load_grid, parse_grid, run_compare
from dpaudit.results.comparison import ComparisonResult, load_comparison
from dpaudit.store import RunDir

# A grid small enough for the default suite: digits, three settings, two membership attacks on
# shared shadows, one evasion attack at two radii.
GRID = """
name = "tiny"
dataset = "digits"
model = "digits-mlp"
seeds = [0]
vulnerable_top_k = 100

[[defenses]]
defense = "nonprivate"
epochs = 5

[[defenses]]
defense = "dpsgd"
target_epsilon = [1.0, 8.0]
epochs = 5
lot_size = 64
clip_norm = 1.0
learning_rate = 0.5

[attacks.membership]
attacks = ["loss", "lira"]
num_shadows = 4
num_samples = 300
shadow_epochs = 5

[attacks.evasion]
attacks = ["fgsm"]
radii = [0.5, 1.0]
num_examples = 40
"""


def _grid(tmp_path: Path, text: str = GRID) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


def _matrix(result: ComparisonResult) -> list[dict]:
    """The rows without anything that depends on where or how long the run took."""
    return [{k: val for k, val in r.to_dict().items() if k != "links"} for r in result.rows]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ComparisonResult, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    grid = _grid(tmp)
    run = tmp / "run"
    result = run_compare(
        CompareSpec(grid=load_grid(grid), executor="local", num_workers=2, progress=False), RunDir(run)
    )
    return grid, result, run


def test_grid_expands_lists_and_adds_nothing_when_the_baseline_is_listed(tmp_path: Path) -> None:
    grid = load_grid(_grid(tmp_path))
    assert [s.label for s in grid.settings] == ["nonprivate", "dpsgd-target_epsilon=1", "dpsgd-target_epsilon=8"]
    assert grid.baseline == "nonprivate"
    # ε swept at fixed epochs: σ is calibrated to each target.
    assert (
        grid.settings[1].parameters["noise_multiplier"] is None and grid.settings[1].parameters["target_epsilon"] == 1.0
    )
    assert grid.num_bounds() == 2  # two attacks × one seed, no audit
    assert grid.bound_confidence() == pytest.approx(0.975)
    # An audit's ε_LB competes for the row's best too: it is one more bound to pay for.
    audited = parse_grid(
        {
            "defenses": [{"defense": "dpsgd", "target_epsilon": 2.0, "epochs": 2}],
            "attacks": {"membership": {"attacks": ["loss", "lira"]}, "audit": {}},
            "seeds": [0, 1],
        }
    )
    assert audited.num_bounds() == 5 and audited.bound_confidence() == pytest.approx(0.99)


def test_baseline_is_always_part_of_the_grid() -> None:
    grid = parse_grid({"dataset": "digits", "defenses": [{"defense": "dpsgd", "target_epsilon": 2.0, "epochs": 2}]})
    assert grid.settings[0].defense == "nonprivate" and grid.baseline == grid.settings[0].label


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"defenses": [{"defense": "dpsdg"}]}, "defenses[0].defense: unknown defense 'dpsdg'"),
        (
            {"defenses": [{"defense": "dpsgd", "noise_multiplyer": 1.0}]},
            "defenses[0].noise_multiplyer: the dpsgd defense has no parameter",
        ),
        ({"defenses": [{"defense": "dpsgd", "target_epsilon": []}]}, "defenses[0].target_epsilon: an empty list"),
        ({"defenses": [{"defense": "dpsgd", "clip_norm": -1.0}]}, "defenses[0].clip_norm must be"),
        (
            {"attacks": {"membership": {"attacks": ["lira", "lria"]}}},
            "attacks.membership.attacks: unknown membership attack 'lria'",
        ),
        ({"attacks": {"membership": {"attacks": []}}}, "attacks.membership.attacks: an empty list"),
        ({"attacks": {"evasion": {"attacks": ["pgd"], "radii": []}}}, "attacks.evasion.radii: an empty list"),
        ({"attacks": {"evasion": {"attacks": ["cw"]}}}, "attacks.evasion.attacks: unknown evasion attack 'cw'"),
        ({"attacks": {"evasoin": {}}}, "attacks.evasoin: unknown key"),
        ({"dataset": "imagenet"}, "dataset: unknown dataset 'imagenet'"),
        ({"seeds": []}, "seeds: an empty list"),
        (
            {"defenses": [{"defense": "dpsgd", "epochs": 1}, {"defense": "dpsgd", "epochs": 1}]},
            "two settings share the label 'dpsgd'",
        ),
    ],
)
def test_bad_grids_name_the_key(data: dict, key: str) -> None:
    with pytest.raises(GridError) as info:
        parse_grid({"dataset": "digits", "defenses": [{"defense": "nonprivate"}], **data})
    assert key in str(info.value) and "\n" not in str(info.value)


def test_bad_grid_exits_2_with_one_line(cli, tmp_path: Path) -> None:
    path = _grid(tmp_path, '[[defenses]]\ndefense = "dpsgd"\nnoise_multiplyer = 1.0\n')
    code, out, err = cli.run("compare", "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "defenses[0].noise_multiplyer" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    code, _, err = cli.run("compare", "--config", str(bad), "--out", str(tmp_path / "run"))
    assert code == 2 and "not valid TOML" in err and err.count("\n") == 1


@pytest.mark.cluster  # the tiny grid trains and attacks on a 2-worker pool (~20 s): the cluster tier (.ci/run)
def test_matrix(tiny: tuple[Path, ComparisonResult, Path]) -> None:
    _, result, run = tiny
    base, eps1, eps8 = result.rows
    assert base.label == result.baseline == "nonprivate"
    assert base.epsilon_ub == {} and base.accuracy_loss == 0.0
    assert eps1.epsilon_ub["pld"] == pytest.approx(1.0, abs=0.01) and eps8.epsilon_ub["pld"] == pytest.approx(
        8.0, abs=0.05
    )
    # The four analyses of the same noise: the PLD and RDP bounds are tighter than strong composition.
    assert eps1.epsilon_ub["pld"] <= eps1.epsilon_ub["rdp"] <= eps1.epsilon_ub["strong"]
    for r in result.rows:
        assert 0.0 < r.test_accuracy <= 1.0
        assert r.accuracy_loss == pytest.approx(base.test_accuracy - r.test_accuracy)
        assert set(r.membership) == {"loss", "lira"} and set(r.vulnerable) == {"loss", "lira"}
        for m in (*r.membership.values(), *r.vulnerable.values()):
            assert 0.0 <= m.auc <= 1.0 and set(m.tpr_at_fpr) == {"0.001", "0.01"}
        assert r.vulnerable["lira"].num_samples == 100 and r.membership["lira"].num_samples == 600
        assert set(r.robust_accuracy) == {"0.5", "1"} and r.certified_accuracy == {}
        assert r.robust_accuracy["1"] <= r.robust_accuracy["0.5"] <= r.test_accuracy + 0.2
        # ε_LB ≤ ε_UB on every DP row (a violation would be a finding and exit 3).
        assert r.verdict == "no violation"
        if r.epsilon_ub:
            assert r.epsilon_lb <= r.epsilon_ub_best
        assert (r.best_attack is None) == (r.epsilon_lb == 0.0)
    assert result.exit_status == 0
    stored = load_comparison(RunDir(run).compare_dir("tiny"))
    assert _matrix(stored) == _matrix(result)


@pytest.mark.cluster  # the tiny grid trains and attacks on a 2-worker pool (~20 s): the cluster tier (.ci/run)
def test_interrupted_grid_resumes_with_only_the_missing_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny
) -> None:
    grid_path, done, finished_run = tiny
    grid = load_grid(grid_path)
    # A copy of the finished grid with its evaluation wave forgotten: trainings and shadows stay
    # stored (as after a real interruption), so the test spends no time retraining them.
    shutil.copytree(finished_run, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    for p in (run.compare_dir("tiny") / "jobs").glob("*.json"):
        if not json.loads(p.read_text())["job"].startswith("train-"):
            p.unlink()
    real = cmp.jobs.evasion_job
    calls: list[str] = []

    def dies_on_the_second_evasion(**kwargs):
        calls.append(kwargs["trained"].model_id)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C half-way through the second wave
        return real(**kwargs)

    monkeypatch.setitem(cmp.orchestration._EVALUATIONS, "evasion", dies_on_the_second_evasion)
    with pytest.raises(KeyboardInterrupt):
        run_compare(CompareSpec(grid=grid, executor="serial", progress=False), run)
    jobs = run.compare_dir("tiny") / "jobs"
    finished = {json.loads(p.read_text())["job"] for p in jobs.glob("*.json")}
    assert {f"train-{s.label}-seed0" for s in grid.settings} <= finished
    total = 3 * 3  # 3 settings × (train + membership + evasion)
    assert len(finished) < total
    monkeypatch.setitem(cmp.orchestration._EVALUATIONS, "evasion", real)
    result = run_compare(CompareSpec(grid=grid, executor="serial", progress=False), run)
    assert result.jobs_reused == len(finished) and result.jobs_run == total - len(finished)
    again = run_compare(CompareSpec(grid=grid, executor="serial", progress=False), run)
    assert again.jobs_run == 0 and again.jobs_reused == total
    assert _matrix(again) == _matrix(result)


@pytest.mark.cluster  # the tiny grid trains and attacks on a 2-worker pool (~20 s): the cluster tier (.ci/run)
def test_cli_json_and_report(cli, tiny) -> None:
    grid_path, result, run = tiny
    code, out, _ = cli.run("compare", "--config", str(grid_path), "--out", str(run), "--json", "--quiet")
    assert code == 0
    data = json.loads(out)
    assert data["jobs_run"] == 0 and data["jobs_reused"] == 9
    row = data["defenses"]["dpsgd-target_epsilon=1"]
    assert set(row) >= {
        "test_accuracy",
        "epsilon_ub",
        "epsilon_lb",
        "best_attack",
        "membership",
        "inversion_top1",
        "robust_accuracy",
        "certified_accuracy",
        "verdict",
    }
    assert set(row["membership"]["lira"]["tpr_at_fpr"]) == {"0.001", "0.01"}
    assert data["defenses"]["nonprivate"]["epsilon_ub"] == {}
    report = Path(data["report"])
    assert report.name == "compare-tiny.html" and report.is_file()
    for name in (
        "compare-tiny-matrix.csv",
        "compare-tiny.json",
        "compare-tiny.md",
        "compare-tiny-privacy-utility.png",
        "compare-tiny-vulnerable.png",
        "compare-tiny-robustness.png",
    ):
        assert (report.parent / name).is_file(), name
    html = report.read_text()
    assert ">nan<" not in html and ">None<" not in html
    assert 'href="membership-' in html
    # Every drill-down link leads to a rendered report; a row that does not certify links no certified report.
    for row in result.rows:
        assert "certified" not in row.links and set(row.links) == {"membership"}
        for href in row.links.values():
            assert (report.parent / href).is_file(), href


@pytest.mark.cluster  # the tiny grid trains and attacks on a 2-worker pool (~20 s): the cluster tier (.ci/run)
def test_violation_exits_3(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    # A row whose evidence beats its guarantee is a finding: the verdict and exit status say so.
    grid_path, result, _ = tiny
    grid = load_grid(grid_path)
    jobs_dir = Path(tiny[2]) / "compare" / "tiny" / "jobs"
    outcomes = {o["job"]: o for o in (json.loads(p.read_text()) for p in jobs_dir.glob("*.json"))}
    trained = {k: o for k, o in outcomes.items() if k.startswith("train-")}
    evaluated = {k: o for k, o in outcomes.items() if not k.startswith("train-")}
    evaluated["membership-dpsgd-target_epsilon=1-seed0"]["membership"]["loss"]["epsilon_lb"] = 3.0
    bad = cmp.condense(grid, trained, evaluated)
    row = bad.row("dpsgd-target_epsilon=1")
    assert row.verdict == "violation" and row.best_attack == "loss" and "ε_LB 3 (loss) > ε_UB" in row.findings[0]
    assert bad.exit_status == 3


RAY_GRID = """
name = "ray"
dataset = "digits"
model = "digits-mlp"
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
num_samples = 200
"""


@pytest.mark.slow
def test_ray_gives_the_same_matrix_as_local(tmp_path: Path) -> None:
    # The same seeds give the same matrix whether the jobs run on the local pool or on Ray
    # (a local Ray instance here; a cluster is the same executor with an address).
    pytest.importorskip("ray")
    grid = load_grid(_grid(tmp_path, RAY_GRID))
    local = run_compare(
        CompareSpec(grid=grid, executor="local", num_workers=2, progress=False), RunDir(tmp_path / "local")
    )
    on_ray = run_compare(
        CompareSpec(grid=grid, executor="ray", num_workers=2, progress=False), RunDir(tmp_path / "ray")
    )
    assert local.jobs_run == on_ray.jobs_run == 4
    assert _matrix(on_ray) == _matrix(local)


@pytest.mark.cluster  # the tiny grid trains and attacks on a 2-worker pool (~20 s): the cluster tier (.ci/run)
def test_result_round_trip_and_validation(tiny) -> None:
    _, result, _ = tiny
    again = ComparisonResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert _matrix(again) == _matrix(result)
    with pytest.raises(ValueError, match="baseline"):
        dataclasses.replace(result, baseline="nope")
    with pytest.raises(ValueError, match="verdict"):
        dataclasses.replace(result.rows[0], verdict="fine")
    assert math.isinf(result.rows[0].epsilon_ub_best)


@pytest.mark.cluster  # the tiny grid trains and attacks on a 2-worker pool (~20 s): the cluster tier (.ci/run)
def test_report_passes_the_browser_check(tiny, check_page) -> None:
    # The comparison report (and the index linking it) in headless Chromium: no console error,
    # every figure loaded, no NaN or None in a table cell; the screenshot is kept for a person.
    from dpaudit.app.runs.report import render_reports
    from tests.browser import assert_clean

    _, _, run = tiny
    index = render_reports(run)
    assert len(index.compare) == 1
    reports = [check_page(index.compare[0]), check_page(index.index_html)]
    assert_clean(*reports)
    # Four figures (privacy-utility, advantage, vulnerable, robustness) and the tables were there to check.
    assert reports[0].num_images == 4 and reports[0].num_cells > 50


@pytest.mark.slow  # a real canary audit (~15 s); keeps the default suite near its 6-minute budget
def test_audit_section_audits_each_dp_setting(tmp_path: Path) -> None:
    # [attacks.audit] runs a canary audit of each DP-SGD setting's training algorithm (same σ
    # calibration, C, q and epochs); its ε_LB competes for the row's best and its own claim is
    # checked against it. The non-private baseline has no algorithm to audit.
    text = (
        '[[defenses]]\ndefense = "nonprivate"\nepochs = '
        '1\n[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 4.0\nepochs = '
        '1\nlot_size = 64\n[attacks.audit]\nmethod = "one-run"\nnum_canaries = '
        "50\n"
    )
    grid = load_grid(_grid(tmp_path, text))
    assert grid.num_bounds() == 1
    run = RunDir(tmp_path / "run")
    result = run_compare(CompareSpec(grid=grid, executor="serial", progress=False), run)
    assert result.jobs_run == 3  # two trainings and one audit
    audits = run.audit_dirs()
    assert len(audits) == 1 and "dpsgd" in audits[0].name
    from dpaudit.results import load_audit_result

    audit = load_audit_result(audits[0])
    assert audit.epsilon_ub == pytest.approx(4.0, rel=0.01) and audit.method == "one-run"
    assert audit.confidence == grid.bound_confidence() == grid.confidence  # the only bound of the row
    row = result.row("dpsgd")
    assert row.epsilon_lb == audit.epsilon_lb and row.verdict == "no violation"


# ----------------------------------------------------------------------------- limits (issue 31)
_DP = {"defense": "dpsgd", "target_epsilon": 2.0, "epochs": 2}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"defenses": [{"defense": "dpsgd", "target_epsilon": 1.0, "epochs": 100_000_000}]},
            "defenses[0].epochs=100,000,000 is above the limit 10,000",
        ),
        (
            {"defenses": [_DP], "attacks": {"membership": {"num_shadows": 100_000}}},
            "attacks.membership.num_shadows=100,000 is above the limit 1,024",
        ),
        (
            {
                "defenses": [{"defense": "nonprivate", "learning_rate": [0.001 * (i + 1) for i in range(2000)]}],
                "attacks": {"membership": {}, "evasion": {}, "inversion": {}},
            },
            "the grid makes 8,000 jobs",
        ),
        (
            {
                "seeds": list(range(500)),
                "defenses": [_DP, {"defense": "pate"}, {"defense": "smoothing"}],
                "attacks": {"membership": {}, "evasion": {}, "inversion": {}},
            },
            "the grid makes 8,000 jobs",
        ),
    ],
    ids=["epochs-1e8", "shadows-1e5", "sweep-2000", "seeds-500"],
)
def test_grid_limit_needs_i_know(data: dict, message: str) -> None:
    """Issue 31 item 4: a grid's sizes pass the same limits as the flags (and a whole-grid job limit)."""
    with pytest.raises(GridError) as info:
        parse_grid(data)
    assert message in str(info.value) and "pass --i-know" in str(info.value) and "\n" not in str(info.value)
    grid = parse_grid(data, i_know=True)
    # The runs API is gated too: a grid parsed with i_know still needs the spec's i_know.
    with pytest.raises(GridError, match="pass --i-know"):
        CompareSpec(grid=grid, executor="serial", progress=False)


def test_grid_limit_spec_with_i_know(monkeypatch: pytest.MonkeyPatch) -> None:
    from dpaudit.app.runs.compare import limits

    monkeypatch.setattr(limits, "estimate_seconds", lambda *a, **k: 0.0)
    grid = parse_grid({"defenses": [{"defense": "dpsgd", "target_epsilon": 1.0, "epochs": 100_000_000}]}, i_know=True)
    assert CompareSpec(grid=grid, executor="serial", progress=False, i_know=True).i_know


def test_grid_limit_on_estimated_time(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A grid estimated above an hour needs --i-know (and announces itself with it)."""
    from dpaudit.app.runs.compare import limits

    monkeypatch.setattr(limits, "estimate_seconds", lambda *a, **k: 3 * 3600.0)
    grid = parse_grid({"defenses": [_DP]})
    with pytest.raises(GridError, match=r"estimated to take about 3 h .*pass --i-know"):
        CompareSpec(grid=grid, executor="serial", progress=False)
    CompareSpec(grid=grid, executor="serial", progress=True, i_know=True)
    assert "about 3 h" in capsys.readouterr().err


def test_grid_limit_estimate_counts_the_trainings() -> None:
    """The estimate grows with what the grid trains (epochs x settings x seeds, shadows)."""
    from dpaudit.app.runs.compare.limits import estimate_seconds

    small = estimate_seconds(
        parse_grid({"defenses": [{"defense": "nonprivate", "epochs": 2}]}), data_root=None, workers=1
    )
    big = estimate_seconds(
        parse_grid(
            {
                "seeds": [0, 1],
                "defenses": [{"defense": "nonprivate", "epochs": 20}],
                "attacks": {"membership": {"num_shadows": 4}},
            }
        ),
        data_root=None,
        workers=1,
    )
    assert small is not None and big is not None
    # 2 seeds x 10x the epochs x (target + 4 shadows): far more than 5x, whatever the timed steps' spread.
    assert 0 < small.low <= small.high and big.middle > 5 * small.middle


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"inversion": {"classes": [0, 11]}}, "attacks.inversion.classes must be distinct 0..9 labels"),
        ({"inversion": {"classes": "0-4"}}, None),
        ({"inversion": {"classes": [0, "x"]}}, "attacks.inversion.classes must be labels"),
        ({"inversion": {"iterations": 0}}, "attacks.inversion.iterations must be an integer >= 1"),
        ({"membership": {"num_samples": -1}}, "attacks.membership.num_samples must be an integer >= 1, got -1"),
        ({"membership": {"num_shadows": "16"}}, "attacks.membership.num_shadows must be a number, got '16'"),
        ({"evasion": {"num_draws": 1}}, "attacks.evasion.num_draws must be an integer >= 2"),
        ({"evasion": {"certify": "no"}}, "attacks.evasion.certify: must be true or false"),
        ({"audit": {"threat": "grey-box"}}, "attacks.audit.threat must be one of black-box, white-box"),
        ({"audit": {"num_trials": True}}, "attacks.audit.num_trials must be a number"),
    ],
)
def test_grid_values_checked_at_parse_time(section: dict, message: str | None) -> None:
    """Issue 31 item 6: every section value is checked when the grid is read, naming the TOML key."""
    data = {"defenses": [_DP], "attacks": section}
    if message is None:
        assert parse_grid(data).inversion.classes == (0, 1, 2, 3, 4)
        return
    with pytest.raises(GridError) as info:
        parse_grid(data)
    assert message in str(info.value), str(info.value)


def test_grid_setting_kind_checked() -> None:
    with pytest.raises(GridError, match=r"defenses\[0\]\.baselines: must be true or false"):
        parse_grid({"defenses": [{"defense": "dssgd", "baselines": "no"}]})


def test_grid_empty_file_exits_2_naming_the_file(cli, tmp_path: Path) -> None:
    """Issue 31 item 6: an empty grid is refused (it used to train the baseline alone)."""
    path = tmp_path / "empty.toml"
    path.write_text("")
    code, out, err = cli.run("compare", "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert str(path) in err and "[[defenses]]" in err
    assert not (tmp_path / "run").exists()


def test_grid_limit_cli_refuses_before_any_job(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI names the file and key; with --i-know the grid gets as far as running."""

    class Ran(BaseException):
        pass

    def ran(*args: object, **kwargs: object) -> None:
        raise Ran

    monkeypatch.setattr(cmp, "run_compare", ran)
    monkeypatch.setattr(cmp, "train_job", ran)
    path = _grid(tmp_path, '[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 1.0\nepochs = 100000000\n')
    code, out, err = cli.run("compare", "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert (
        f"--config {path}: defenses[0].epochs=100,000,000 is above the limit 10,000" in err and "pass --i-know" in err
    )
    path = _grid(tmp_path, '[[defenses]]\ndefense = "nonprivate"\nepochs = 1\n[attacks.inversion]\nclasses = [0, 11]\n')
    code, _, err = cli.run("compare", "--config", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "attacks.inversion.classes" in err and "--classes" not in err
    from dpaudit.app.runs.compare import limits

    monkeypatch.setattr(limits, "estimate_seconds", lambda *a, **k: 0.0)
    path = _grid(tmp_path, '[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 1.0\nepochs = 100000000\n')
    with pytest.raises(Ran):
        cli.run("compare", "--config", str(path), "--out", str(tmp_path / "run"), "--i-know")


def test_a_grids_inversion_iterations_reach_every_attacks_own_step_bound():
    # It was validated and then dropped: no attack config has a field called "iterations".
    from dpaudit.app.runs.compare import inversion_configs
    from dpaudit.app.runs.compare.sections import InversionSection

    section = InversionSection(attacks=("mi-face", "gmi"), classes=None, evaluator_epochs=None, iterations=7)
    configs = inversion_configs(section)
    assert configs["mi-face"].max_iterations == 7 and configs["gmi"].gmi_iterations == 7
    defaults = inversion_configs(dataclasses.replace(section, iterations=None))
    assert defaults["mi-face"].max_iterations is None and defaults["gmi"].gmi_iterations != 7
