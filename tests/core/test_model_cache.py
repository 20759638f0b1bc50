"""The model cache: finished models are kept and reused, the rest trained, nothing half-written survives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.executors.jobs import SerialExecutor
from dpaudit.model_cache import CachedModels, ModelJob, ensure_models, is_cached, pack_model, unpack_state
from dpaudit.models import build_model
from dpaudit.results.record import RECORD_FILE, WEIGHTS_FILE, Membership, TrainedModel, load_record

CALLS: list[int] = []


def _build() -> torch.nn.Module:
    return build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)


def _toy_job(*, seed: int, fail: bool = False) -> dict:
    """A model "trained" by seeding its initialisation; counts its calls."""
    CALLS.append(seed)
    if fail:
        raise RuntimeError(f"job {seed} failed")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _build()
    record = TrainedModel(
        model_id=f"toy{seed}",
        defense="nonprivate",
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=[seed, seed + 100], non_members=[]),
        seed=seed,
    )
    return pack_model(record, model)


def _jobs(seeds, fail=()):
    return [ModelJob(key=f"toy{s}", fn=_toy_job, kwargs={"seed": s, "fail": s in fail}, build=_build) for s in seeds]


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_trains_persists_and_returns_in_job_order(tmp_path):
    out = ensure_models(_jobs([3, 1, 2]), directory=tmp_path, progress=False)
    assert isinstance(out, CachedModels)
    assert out.keys == ("toy3", "toy1", "toy2") and out.trained == ("toy3", "toy1", "toy2") and out.reused == ()
    assert [r.model_id for r in out.records] == list(out.keys)
    for key, record, model in zip(out.keys, out.records, out.models, strict=True):
        assert (
            (tmp_path / key / RECORD_FILE).is_file()
            and (tmp_path / key / WEIGHTS_FILE).is_file()
            and is_cached(tmp_path, key)
        )
        assert record.weights_sha256 is not None  # the record as stored
        assert not model.training
    assert np.array_equal(out.records[1].membership.members, [1, 101])
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))


def test_second_call_reuses_without_training_and_says_so(tmp_path, capsys):
    first = ensure_models(_jobs([0, 1]), directory=tmp_path, progress=False)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    CALLS.clear()
    again = ensure_models(_jobs([0, 1, 2]), directory=tmp_path, progress=True, announce_reused=True, label="toys")
    assert CALLS == [2]  # only the missing one ran
    assert again.reused == ("toy0", "toy1") and again.trained == ("toy2",)
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert all(_same(a, b) for a, b in zip(first.models, again.models[:2], strict=True))
    assert "toys: reusing 2 of 3 already trained in" in capsys.readouterr().err


def test_interrupted_run_keeps_every_finished_model(tmp_path):
    seen = []

    def stop_after_two(key, record, model):
        seen.append(key)
        if len(seen) == 2:
            raise KeyboardInterrupt  # like Ctrl-C while the third job runs

    with pytest.raises(KeyboardInterrupt):
        ensure_models(
            _jobs(range(5)), directory=tmp_path, executor=SerialExecutor(), progress=False, on_trained=stop_after_two
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy0", "toy1"]
    CALLS.clear()
    out = ensure_models(_jobs(range(5)), directory=tmp_path, progress=False)
    assert out.reused == ("toy0", "toy1") and CALLS == [2, 3, 4]


def test_a_failing_job_loses_nothing_finished_before_it(tmp_path):
    with pytest.raises(RuntimeError, match="job 2 failed"):
        ensure_models(_jobs(range(4), fail={2}), directory=tmp_path, progress=False)
    assert is_cached(tmp_path, "toy0") and is_cached(tmp_path, "toy1") and not (tmp_path / "toy2").exists()


def test_no_directory_keeps_nothing(tmp_path):
    out = ensure_models(_jobs([0]), directory=None, progress=False)
    assert out.trained == ("toy0",) and out.records[0].weights_sha256 is None
    assert not any(tmp_path.iterdir())


def test_a_directory_without_record_json_is_trained_again(tmp_path):
    (tmp_path / "toy0").mkdir()
    (tmp_path / "toy0" / WEIGHTS_FILE).write_bytes(b"half-written")  # weights go first, record.json last
    out = ensure_models(_jobs([0]), directory=tmp_path, progress=False)
    assert out.trained == ("toy0",) and load_record(tmp_path / "toy0").weights_sha256 is not None


def test_global_torch_rng_is_left_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ensure_models(_jobs([0, 1]), directory=tmp_path, progress=False)
    assert torch.equal(torch.rand(3), expected)


def test_pack_and_unpack_round_trip():
    out = _toy_job(seed=7)
    assert all(isinstance(a, np.ndarray) for a in out["state"].values())
    model = unpack_state(_build(), out["state"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        assert _same(model, _build())


def test_bad_jobs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unique keys, got 'toy0' twice"):
        ensure_models(_jobs([0, 0]), directory=tmp_path, progress=False)
    with pytest.raises(TypeError, match="jobs must hold ModelJob values, got dict"):
        ensure_models([{"key": "x"}], directory=tmp_path, progress=False)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="key must be a non-empty name without '/'"):
        ModelJob(key="../x", fn=_toy_job, build=_build)
    with pytest.raises(TypeError, match="build must be callable"):
        ModelJob(key="x", fn=_toy_job, build=None)  # type: ignore[arg-type]
