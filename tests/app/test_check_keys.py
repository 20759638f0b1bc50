"""``dpaudit check`` reuses stored trials only under the key ``audit`` uses (issue 43, item 1).

Before it, the battery keyed its trials by the train file's fingerprint alone: an edited
``--model-fn`` file or new dataset files got "reusing 100 stored trials", while an edited helper
module or another ``--seed`` was refused with "choose another --name or --out" (a flag ``check``
does not have). Now each of them starts afresh and says why on one line, as ``audit`` does.

The training function is the cheapest there is: it returns the crafted start unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpaudit.api import BatterySpec, RunDir, dpsgd_claim, run_check
from dpaudit.data import clear_cache

CLAIM = dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50)

TRAIN = """\
import helper
from model import model


def train(dataset, *, seed, initial_state=None):
    net = model()
    net.load_state_dict(initial_state)
    return helper.finish(net)
"""
HELPER = "def finish(net):\n    return net{extra}\n"
MODEL = (
    "import torch.nn as nn\n\n\ndef model():\n    return nn.Sequential(nn.Flatten(), nn.Linear({inputs}, 10)){extra}\n"
)


def _code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, inputs: int = 64) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    (code / "helper.py").write_text(HELPER.format(extra=""))
    (code / "model.py").write_text(MODEL.format(inputs=inputs, extra=""))
    monkeypatch.syspath_prepend(str(code))  # helper.py and model.py importable, as with PYTHONPATH=.
    return code


def _forget(*names: str) -> None:
    """A new process would import the edited files; this one has the old ones loaded."""
    for name in names:
        sys.modules.pop(name, None)


def _run(code: Path, out: Path, capsys: pytest.CaptureFixture[str], **over: object) -> str:
    base: dict[str, object] = dict(
        train_fn=f"{code}/train.py:train",
        model_fn=f"{code}/model.py:model",
        claim=CLAIM,
        checks=("worst-case",),
        trials=4,
    )
    base.update(over)
    capsys.readouterr()
    report = run_check(BatterySpec(**base), RunDir(out), progress=True)
    assert report.outcomes[0].num_trials == 4 and not report.outcomes[0].details.failed
    return capsys.readouterr().err


@pytest.mark.extended
def test_a_model_file_a_helper_or_the_seed_changed_recomputes_and_says_why(tmp_path, monkeypatch, capsys):
    code, out = _code(tmp_path, monkeypatch), tmp_path / "run"
    first = _run(code, out, capsys)
    assert "recomputing" not in first and "reusing" not in first
    again = _run(code, out, capsys)
    assert "reusing 4 stored trials" in again and "recomputing" not in again

    (code / "model.py").write_text(MODEL.format(inputs=64, extra="  # edited"))
    _forget("model")
    err = _run(code, out, capsys)
    assert "reusing" not in err, err
    # train.py imports model.py, and model.py is --model-fn's own source: both keys name it.
    assert (
        "recomputing: model.py changed; model.py (or the version of a package "
        "it imports) changed since the stored trials in " in err
    ), err
    assert err.count("recomputing:") == 1

    (code / "helper.py").write_text(HELPER.format(extra="  # edited"))
    _forget("helper")
    err = _run(code, out, capsys)
    assert "reusing" not in err and "recomputing: helper.py changed since the stored trials in " in err, err

    err = _run(code, out, capsys, seed=1)
    assert "reusing" not in err and "choose another" not in err
    assert "recomputing: seed 0 -> 1 since the stored trials in " in err, err


@pytest.mark.slow  # ~4 s on two idle cores: a fake MNIST root, loaded and keyed twice
@pytest.mark.usefixtures("no_data_root")  # tests/conftest.py
def test_new_dataset_files_recompute_and_say_which(tmp_path, monkeypatch, capsys):
    from tests.hostile.test_data_root import write_md5sums, write_mnist

    code, out, root = _code(tmp_path, monkeypatch, inputs=784), tmp_path / "run", tmp_path / "root"
    folder = write_mnist(root)
    write_md5sums(folder)
    _run(code, out, capsys, dataset="mnist", data_root=str(root))
    other = write_mnist(tmp_path / "other", seed=2)  # other labels for the same images
    (folder / "train-labels-idx1-ubyte.gz").write_bytes((other / "train-labels-idx1-ubyte.gz").read_bytes())
    write_md5sums(folder)
    clear_cache()  # each command is a new process
    err = _run(code, out, capsys, dataset="mnist", data_root=str(root))
    assert "reusing" not in err, err
    assert (
        "recomputing: dataset mnist's files changed (mnist/train-labels-idx1-ubyte.gz) since the stored trials in "
        in err
    ), err
