"""Executors: the same jobs give the same results in-process, on a process pool and on Ray."""

from __future__ import annotations

import pytest
import torch

from attacks.shadows import ShadowTraining, ensure_shadows, plan_shadows
from dpaudit.data import load_dataset, make_splits
from dpaudit.executors import (
    Job,
    LocalExecutor,
    RayExecutor,
    SerialExecutor,
    make_executor,
)
from dpaudit.results.record import Membership, TrainedModel
from dpaudit.seeding import derive_seed


def _jobs(n):
    return [Job(key=f"j{i}", fn=derive_seed, kwargs={"seed": i}) for i in range(n)]


@pytest.fixture(scope="module")
def specs():
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=200, num_non_members=100)
    template = TrainedModel(
        model_id="t",
        defense="nonprivate",
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=splits.members, non_members=splits.non_members, population=splits.population),
        seed=0,
    )
    return plan_shadows(template=template, pool_ids=splits.population, num_shadows=2, seed=7, kind="offline", training=ShadowTraining(epochs=4))


@pytest.fixture(scope="module")
def serial_weights(specs):
    run = ensure_shadows(specs, directory=None, executor=SerialExecutor(), progress=False)
    return [m.state_dict() for m in run.models]


def _assert_same(models, reference):
    for model, ref in zip(models, reference):
        for k, t in model.state_dict().items():
            assert torch.equal(t, ref[k]), k


def test_serial_runs_jobs_in_order_and_restores_threads():
    before = torch.get_num_threads()
    out = list(SerialExecutor().run(_jobs(3)))
    assert [j.key for j, _ in out] == ["j0", "j1", "j2"] and [r for _, r in out] == [derive_seed(i) for i in range(3)]
    assert torch.get_num_threads() == before


def test_job_errors_carry_the_job_key():
    with pytest.raises(ValueError, match="seed must be an integer >= 0") as info:
        list(SerialExecutor().run([Job(key="bad-job", fn=derive_seed, kwargs={"seed": -1})]))
    assert any("bad-job" in note for note in getattr(info.value, "__notes__", []))


def test_jobs_validated():
    with pytest.raises(ValueError, match="unique keys"):
        list(SerialExecutor().run([_jobs(1)[0], _jobs(1)[0]]))
    with pytest.raises(TypeError, match="key must be a non-empty string"):
        Job(key="", fn=derive_seed)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(kind="threads"), ValueError, "executor must be one of serial, local, ray; got 'threads'"),
        (dict(kind="local", address="auto"), ValueError, "address='auto' applies to executor 'ray' only"),
        (dict(kind="local", workers=0), ValueError, "workers must be an integer >= 1, got 0"),
    ],
)
def test_make_executor_rejects_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_executor(**kwargs)


def test_process_pool_trains_identical_shadows_and_stops_with_the_caller(specs, serial_weights):
    # One pool for both checks: starting a worker (spawn, then importing torch) costs seconds.
    with LocalExecutor(workers=2) as pool:
        run = ensure_shadows(specs, directory=None, executor=pool, progress=False)
        _assert_same(run.models, serial_weights)
        it = pool.run(_jobs(6))
        next(it)
        it.close()  # cancels the rest and stops the workers
        assert pool._pool is None


def test_ray_trains_identical_shadows(specs, serial_weights):
    pytest.importorskip("ray")
    # One Ray worker: each worker process imports torch (seconds), and identity is the point here.
    with RayExecutor(workers=1) as ray_exec:
        run = ensure_shadows(specs, directory=None, executor=ray_exec, progress=False)
    _assert_same(run.models, serial_weights)


def test_ray_absent_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ImportError, match=r"pip install 'dpaudit\[ray\]'"):
        make_executor("ray")
