"""Checkpoints of a training in progress (dpaudit.checkpoint): what is saved, when, and what is refused.

The loops' resumes are checked against uninterrupted runs here for the non-private loop (cheap)
and, through the command line, for DP-SGD, Secure-SGD and PATE in tests/app/test_train_resume.py.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit import checkpoint as ck


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interval_defaults_to_45_s_and_the_variable_overrides_it(monkeypatch):
    monkeypatch.delenv(ck.INTERVAL_ENV, raising=False)
    assert ck.interval_seconds() == 45.0
    monkeypatch.setenv(ck.INTERVAL_ENV, "0")
    assert ck.interval_seconds() == 0.0
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv(ck.INTERVAL_ENV, bad)
        with pytest.raises(ValueError, match=f"{ck.INTERVAL_ENV}.*{bad}"):
            ck.interval_seconds()


def test_saves_only_when_the_interval_has_passed_and_reads_back_what_it_saved(tmp_path, capsys):
    clock = _Clock()
    path = tmp_path / "phase.ckpt.pt"
    c = ck.Checkpointer(path, what="a training", total=10, fingerprint="f", interval_s=30.0, clock=clock)
    state = {"w": torch.arange(4.0), "counts": [1, 2], "loss": 0.25}
    clock.now = 29.9
    assert not c.maybe_save(3, lambda: state) and not path.exists()
    clock.now = 30.0
    assert c.maybe_save(3, lambda: state) and path.is_file()
    assert not c.maybe_save(4, lambda: state)  # the interval restarts at each checkpoint
    clock.now = 1000.0
    assert not c.maybe_save(10, lambda: state)  # nothing is left to resume after the last step

    again = ck.Checkpointer(path, what="a training", total=10, fingerprint="f", interval_s=30.0, clock=clock)
    resumed = again.resume()
    assert resumed is not None and resumed.step == 3 and resumed.total == 10
    assert torch.equal(resumed.state["w"], state["w"]) and resumed.state["counts"] == [1, 2]
    err = capsys.readouterr().err
    assert err.startswith("resumed a training from step 3 of 10 (checkpoint of ") and err.count("\n") == 1
    again.finish()
    assert not path.exists()


def test_a_checkpoint_of_another_training_or_a_damaged_one_is_ignored(tmp_path, capsys):
    path = tmp_path / "phase.ckpt.pt"
    ck.Checkpointer(path, what="x", total=10, fingerprint="one", interval_s=0).save(2, {"w": torch.ones(1)})
    assert ck.Checkpointer(path, what="x", total=10, fingerprint="two", interval_s=0).resume() is None
    assert "another training" in capsys.readouterr().err
    assert ck.Checkpointer(path, what="x", total=11, fingerprint="one", interval_s=0).resume() is None
    path.write_bytes(b"not a checkpoint")
    assert ck.Checkpointer(path, what="x", total=10, fingerprint="one", interval_s=0).resume() is None
    assert "ignoring the checkpoint" in capsys.readouterr().err


class _Payload:
    """An arbitrary object: unpickling it would run code of the file's choosing."""

    def __reduce__(self):
        return (print, ("unpickled!",))


def test_a_checkpoint_holding_an_arbitrary_object_is_never_unpickled(tmp_path, capsys):
    path = tmp_path / "phase.ckpt.pt"
    buffer = io.BytesIO()
    meta = {"format": 1, "fingerprint": "f", "what": "x", "step": 1, "total": 5, "saved_at": 0.0}
    torch.save({"meta": meta, "state": {"evil": _Payload()}}, buffer)
    path.write_bytes(buffer.getvalue())
    assert ck.Checkpointer(path, what="x", total=5, fingerprint="f", interval_s=0).resume() is None
    err = capsys.readouterr()
    assert "unpickled!" not in err.out and "ignoring the checkpoint" in err.err


def test_global_generators_continue_as_they_would_have(tmp_path):
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    state = ck.global_rng_state()
    buffer = io.BytesIO()
    torch.save(state, buffer)  # the same round trip a checkpoint makes
    expected = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    ck.restore_global_rng(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    got = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]


def test_outside_a_scope_nothing_is_checkpointed(tmp_path):
    assert ck.checkpointer("p", what="x", total=3, identity=("f",)) is None
    with ck.checkpoints_in(tmp_path / "k") as where:
        c = ck.checkpointer("p", what="x", total=3, identity=("f",))
        other = ck.checkpointer("p", what="x", total=3, identity=("g",))
        assert c is not None and other is not None and c.path.parent == where and c.path != other.path
    assert ck.checkpointer("p", what="x", total=3, identity=("f",)) is None


def test_a_stage_result_is_computed_once_per_scope(tmp_path, capsys):
    calls = []

    def compute():
        calls.append(1)
        return {"r": torch.tensor([1.0, 2.0])}

    with ck.checkpoints_in(tmp_path):
        first = ck.stage_result("r", what="the vector", identity=("a",), compute=compute)
        second = ck.stage_result("r", what="the vector", identity=("a",), compute=compute)
        other = ck.stage_result("r", what="the vector", identity=("b",), compute=compute)
    assert len(calls) == 2 and torch.equal(first["r"], second["r"]) and torch.equal(other["r"], first["r"])
    assert "resumed the vector: reused from the checkpoint of" in capsys.readouterr().err


def _nonprivate(tmp: Path, *, epochs: int, interrupt_after: int | None):
    """Trains digits-mlp non-privately under a checkpoint scope, interrupted after some checkpoints."""
    from defenses.nonprivate import NonPrivateConfig, train_nonprivate
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.train_request import TrainRequest

    bundle = load_dataset("digits")
    request = TrainRequest(
        bundle=bundle,
        splits=make_splits(bundle, seed=0, member_fraction=0.1),
        model_name="digits-mlp",
        config=NonPrivateConfig(epochs=epochs, batch_size=64),
        seed=4,
        progress=False,
    )
    saves = {"n": 0}
    original = ck.Checkpointer.save

    def save(self, step, state):
        saves["n"] += 1
        if interrupt_after is not None and saves["n"] > interrupt_after:
            raise KeyboardInterrupt  # the run got past its last checkpoint, then stopped
        original(self, step, state)

    with ck.checkpoints_in(tmp):
        ck.Checkpointer.save = save  # type: ignore[method-assign]
        try:
            return train_nonprivate(request)[1]
        finally:
            ck.Checkpointer.save = original  # type: ignore[method-assign]


@pytest.mark.parametrize("stop", [2, 3, 5], ids=["mid-epoch", "epoch-end", "next-epoch"])
def test_the_non_private_loop_resumes_to_the_uninterrupted_weights(tmp_path, monkeypatch, capsys, stop):
    # 144 members in lots of 64: 3 steps per epoch, so the checkpoints fall inside an epoch, at its
    # end and in the next one (the shuffle of a resumed epoch is drawn again from its start).
    monkeypatch.setenv(ck.INTERVAL_ENV, "0")
    whole = _nonprivate(tmp_path / "whole", epochs=3, interrupt_after=None)
    with pytest.raises(KeyboardInterrupt):
        _nonprivate(tmp_path / "cut", epochs=3, interrupt_after=stop)
    capsys.readouterr()
    resumed = _nonprivate(tmp_path / "cut", epochs=3, interrupt_after=None)
    assert f"from step {stop} of 9" in capsys.readouterr().err
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    assert not list((tmp_path / "cut").glob("*.ckpt.pt"))  # the phase ended: its checkpoint is gone


def test_a_resumed_training_runs_with_the_threads_its_first_part_ran(tmp_path, capsys):
    # The default thread plan counts the cores other work keeps busy, so a rerun may plan another
    # count; the thread count can change a sum's last bits, so the checkpoint's count is kept.
    before = torch.get_num_threads()
    path = tmp_path / "ck.pt"
    try:
        torch.set_num_threads(1)
        ck.Checkpointer(path, what="x", total=10, fingerprint="f", interval_s=0).save(3, {"w": torch.ones(1)})
        torch.set_num_threads(2)
        assert ck.Checkpointer(path, what="x", total=10, fingerprint="f", interval_s=0).resume() is not None
        assert torch.get_num_threads() == 1
        assert "with its 1 intra-op thread as before" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
