import hashlib
import json
import os
import pickle
import sys
import textwrap

import numpy as np
import pytest
import torch

from dpaudit.models import build_model
from dpaudit.privacy.claims import NonPrivateClaim, dpsgd_claim
from dpaudit.results.record import (
    Membership,
    TrainedModel,
    load_record,
    resolve_record_dir,
)
from dpaudit.store import (
    RunDir,
    atomic_save_npz,
    atomic_write_json,
    load_npz,
    read_json,
)
from dpaudit.weights import (
    UnsafeWeightsError,
    load_external_model,
    load_model,
    load_weights,
    save_record,
)


def _record(model_id="m1", claim=None):
    return TrainedModel(
        model_id=model_id,
        defense="nonprivate",
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        config={"epochs": 3, "nested": {"a": [1, 2]}},
        claim=claim or NonPrivateClaim(),
        membership=Membership(members=[3, 1, 2], non_members=[10, 11], population=[20], canaries=[]),
        seed=7,
        metrics={"test_accuracy": 0.9},
    )


def test_record_round_trip_gives_same_predictions(tmp_path):
    torch.manual_seed(0)
    model = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    rec = _record(claim=dpsgd_claim(sampling_rate=0.1, noise_multiplier=1.0, num_steps=30))
    rdir = save_record(rec, model, tmp_path / "records" / rec.model_id)
    loaded = load_record(rdir)
    # saving adds the digest of the weights file, and nothing else
    assert loaded.weights_sha256 == hashlib.sha256((rdir / "model.safetensors").read_bytes()).hexdigest()
    assert loaded.to_dict() == {**json.loads(json.dumps(rec.to_dict())), "weights_sha256": loaded.weights_sha256}
    assert loaded.membership.members.tolist() == [1, 2, 3]
    assert loaded.claim.epsilon(delta=1e-5, accountant="rdp") == rec.claim.epsilon(delta=1e-5, accountant="rdp")
    again = load_model(rdir)
    x = torch.rand(16, 1, 8, 8)
    model.eval()
    assert torch.equal(model(x), again(x))
    # a run directory holding exactly one record resolves to it
    assert resolve_record_dir(tmp_path) == rdir


def test_record_is_immutable_deeply():
    rec = _record()
    with pytest.raises(AttributeError):
        rec.seed = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        rec.config["epochs"] = 5  # type: ignore[index]
    with pytest.raises(ValueError):
        rec.membership.members[0] = 9


def test_membership_sets_must_be_disjoint():
    with pytest.raises(ValueError, match="share sample ids"):
        Membership(members=[1, 2], non_members=[2, 3])
    with pytest.raises(ValueError, match="duplicate"):
        Membership(members=[1, 1], non_members=[])


def test_membership_owners_follow_the_sorted_members_and_round_trip():
    m = Membership.with_owners([[9, 2], [5], [7, 1]], non_members=[3])
    assert m.members.tolist() == [1, 2, 5, 7, 9] and m.owners.tolist() == [2, 0, 1, 2, 0]
    assert m.owned_by(2).tolist() == [1, 7] and m.owned_by(1).tolist() == [5]
    again = Membership.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again.owners.tolist() == m.owners.tolist()
    single = Membership(members=[1, 2], non_members=[3])
    assert "owners" not in single.to_dict() and single.owned_by(0).tolist() == [1, 2]
    with pytest.raises(ValueError, match="owners"):
        Membership(members=[1, 2], non_members=[], owners=[0])
    with pytest.raises(ValueError, match="owners"):
        Membership(members=[1, 2], non_members=[], owners=[0, -1])


class _Exploit:
    """A pickled object that would create a file when unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_pickled_python_objects_in_weights_are_refused_without_running(tmp_path):
    sentinel = tmp_path / "pwned"
    bad = tmp_path / "weights.pt"
    torch.save({"layer.weight": torch.zeros(2), "payload": _Exploit(sentinel)}, bad)
    with pytest.raises(UnsafeWeightsError, match="refusing weights file"):
        load_weights(bad)
    assert not sentinel.exists()
    # a plain pickle file (not a torch archive) is refused too
    raw = tmp_path / "raw.pth"
    raw.write_bytes(pickle.dumps(_Exploit(sentinel)))
    with pytest.raises(ValueError):
        load_weights(raw)
    assert not sentinel.exists()


def test_external_model_from_module_function_and_state_dict(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(
        textwrap.dedent(
            """
            from torch import nn
            def build():
                return nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
            def not_a_model():
                return 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("mymodels", None)
    import mymodels

    ref = mymodels.build()
    torch.save(ref.state_dict(), tmp_path / "w.pt")
    model = load_external_model("mymodels:build", tmp_path / "w.pt")
    x = torch.rand(5, 4)
    assert torch.equal(model(x), ref.eval()(x))
    with pytest.raises(ValueError, match="module:function"):
        load_external_model("mymodels.build", tmp_path / "w.pt")
    with pytest.raises(ValueError, match="no attribute"):
        load_external_model("mymodels:missing", tmp_path / "w.pt")
    with pytest.raises(ValueError, match="nn.Module"):
        load_external_model("mymodels:not_a_model", tmp_path / "w.pt")
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_external_model("mymodels:build", tmp_path / "nope.pt")
    torch.save({"other.weight": torch.zeros(1)}, tmp_path / "mismatch.pt")
    with pytest.raises(ValueError, match="do not fit"):
        load_external_model("mymodels:build", tmp_path / "mismatch.pt")


def test_atomic_json_and_npz(tmp_path):
    path = atomic_write_json(tmp_path / "a" / "r.json", {"eps": float("inf"), "x": np.int64(3), "v": [0.5]})
    assert json.loads(path.read_text())["eps"] == "inf"  # strict JSON
    assert read_json(path) == {"eps": float("inf"), "x": 3, "v": [0.5]}
    atomic_save_npz(tmp_path / "s.npz", scores=np.arange(3.0))
    assert load_npz(tmp_path / "s.npz")["scores"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(TypeError, match="object"):
        atomic_save_npz(tmp_path / "o.npz", bad=np.array([{}], dtype=object))
    assert not list(tmp_path.glob("**/*.tmp"))


def test_run_dir_layout(tmp_path):
    run = RunDir(tmp_path / "run").create(command="dpaudit test")
    for sub in ("records", "attacks", "audits", "reports"):
        assert run.subdir(sub).is_dir()
    manifest = read_json(run.path / "run.json")
    assert manifest["command"] == "dpaudit test" and manifest["schema_version"] == 1
    with pytest.raises(ValueError, match="name"):
        run.subdir("secrets")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="out must be a directory"):
        RunDir(tmp_path / "file").create()


def test_resolve_record_dir_errors(tmp_path):
    with pytest.raises(ValueError, match="found none"):
        resolve_record_dir(tmp_path)
    model = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    save_record(_record("a"), model, tmp_path / "records" / "a")
    save_record(_record("b"), model, tmp_path / "records" / "b")
    with pytest.raises(ValueError, match="holds 2 records"):
        resolve_record_dir(tmp_path)


def test_bad_schema_version_refused(tmp_path):
    data = _record().to_dict()
    data["schema_version"] = 99
    with pytest.raises(ValueError, match="schema_version"):
        TrainedModel.from_dict(data)


def test_weights_of_another_model_are_refused(tmp_path):
    """Issue 11, finding 8: weights whose metadata names another model id loaded silently."""
    import shutil

    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.store import RunDir

    run = RunDir(tmp_path / "run")
    a = train_or_load(
        TrainSpec(
            defense="nonprivate",
            model="digits-mlp",
            config=default_config("nonprivate", epochs=1),
            seed=0,
            progress=False,
        ),
        run,
    )
    b = train_or_load(
        TrainSpec(
            defense="nonprivate",
            model="digits-mlp",
            config=default_config("nonprivate", epochs=1),
            seed=1,
            progress=False,
        ),
        run,
    )
    shutil.copy(a.record_dir / "model.safetensors", b.record_dir / "model.safetensors")
    with pytest.raises(ValueError, match=f"belongs to model '{a.record.model_id}'"):
        load_model(b.record_dir)


def test_a_record_without_weights_is_trained_again_not_reused(tmp_path, capsys):
    """Issue 11, finding 8: a record.json without its weights was reported as reused."""
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.store import RunDir

    spec = TrainSpec(
        defense="nonprivate", model="digits-mlp", config=default_config("nonprivate", epochs=1), progress=False
    )
    first = train_or_load(spec, RunDir(tmp_path))
    (first.record_dir / "model.safetensors").unlink()
    again = train_or_load(spec, RunDir(tmp_path))
    assert not again.reused and (again.record_dir / "model.safetensors").is_file()
    assert "training it again" in capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 11: verified records


def _saved(tmp_path, claim=None):
    model = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    rec = _record(claim=claim)
    return save_record(rec, model, tmp_path / "records" / rec.model_id), model


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda d: [d], "must be a JSON object, got list"),
        (lambda d: 42, "must be a JSON object, got int"),
        (lambda d: {k: x for k, x in d.items() if k != "seed"}, "missing the field 'seed'"),
        (lambda d: {**d, "membership": "all"}, "membership must be a mapping"),
        (lambda d: {**d, "membership": {**d["membership"], "members": [1.5]}}, "members"),
        (lambda d: {**d, "input_shape": [1, 8, "8"]}, "input_shape"),
        (lambda d: {**d, "input_shape": 64}, "input_shape"),
        (lambda d: {**d, "num_classes": "10"}, "num_classes"),
        (lambda d: {**d, "metrics": [0.9]}, "metrics must be a mapping"),
        (lambda d: {**d, "dataset": None}, "dataset must be a non-empty string"),
        (
            lambda d: {**d, "claim": {"kind": "dp", "event": {"type": "GaussianDpEvent", "noise_multiplier": -1.1}}},
            "claim: event.noise_multiplier must be finite and > 0, got -1.1",
        ),
        (lambda d: {**d, "config": {"delta": 1.5}}, "config.delta must lie in (0, 1), got 1.5"),
        (lambda d: {**d, "weights_sha256": "ABC"}, "weights_sha256"),
    ],
)
def test_a_bad_record_file_is_a_value_error_naming_the_file_and_field(tmp_path, change, needle):
    """Issue 11, findings 6 and 8: a record.json that is a list (TypeError, exit 1) or tampered (loaded)."""
    rdir, _ = _saved(tmp_path)
    path = rdir / "record.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    for load in (load_record, load_model):
        with pytest.raises(ValueError) as exc:
            load(rdir)
        message = str(exc.value)
        assert "\n" not in message and str(path) in message and needle in message, message


def test_weights_that_differ_from_the_record_s_digest_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    rdir, _ = _saved(tmp_path)
    weights = rdir / "model.safetensors"
    recorded = load_record(rdir).weights_sha256
    state = load_file(str(weights))
    state["1.bias"] = state["1.bias"] + 1
    save_file(state, str(weights), metadata={"model_id": "m1"})  # the right model id, other values
    with pytest.raises(
        ValueError,
        match=r"does not match its record \(sha256 [0-9a-f]{64} != " + recorded + r"\); retrain or restore it",
    ) as exc:
        load_model(rdir)
    assert str(weights) in str(exc.value)


def test_a_record_without_a_weights_file_cannot_be_loaded_as_a_model(tmp_path):
    rdir, _ = _saved(tmp_path)
    (rdir / "model.safetensors").unlink()
    load_record(rdir)  # the record alone is fine (reports need no weights)
    with pytest.raises(ValueError, match="has no weights file"):
        load_model(rdir)


def test_record_without_digest_is_accepted_on_its_model_id(tmp_path):
    """Records saved before digests existed still load (the model-id check remains)."""
    rdir, model = _saved(tmp_path)
    path = rdir / "record.json"
    data = json.loads(path.read_text())
    del data["weights_sha256"]
    path.write_text(json.dumps(data))
    assert load_record(rdir).weights_sha256 is None
    x = torch.rand(4, 1, 8, 8)
    model.eval()
    assert torch.equal(load_model(rdir)(x), model(x))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "npy", "flip"])
def test_a_corrupt_npz_is_a_value_error_naming_the_file(tmp_path, damage):
    """Issue 11, finding 6: a truncated NPZ in a run directory raised zipfile.BadZipFile (exit 1)."""
    path = tmp_path / "scores.npz"
    atomic_save_npz(path, scores=np.random.default_rng(0).random(20000))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not an archive" * 10)
    elif damage == "npy":
        np.save(tmp_path / "x.npy", np.arange(3))
        (tmp_path / "x.npy").rename(path)
    else:
        path.write_bytes(data[:200] + bytes(b ^ 0xFF for b in data[200:400]) + data[400:])
    with pytest.raises(ValueError, match="is corrupt") as exc:
        load_npz(path)
    assert str(path) in str(exc.value) and "delete it to recompute" in str(exc.value) and "\n" not in str(exc.value)


def test_a_missing_npz_is_still_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_npz(tmp_path / "absent.npz")


def test_a_truncated_json_is_a_value_error_naming_the_file(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json(path, {"a": list(range(50))})
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(ValueError, match="not valid JSON") as exc:
        read_json(path)
    assert str(path) in str(exc.value)
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match="UTF-8"):
        read_json(path)
