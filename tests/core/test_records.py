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
    assert loaded.to_dict() == json.loads(json.dumps(rec.to_dict()))
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
    a = train_or_load(TrainSpec(defense="nonprivate", model="digits-mlp", config=default_config("nonprivate", epochs=1), seed=0, progress=False), run)
    b = train_or_load(TrainSpec(defense="nonprivate", model="digits-mlp", config=default_config("nonprivate", epochs=1), seed=1, progress=False), run)
    shutil.copy(a.record_dir / "model.safetensors", b.record_dir / "model.safetensors")
    with pytest.raises(ValueError, match=f"belongs to model '{a.record.model_id}'"):
        load_model(b.record_dir)


def test_a_record_without_weights_is_trained_again_not_reused(tmp_path, capsys):
    """Issue 11, finding 8: a record.json without its weights was reported as reused."""
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.store import RunDir

    spec = TrainSpec(defense="nonprivate", model="digits-mlp", config=default_config("nonprivate", epochs=1), progress=False)
    first = train_or_load(spec, RunDir(tmp_path))
    (first.record_dir / "model.safetensors").unlink()
    again = train_or_load(spec, RunDir(tmp_path))
    assert not again.reused and (again.record_dir / "model.safetensors").is_file()
    assert "training it again" in capsys.readouterr().err
