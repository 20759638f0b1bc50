"""Runs estimated to take more than an hour say so before they start (issue 11, "Bounded resources")."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.app import cost, estimate
from dpaudit.app.cli import main


class Started(BaseException):
    """The audit's trials were about to start (not an Exception, so the CLI does not catch it)."""


def test_seconds_per_example_is_measured_and_unknown_models_give_none() -> None:
    t = estimate.seconds_per_example("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    assert 0.0 < t < 0.1
    assert estimate.seconds_per_example("no-such-model", input_shape=(1, 8, 8), num_classes=10) == 0.0


@pytest.mark.parametrize(
    "seconds, said", [(600.0, None), (3599.0, None), (3 * 3600.0, "about 3 h"), (5 * 86400.0, "about 5 days")]
)
def test_only_runs_over_an_hour_are_announced(
    seconds: float, said: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cost.announce_if_long(seconds, "this audit", hint="--num-trials changes it") is (said is not None)
    err = capsys.readouterr().err
    if said is None:
        assert err == ""
    else:
        assert (
            said in err
            and "this audit is estimated to take" in err
            and "--num-trials changes it" in err
            and len(err.strip().splitlines()) == 1
        )


def test_a_long_audit_says_so_before_its_trials_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dataclasses

    import dpaudit.app.runs.audit.runner as audit_run
    from attacks.audit.procedures import AUDIT_PROCEDURES

    def start(*args: object, **kwargs: object) -> None:
        raise Started

    # As if one example took 10 ms: 2 x 500 trainings x 1000 steps x (0.01 x 100 members) x 3 (per-example gradients) =
    # 8.3 h.
    monkeypatch.setattr(audit_run, "seconds_per_example", lambda *a, **k: 0.01)
    monkeypatch.setitem(AUDIT_PROCEDURES, "multi-run", dataclasses.replace(AUDIT_PROCEDURES["multi-run"], run=start))
    with pytest.raises(Started):
        main(
            [
                "audit",
                "--noise-multiplier",
                "2",
                "--num-trials",
                "500",
                "--num-steps",
                "1000",
                "--num-members",
                "100",
                "--out",
                str(tmp_path / "run"),
            ]
        )
    err = capsys.readouterr().err
    assert "this audit (1000 trainings of 1000 DP-SGD steps, 1 worker(s)) is estimated to take about 8 h" in err
    with pytest.raises(Started):
        main(
            [
                "audit",
                "--noise-multiplier",
                "2",
                "--num-trials",
                "5",
                "--num-steps",
                "1000",
                "--num-members",
                "100",
                "--out",
                str(tmp_path / "run2"),
            ]
        )
    assert "estimated to take" not in capsys.readouterr().err
