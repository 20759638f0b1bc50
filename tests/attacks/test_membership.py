"""Membership inference: every registered attack on an overfit target, formula checks against reference
implementations, result values, resumable shadow training, CLI and report."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import special, stats

from attacks.membership import (
    MEMBERSHIP_ATTACKS,
    RMIAConfig,
    augmentations_for,
    lira_offline_scores,
    lira_online_scores,
    lira_phi,
    membership_attack,
    query_ids,
    rmia_scores,
    run_membership_attacks,
    threshold_scores,
)
from attacks.membership.shadows import ShadowTraining, plan_shadows, train_shadow
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit.app.cli import main
from dpaudit.data import load_dataset, make_splits
from dpaudit.privacy.audit_stats import bound_from_scores
from dpaudit.results import (
    MembershipResult,
    load_membership_result,
    save_membership_result,
)
from dpaudit.store import RunDir
from dpaudit.train_request import TrainRequest
from dpaudit.weights import save_record

NUM_SHADOWS = 8
ATTACKS = tuple(MEMBERSHIP_ATTACKS)


def shadow_dir(run):
    return RunDir(run).shadow_dir()


def save_membership_results(results, run):
    out = RunDir(run).membership_dir(next(iter(results.values())).model_id)
    for r in results.values():
        save_membership_result(r, out)
    return out


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Tiny models on a shared 2-core machine: several torch threads contend and run ~50x slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A deliberately overfit digits-mlp: 100 members, 150 epochs (train acc 1.0, held-out ~0.8)."""
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=100, num_non_members=100)
    record, model = train_nonprivate(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=NonPrivateConfig(epochs=150),
            seed=0,
            progress=False,
        )
    )
    run = tmp_path_factory.mktemp("mia-run")
    save_record(record, model, run / "records" / record.model_id)
    return {"bundle": bundle, "record": record, "model": model, "run": run}


@pytest.fixture(scope="module")
def results(target):
    return run_membership_attacks(
        "all",
        record=target["record"],
        model=target["model"],
        bundle=target["bundle"],
        num_shadows=NUM_SHADOWS,
        seed=0,
        shadow_directory=shadow_dir(target["run"]),
        progress=False,
    )


# ----------------------------------------------------------------------------- contract
@pytest.mark.extended
@pytest.mark.parametrize("attack", ATTACKS)
def test_scores_shaped_and_oriented(attack, results, target):
    r = results[attack]
    ids, member = query_ids(target["record"])
    assert r.attack == attack and r.model_id == target["record"].model_id
    assert r.scores.shape == (200,) and r.scores.dtype == np.float64 and np.all(np.isfinite(r.scores))
    np.testing.assert_array_equal(r.sample_ids, ids)
    np.testing.assert_array_equal(r.is_member, member)
    assert r.auc() > 0.55, f"{attack}: AUC {r.auc():.3f} on an overfit target"
    assert not r.scores.flags.writeable and not r.sample_ids.flags.writeable


@pytest.mark.extended
def test_every_attack_deterministic_under_a_seed(results, target):
    again = run_membership_attacks(
        "all",
        record=target["record"],
        model=target["model"],
        bundle=target["bundle"],
        num_shadows=NUM_SHADOWS,
        seed=0,
        shadow_directory=shadow_dir(target["run"]),
        progress=False,
    )
    assert (
        again["lira"].metadata["shadows_reused"] == 2 * NUM_SHADOWS and again["lira"].metadata["shadows_trained"] == 0
    )
    for name in ATTACKS:
        np.testing.assert_array_equal(again[name].scores, results[name].scores, err_msg=name)


def test_shadow_training_is_deterministic(target):
    spec = plan_shadows(
        template=target["record"],
        pool_ids=np.arange(400),
        num_shadows=1,
        seed=3,
        kind="offline",
        training=ShadowTraining(epochs=3),
    )[0]
    (_, a), (_, b) = train_shadow(spec, bundle=target["bundle"]), train_shadow(spec, bundle=target["bundle"])
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k


def test_inputs_not_mutated(target):
    ids, member = query_ids(target["record"], max_per_side=30, seed=1)
    ids_before, member_before = ids.copy(), member.copy()
    feats_before = target["bundle"].all().features.clone()
    params_before = [p.detach().clone() for p in target["model"].parameters()]
    membership_attack(
        "lira",
        record=target["record"],
        model=target["model"],
        bundle=target["bundle"],
        sample_ids=ids,
        is_member=member,
        num_shadows=2,
        seed=0,
        shadow_directory=shadow_dir(target["run"]),
        progress=False,
        training=ShadowTraining(epochs=2),
    )
    np.testing.assert_array_equal(ids, ids_before)
    np.testing.assert_array_equal(member, member_before)
    assert torch.equal(target["bundle"].all().features, feats_before)
    assert all(torch.equal(p, q) for p, q in zip(target["model"].parameters(), params_before))
    assert not target["model"].training  # evaluated in inference mode, left there


@pytest.mark.extended
@pytest.mark.parametrize("attack", ATTACKS)
def test_results_round_trip(attack, results, tmp_path):
    r = results[attack]
    path = save_membership_result(r, tmp_path)
    assert path.name == f"{attack}.json" and (tmp_path / f"{attack}.npz").is_file()
    back = load_membership_result(path)
    assert back == r and back.auc() == r.auc()
    assert MembershipResult.from_dict(json.loads(json.dumps(r.to_dict(), allow_nan=False))) == r


@pytest.mark.extended
def test_save_results_layout(results, tmp_path):
    out = save_membership_results(results, tmp_path)
    assert out == tmp_path / "attacks" / "membership" / results["loss"].model_id
    assert sorted(p.stem for p in out.glob("*.json")) == sorted(ATTACKS)


def test_bad_attack_arguments_name_argument_and_value(target):
    kw = dict(record=target["record"], model=target["model"], bundle=target["bundle"], progress=False)
    with pytest.raises(ValueError, match="attack must be one of .*'nope'"):
        run_membership_attacks("nope", **kw)
    with pytest.raises(ValueError, match="num_queries must be <= 1 .*got 3"):
        run_membership_attacks("lira", num_queries=3, num_shadows=2, **kw)
    with pytest.raises(ValueError, match="num_shadows must be an integer >= 1, got 0"):
        run_membership_attacks("lira", num_shadows=0, **kw)
    with pytest.raises(ValueError, match="gamma"):
        run_membership_attacks("rmia", configs={"rmia": RMIAConfig(gamma=0.0)}, **kw)
    with pytest.raises(ValueError, match="sample id 99999"):
        run_membership_attacks("loss", sample_ids=np.array([0, 99999]), is_member=np.array([True, False]), **kw)
    with pytest.raises(TypeError, match="is_member must be a bool array"):
        run_membership_attacks("loss", sample_ids=np.array([0, 1]), is_member=np.array([1, 0]), **kw)


def test_offline_attack_without_population_is_a_clear_error(target):
    import dataclasses

    from dpaudit.results.record import Membership

    m = target["record"].membership
    bare = dataclasses.replace(target["record"], membership=Membership(members=m.members, non_members=m.non_members))
    with pytest.raises(ValueError, match="'lira-offline' needs population data"):
        membership_attack(
            "lira-offline", record=bare, model=target["model"], bundle=target["bundle"], num_shadows=2, progress=False
        )


# ----------------------------------------------------------------------------- interrupted runs
class _Stop(Exception):
    pass


def test_interrupted_run_keeps_finished_shadows_and_resumes(target, tmp_path):
    kw = dict(
        record=target["record"],
        model=target["model"],
        bundle=target["bundle"],
        num_shadows=6,
        seed=11,
        progress=False,
        shadow_directory=tmp_path,
        training=ShadowTraining(epochs=3),
    )
    done = []

    def stop_after_three(spec, record):
        done.append(spec.shadow_id)
        if len(done) == 3:
            raise _Stop

    with pytest.raises(_Stop):
        membership_attack("lira", on_shadow_trained=stop_after_three, **kw)
    cached = sorted(p.parent.name for p in tmp_path.glob("*/record.json"))
    assert cached == sorted(done)
    stamps = {sid: (tmp_path / sid / "model.safetensors").stat().st_mtime_ns for sid in cached}
    retrained = []
    result = membership_attack("lira", on_shadow_trained=lambda spec, rec: retrained.append(spec.shadow_id), **kw)
    assert result.metadata["shadows_reused"] == 3 and result.metadata["shadows_trained"] == 3
    assert not set(retrained) & set(done)
    assert {sid: (tmp_path / sid / "model.safetensors").stat().st_mtime_ns for sid in cached} == stamps
    assert len(list(tmp_path.glob("*/record.json"))) == 6
    assert not list(tmp_path.glob("*/.*.tmp"))  # atomic writes leave no debris


def test_shadow_plan_is_balanced_and_prefix_consistent(target):
    pool = np.arange(200)
    small = plan_shadows(template=target["record"], pool_ids=pool, num_shadows=4, seed=5, kind="online", train_size=100)
    large = plan_shadows(template=target["record"], pool_ids=pool, num_shadows=8, seed=5, kind="online", train_size=100)
    assert [s.shadow_id for s in small] == [s.shadow_id for s in large[:4]]
    keep = np.stack([np.isin(pool, s.train_ids) for s in large])
    assert np.all(keep.sum(axis=0) == 4)  # every id IN for exactly half
    offline = plan_shadows(
        template=target["record"],
        pool_ids=target["record"].membership.population,
        num_shadows=2,
        seed=5,
        kind="offline",
    )
    queried, _ = query_ids(target["record"])
    assert not any(np.isin(queried, s.train_ids).any() for s in offline)


# ----------------------------------------------------------------------------- formulas
def test_lira_phi_matches_definition_and_is_stable():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(50, 10)) * 3
    labels = rng.integers(0, 10, 50)
    p = special.softmax(logits, axis=1)[np.arange(50), labels]
    np.testing.assert_allclose(lira_phi(logits, labels), np.log(p / (1 - p)), rtol=1e-9, atol=1e-9)
    extreme = np.array([[200.0, 0.0, -5.0], [-300.0, 40.0, 0.0]])
    phi = lira_phi(extreme, np.array([0, 0]))
    assert np.all(np.isfinite(phi))
    np.testing.assert_allclose(phi, [200.0 - np.log(1 + np.exp(-5.0)), -300.0 - special.logsumexp([40.0, 0.0])])
    assert lira_phi(logits[:, None, :].repeat(3, axis=1), labels).shape == (50, 3)


def test_threshold_scores_match_reference_formulas():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(40, 5)) * 2
    y = rng.integers(0, 5, 40)
    p = special.softmax(logits, axis=1)
    py = p[np.arange(40), y]
    np.testing.assert_allclose(threshold_scores(logits, y, kind="loss"), np.log(py))
    np.testing.assert_allclose(threshold_scores(logits, y, kind="confidence"), np.log(p.max(1)))
    np.testing.assert_allclose(threshold_scores(logits, y, kind="entropy"), np.sum(p * np.log(p), 1))
    mentr = -(1 - py) * np.log(py) - np.array(
        [sum(p[i, j] * np.log(1 - p[i, j]) for j in range(5) if j != y[i]) for i in range(40)]
    )
    np.testing.assert_allclose(threshold_scores(logits, y, kind="modified-entropy"), -mentr, rtol=1e-9)
    # a confidently wrong prediction must stay finite (log(1 − p) with p rounding to 1)
    assert np.all(np.isfinite(threshold_scores(np.array([[0.0, 80.0]]), np.array([0]), kind="modified-entropy")))
    # very confident members must not tie at the top (log p rounding to 0)
    confident = np.array([[40.0, 0.0], [50.0, 0.0], [60.0, 0.0]])
    for kind in ("loss", "confidence", "entropy", "modified-entropy"):
        assert np.all(np.diff(threshold_scores(confident, np.zeros(3, int), kind=kind)) > 0), kind


def test_rmia_matches_brute_force():
    rng = np.random.default_rng(2)
    k, n, m = 4, 30, 25
    lp = lambda *s: np.log(rng.uniform(0.05, 1.0, size=s))
    tx, rx, tz, rz = lp(n), lp(k, n), lp(m), lp(k, m)
    keep_x, keep_z = rng.random((k, n)) < 0.5, rng.random((k, m)) < 0.5
    keep_x[0], keep_x[1] = True, False  # every x has an IN and an OUT reference
    keep_z[0], keep_z[1] = True, False

    def half(p, keep, j):
        return 0.5 * (p[keep[:, j], j].mean() + p[~keep[:, j], j].mean())

    px = np.exp(rx)
    pz_ = np.exp(rz)
    pz = np.array([half(pz_, keep_z, j) for j in range(m)])
    lr_z = np.exp(tz) / pz
    for gamma in (1.0, 2.0):
        online = np.array([np.mean(np.exp(tx[i]) / half(px, keep_x, i) / lr_z > gamma) for i in range(n)])
        got = rmia_scores(
            target_logp_x=tx,
            ref_logp_x=rx,
            target_logp_z=tz,
            ref_logp_z=rz,
            keep_x=keep_x,
            keep_z=keep_z,
            gamma=gamma,
            tie_break=False,
        )
        np.testing.assert_allclose(got, online)
        broken = rmia_scores(
            target_logp_x=tx, ref_logp_x=rx, target_logp_z=tz, ref_logp_z=rz, keep_x=keep_x, keep_z=keep_z, gamma=gamma
        )
        np.testing.assert_allclose(np.floor(broken * m + 1e-9) / m, online)  # the tie-break stays below 1/m
        lr_x = np.exp(tx) / np.array([half(px, keep_x, i) for i in range(n)])
        assert np.all(np.diff(broken[np.argsort(lr_x)]) >= 0)  # and orders by LR(x)
        a = 0.3
        pxo = 0.5 * ((1 + a) * px.mean(0) + (1 - a))
        offline = np.array([np.mean(np.exp(tx[i]) / pxo[i] / lr_z > gamma) for i in range(n)])
        np.testing.assert_allclose(
            rmia_scores(
                target_logp_x=tx,
                ref_logp_x=rx,
                target_logp_z=tz,
                ref_logp_z=rz,
                keep_z=keep_z,
                offline_a=a,
                gamma=gamma,
                tie_break=False,
            ),
            offline,
        )
    with pytest.raises(ValueError, match="offline_a is required"):
        rmia_scores(target_logp_x=tx, ref_logp_x=rx, target_logp_z=tz, ref_logp_z=rz)


def test_lira_separates_gaussian_in_out_and_uses_global_variance_below_64():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    k, n = 16, 400
    member = rng.random(n) < 0.5
    keep = np.zeros((k, n), bool)
    keep[: k // 2] = True
    keep = rng.permuted(keep, axis=0)  # each example IN for exactly half of the shadows
    shadow = rng.normal(size=(k, n)) + 2.0 * keep
    target = rng.normal(size=n) + 2.0 * member
    online = lira_online_scores(target, shadow, keep)
    offline = lira_offline_scores(target, rng.normal(size=(k, n)))
    per_example = lira_online_scores(target, shadow, keep, global_variance=False)
    assert (
        roc_auc_score(member, online) > 0.8
        and roc_auc_score(member, offline) > 0.8
        and roc_auc_score(member, per_example) > 0.75
    )

    # By hand: per-example medians, one pooled residual σ per side (k = 16 < 64 → global).
    def fit(mask):
        mu = np.nanmedian(np.where(mask, shadow, np.nan), axis=0)
        return mu, np.sqrt(np.nanmean(np.where(mask, shadow - mu, np.nan) ** 2))

    (mi, si), (mo, so) = fit(keep), fit(~keep)
    np.testing.assert_allclose(online, stats.norm.logpdf(target, mi, si) - stats.norm.logpdf(target, mo, so), rtol=1e-9)


def test_augmentations_only_where_meaningful():
    assert augmentations_for("digits", (1, 8, 8)) == ("identity",)
    assert augmentations_for("adult", (104,)) == ("identity",)
    assert "flip" not in augmentations_for("mnist", (1, 28, 28)) and "shift:1:0" in augmentations_for(
        "mnist", (1, 28, 28)
    )
    assert augmentations_for("cifar10", (3, 32, 32))[:2] == ("identity", "flip")


# ----------------------------------------------------------------------------- result values
def _result(**kw):
    base = dict(
        attack="loss",
        model_id="m",
        sample_ids=np.arange(4),
        scores=np.array([0.1, 0.9, 0.4, 0.8]),
        is_member=np.array([False, True, False, True]),
    )
    base.update(kw)
    return MembershipResult(**base)


def test_result_metrics_from_scores():
    r = _result()
    assert r.auc() == 1.0 and r.balanced_accuracy() == 1.0 and r.tpr_at_fpr(0.0) == 1.0
    r = _result(scores=np.array([0.9, 0.8, 0.1, 0.4]))  # the top-scored sample is a non-member
    assert r.tpr_at_fpr(0.0) == 0.0 and r.tpr_at_fpr(0.49) == 0.0 and r.tpr_at_fpr(0.5) == 1.0
    rng = np.random.default_rng(0)
    scores, member = rng.normal(size=400) + 1.5 * (np.arange(400) % 2), np.arange(400) % 2 == 1
    big = _result(sample_ids=np.arange(400), scores=scores, is_member=member)
    assert (
        big.epsilon_bound(delta=1e-5).epsilon_lb
        == bound_from_scores(scores[member], scores[~member], delta=1e-5).epsilon_lb
    )
    s = big.summary()
    assert set(s["tpr_at_fpr"]) == {"0.001", "0.01"} and 0.5 < s["auc"] < 1.0


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(sample_ids=np.arange(4.0)), TypeError, "sample_ids must hold integers"),
        (dict(scores=np.array([0.1, np.nan, 0.3, 0.4])), ValueError, "scores must be finite"),
        (dict(is_member=np.array([0, 1, 0, 1])), TypeError, "is_member must be a bool array"),
        (dict(is_member=np.array([True] * 4)), ValueError, "both members and non-members"),
        (dict(scores=np.zeros(3)), ValueError, r"scores must have shape \(4,\)"),
        (dict(sample_ids=np.array([1, 1, 2, 3])), ValueError, "must not repeat"),
        (dict(attack=""), TypeError, "attack must be a non-empty string"),
    ],
)
def test_result_rejects_bad_fields(kw, exc, match):
    with pytest.raises(exc, match=match):
        _result(**kw)


def test_result_is_immutable_and_copies_inputs():
    scores = np.array([0.1, 0.9, 0.4, 0.8])
    r = _result(scores=scores)
    scores[0] = 5.0
    assert r.scores[0] == 0.1
    with pytest.raises(ValueError):
        r.scores[0] = 1.0
    with pytest.raises(AttributeError):
        r.attack = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.config["a"] = 1  # type: ignore[index]


# ----------------------------------------------------------------------------- CLI and report
def build_digits_mlp():
    """External-model builder for the CLI test (``test_membership:build_digits_mlp``)."""
    from dpaudit.models import build_model

    return build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)


@pytest.mark.extended
@pytest.mark.e2e
def test_cli_json_for_a_record(target, capsys, tmp_path):
    code = main(
        [
            "attack",
            "membership",
            "--target",
            str(target["run"]),
            "--attack",
            "loss",
            "--attack",
            "rmia",
            "--num-references",
            "2",
            "--executor",
            "serial",
            "--out",
            str(tmp_path),
            "--json",
            "--quiet",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert set(data) >= {"attacks", "target", "result_dir"} and data["target"] == target["record"].model_id
    assert set(data["attacks"]) == {"loss", "rmia"}
    for s in data["attacks"].values():
        assert {"auc", "balanced_accuracy", "tpr_at_fpr", "epsilon_lb"} <= set(s) and set(s["tpr_at_fpr"]) == {
            "0.001",
            "0.01",
        }
    assert (Path(data["result_dir"]) / "rmia.npz").is_file()
    report = Path(data["report"])
    assert report.is_file() and report.with_name(report.stem + "-roc.png").is_file() and Path(data["index"]).is_file()
    assert len(list(RunDir(tmp_path).shadow_dir().glob("*/record.json"))) == 2
    assert data["shadows"] == [
        {"pool": "online", "num_models": 2, "attacks": ["rmia"], "num_trained": 2, "num_reused": 0}
    ]
    assert data["shadow_defense"] == target["record"].defense  # shadows trained as the target was


@pytest.mark.extended
@pytest.mark.e2e
def test_cli_external_model(target, capsys, tmp_path, monkeypatch):
    # --import-mode=importlib keeps tests/ off sys.path; the CLI imports the builder by module name.
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from safetensors.torch import save_file

    weights = tmp_path / "w.safetensors"
    save_file({k: t.contiguous() for k, t in target["model"].state_dict().items()}, str(weights))
    ids = tmp_path / "members.json"
    ids.write_text(json.dumps(target["record"].membership.members.tolist()))
    code = main(
        [
            "attack",
            "membership",
            "--model-fn",
            "test_membership:build_digits_mlp",
            "--weights",
            str(weights),
            "--dataset",
            "digits",
            "--member-ids",
            str(ids),
            "--attack",
            "loss",
            "--out",
            str(tmp_path / "run"),
            "--json",
            "--quiet",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["target"].startswith("external-digits-") and data["attacks"]["loss"]["auc"] > 0.55


@pytest.mark.extended
@pytest.mark.e2e
def test_external_targets_are_keyed_by_members_and_code_and_accept_a_file(target, capsys, tmp_path):
    """Issue 11, finding 3: two --member-ids lists shared one target id and overwrote each other;
    --model-fn refused the file.py:function form --train-fn accepts."""
    from safetensors.torch import save_file

    builder = tmp_path / "builder.py"
    builder.write_text(
        "from dpaudit.models import build_model\n\n\ndef build():\n    return "
        "build_model('digits-mlp', input_shape=(1, 8, 8), num_classes=10)\n"
    )
    weights = tmp_path / "w.safetensors"
    save_file({k: t.contiguous() for k, t in target["model"].state_dict().items()}, str(weights))
    members = target["record"].membership.members.tolist()
    ids = []
    for name, chosen in (("all.json", members), ("half.json", members[: len(members) // 2])):
        (tmp_path / name).write_text(json.dumps(chosen))
        argv = [
            "attack",
            "membership",
            "--model-fn",
            f"{builder}:build",
            "--weights",
            str(weights),
            "--dataset",
            "digits",
        ]
        argv += [
            "--member-ids",
            str(tmp_path / name),
            "--attack",
            "loss",
            "--out",
            str(tmp_path / "run"),
            "--json",
            "--quiet",
        ]
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, err
        ids.append(json.loads(out)["target"])
    assert ids[0] != ids[1] and all(i.startswith("external-digits-") for i in ids)
    builder.write_text(builder.read_text() + "\n# edited\n")  # other code: another target
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["target"] not in ids


@pytest.mark.extended
@pytest.mark.e2e
def test_an_external_target_is_keyed_by_the_modules_its_builder_imports(target, capsys, tmp_path, monkeypatch):
    """Issue 31, item 1: --model-fn builder.py imports arch.py; an edited arch.py shared the old target id."""
    from safetensors.torch import save_file

    monkeypatch.syspath_prepend(str(tmp_path))  # arch.py is importable, as with PYTHONPATH=.
    arch = tmp_path / "arch.py"
    arch.write_text(
        "from dpaudit.models import build_model\n\n\ndef net():\n    return "
        "build_model('digits-mlp', input_shape=(1, 8, 8), num_classes=10)\n"
    )
    (tmp_path / "builder.py").write_text("import arch\n\n\ndef build():\n    return arch.net()\n")
    weights = tmp_path / "w.safetensors"
    save_file({k: t.contiguous() for k, t in target["model"].state_dict().items()}, str(weights))
    (tmp_path / "members.json").write_text(json.dumps(target["record"].membership.members.tolist()))
    argv = [
        "attack",
        "membership",
        "--model-fn",
        f"{tmp_path / 'builder.py'}:build",
        "--weights",
        str(weights),
        "--dataset",
        "digits",
    ]
    argv += [
        "--member-ids",
        str(tmp_path / "members.json"),
        "--attack",
        "loss",
        "--out",
        str(tmp_path / "run"),
        "--json",
        "--quiet",
    ]
    ids = []
    for _ in range(2):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, err
        ids.append(json.loads(out)["target"])
        arch.write_text(arch.read_text() + "\n# edited\n")
    monkeypatch.delitem(sys.modules, "arch", raising=False)
    assert ids[0] != ids[1]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--num-workers", "0"], "--num-workers"),
        (["--num-shadows", "-1"], "--num-shadows"),
        (["--gamma", "2"], "--gamma=2.0 does not apply"),
        (["--executor", "local", "--address", "1.2.3.4:6379"], "--address='1.2.3.4:6379'"),
        (["--num-queries", "3"], "num_queries must be <= 1"),
        (["--attack", "bogus"], "'bogus'"),
        (["--offline-a", "2"], "--offline-a"),
        (["--offline-a", "0.5"], "does not apply"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(target, capsys, tmp_path, extra, needle):
    argv = [
        "attack",
        "membership",
        "--target",
        str(target["run"]),
        "--attack",
        "lira",
        "--num-shadows",
        "2",
        "--executor",
        "serial",
        "--out",
        str(tmp_path),
        "--quiet",
        *extra,
    ]
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1


def test_cli_target_errors(capsys, tmp_path):
    assert (
        main(
            ["attack", "membership", "--target", str(tmp_path / "nothing"), "--attack", "loss", "--out", str(tmp_path)]
        )
        == 2
    )
    assert "--target" in capsys.readouterr().err
    assert main(["attack", "membership", "--model-fn", "x:y", "--attack", "loss", "--out", str(tmp_path)]) == 2
    assert "needs --weights" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the app run
@pytest.mark.extended
def test_run_membership_says_how_many_shadows_and_trains_them_as_the_target(target, tmp_path):
    """--num-shadows N counts the models one attack uses; online and offline pools are apart (issue: "--shadows 8
    silently trains 16")."""
    from dpaudit.app.runs.membership import MembershipSpec, run_membership
    from dpaudit.results.record import load_record

    attacks = {
        "lira": MEMBERSHIP_ATTACKS["lira"].config_type(num_shadows=2),
        "lira-offline": MEMBERSHIP_ATTACKS["lira-offline"].config_type(num_shadows=2),
        "loss": MEMBERSHIP_ATTACKS["loss"].config_type(),
    }
    spec = MembershipSpec(attacks=attacks, target=target["run"], executor="serial", progress=False, num_samples=40)
    lines: list[str] = []
    done = run_membership(spec, RunDir(tmp_path), on_plan=lines.append)
    assert lines == [
        "4 shadow model(s): 2 online (each queried example IN for about half: "
        "lira) + 2 offline (population only, no queried example: lira-offline); "
        "shadows trained with 'nonprivate'"
    ]
    assert [(p.kind, p.num_models, p.num_trained, p.attacks) for p in done.pools] == [
        ("online", 2, 2, ("lira",)),
        ("offline", 2, 2, ("lira-offline",)),
    ]
    records = [load_record(p.parent) for p in RunDir(tmp_path).shadow_dir().glob("*/record.json")]
    assert len(records) == 4 and {r.defense for r in records} == {
        "nonprivate"
    }  # the target's own defense, through the registry
    assert {r.config["epochs"] for r in records} == {target["record"].config["epochs"]}
    assert sorted(p.stem for p in RunDir(tmp_path).membership_dir(done.model_id).glob("*.json")) == [
        "lira",
        "lira-offline",
        "loss",
    ]
    again = run_membership(spec, RunDir(tmp_path))
    assert again.num_shadows_trained == 0 and again.num_shadows_reused == 4
    for name in attacks:
        np.testing.assert_array_equal(again.results[name].scores, done.results[name].scores)


def test_membership_spec_rejects_a_config_of_the_wrong_type(target):
    from dpaudit.app.runs.membership import MembershipSpec

    with pytest.raises(TypeError, match=r"attacks\['lira'\] must be a LiRAConfig"):
        MembershipSpec(attacks={"lira": RMIAConfig()}, target=target["run"])
    with pytest.raises(ValueError, match="'nope'"):
        MembershipSpec(attacks={"nope": RMIAConfig()}, target=target["run"])


@pytest.mark.extended
def test_an_attack_result_does_not_depend_on_the_other_attacks_of_the_call(target, tmp_path):
    """Issue 11, finding 3: LiRA's AUC changed when RMIA ran beside it (a different shadow pool)."""
    kw = dict(
        record=target["record"],
        model=target["model"],
        bundle=target["bundle"],
        num_shadows=NUM_SHADOWS,
        seed=0,
        shadow_directory=tmp_path / "shadows",
        progress=False,
    )
    alone = run_membership_attacks(["lira"], **kw)
    together = run_membership_attacks(["lira", "rmia"], **kw)
    np.testing.assert_array_equal(alone["lira"].scores, together["lira"].scores)


def test_sample_vulnerability_is_judged_from_the_shadows_alone() -> None:
    # Four shadows, three queried samples, two classes, label 1, φ = logit of class 1 = a:
    # sample 10 is IN for shadows 0-1 (a = 4) and OUT for 2-3 (a = 0): far apart, vulnerable;
    # sample 11 has a = 1 whatever its membership: not vulnerable; sample 12 is IN for every
    # shadow, so no shadow shows how it looks OUT: -inf, never ranked among the most vulnerable.
    from attacks.membership import MembershipContext, ShadowOutputs, sample_vulnerability

    ids = np.array([10, 11, 12])
    a = np.array([[4.0, 1.0, 2.0], [4.1, 1.0, 2.0], [0.0, 1.0, 2.0], [0.1, 1.0, 2.0]])  # (shadow, sample)
    logits = np.stack([np.zeros_like(a), a], axis=-1)[:, :, None, :]  # (k, U, q = 1, C = 2)
    train_ids = (np.array([10, 12]), np.array([10, 11, 12]), np.array([11, 12]), np.array([12]))
    pool = ShadowOutputs(
        kind="online", pool_ids=ids, population_ids=np.array([], dtype=np.int64), train_ids=train_ids, logits=logits
    )
    context = MembershipContext(
        model_id="t",
        sample_ids=ids,
        is_member=np.array([True, False, True]),
        universe_ids=ids,
        universe_labels=np.array([1, 1, 1]),
        target_logits=np.zeros((3, 1, 2)),
        augmentations=("identity",),
        shadows={"online": pool},
    )
    v = sample_vulnerability(context)
    assert v is not None and v[0] > 10 and v[1] < 1e-3 and v[2] == -np.inf
    # The target's logits play no part: changing them changes nothing.
    other = dataclasses.replace(context, target_logits=np.full((3, 1, 2), 7.0))
    np.testing.assert_array_equal(sample_vulnerability(other), v)
    assert sample_vulnerability(dataclasses.replace(context, shadows={})) is None


def test_a_randomized_target_is_queried_reproducibly_under_a_seed():
    # A noise-layer model (PixelDP, HGM) draws fresh noise on every forward pass; the attack's
    # queries draw it from the attack's seed, so the same seed gives the same scores (the grid's
    # PixelDP row had differed between two runs of one seed) and another seed other draws.
    import torch

    from attacks.membership.queries import predict_queries
    from dpaudit.models import build_model
    from dpaudit.robustness.noise import find_noise_layer

    torch.manual_seed(0)
    model = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10, noise_layer=True)
    find_noise_layer(model).set_noise(0.5)
    x = torch.rand(16, 1, 8, 8)
    first = predict_queries(model, x, ("identity",), "cpu", seed=3, stream="target")
    torch.rand(5)  # the global generator moving on changes nothing
    again = predict_queries(model, x, ("identity",), "cpu", seed=3, stream="target")
    other = predict_queries(model, x, ("identity",), "cpu", seed=4, stream="target")
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert find_noise_layer(model).generator is None  # the layer's own generator is restored
