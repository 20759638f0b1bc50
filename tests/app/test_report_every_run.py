"""``dpaudit report`` renders every run directory ``dpaudit train`` can leave (issue 34): a plain
training, a DSSGD federation and a DP-SGD training, each page opening with its verdict box."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

_TINY = ("--dataset", "digits", "--model", "digits-mlp", "--quiet")


def _train_and_report(cli, out: str, *runs: tuple[str, ...]) -> dict:
    for argv in runs:
        code, _, err = cli.run("train", *argv, *_TINY, "--out", out)
        assert code == 0, err
    code, stdout, err = cli.run("report", out, "--json")
    assert code == 0, err
    payload = json.loads(stdout)
    for page in (Path(p) for kind in ("models", "dssgd") for p in payload[kind]):
        text = page.read_text(encoding="utf-8")
        assert 'class="verdict verdict-' in text and "> **Verdict — " in page.with_suffix(".md").read_text(
            encoding="utf-8"
        )
        assert ">inf<" not in text and ">nan<" not in text.lower() and ">None<" not in text
    return payload


def test_a_training_and_a_federation_render_with_a_verdict_on_every_page(cli, tmp_path: Path) -> None:
    payload = _train_and_report(
        cli,
        str(tmp_path / "run"),
        ("--defense", "nonprivate", "--epochs", "1"),
        ("--defense", "dssgd", "--participants", "3", "--rounds", "2", "--upload-fraction", "0.1", "--no-baselines"),
    )
    # The federation's record has its own page, not a second, trained-model one.
    (model,), (federation,) = payload["models"], payload["dssgd"]
    page = Path(model).read_text(encoding="utf-8")
    assert (
        "nonprivate" in Path(model).name
        and 'class="verdict verdict-warn"' in page
        and "no privacy claim (ε = ∞)" in page
    )
    fed = Path(federation).read_text(encoding="utf-8")
    assert (
        "3 participants, 2 rounds: the federation reaches" in fed
        and "no DP guarantee" in fed
        and "the baselines were not trained" in fed
    )


@pytest.mark.extended
def test_a_dpsgd_training_renders_its_claim(cli, tmp_path: Path) -> None:
    payload = _train_and_report(
        cli, str(tmp_path / "run"), ("--defense", "dpsgd", "--epochs", "1", "--noise-multiplier", "1.1")
    )
    page = Path(payload["models"][0]).read_text(encoding="utf-8")
    assert (
        'class="verdict verdict-info"' in page
        and ">private<" in page
        and "claims ε_UB = " in page
        and "the tightest of" in page
    )
