"""One table of assertions over every registered model-inversion attack (docs/architecture.md, "Tests").

Every attack in :data:`attacks.inversion.INVERSION_ATTACKS` must: return one reconstruction per
class of the input's shape, float32 in [0, 1]; be deterministic under a seed; leave the target
(and a prior) exactly as found; and give a result that the evaluator judges and that survives a
save/load round trip. A new attack must add a fast configuration to ``FAST``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from attacks.inversion import INVERSION_ATTACKS
from attacks.inversion.base import InversionOutput
from attacks.inversion.evaluate import EvaluatorConfig, LabelledImages, evaluate_reconstructions, train_evaluator
from dpaudit.results import load_inversion_result, save_inversion_result

SHAPE = (1, 8, 8)
CLASSES = 4

#: A configuration per attack that runs in well under a second on 8×8 inputs.
FAST: dict[str, dict[str, object]] = {
    "mi-face": {"max_iterations": 25, "step_size": 0.5, "restarts": 2},
    "gmi": {"gmi_iterations": 15, "restarts": 2},
}
#: Prior training options that run in a second or two.
FAST_PRIOR: dict[str, dict[str, object]] = {"gan": {"gan_epochs": 1}}


def test_every_attack_has_a_fast_configuration() -> None:
    assert set(INVERSION_ATTACKS) <= set(FAST), "add a fast configuration for the new attack to FAST"


def _target(seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, CLASSES))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def _images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % CLASSES
    # Class k is a bright k-th quadrant: structure an evaluator can learn in a few epochs.
    x = 0.2 * torch.rand((n, *SHAPE), generator=gen)
    for i, k in enumerate(labels.tolist()):
        r, c = divmod(k, 2)
        x[i, 0, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] += 0.7
    return x.clamp(0, 1), labels


@pytest.fixture(scope="module")
def priors() -> dict[str, dict[str, nn.Module]]:
    out = {}
    for spec in INVERSION_ATTACKS.values():
        if spec.prior is not None and spec.prior.name not in out:
            public, _ = _images(64, seed=9)
            config = spec.prior.config_type(**FAST_PRIOR.get(spec.prior.name, {}))
            out[spec.prior.name] = dict(
                spec.prior.train(public, input_shape=SHAPE, config=config, seed=0, device="cpu")
            )
    return out


def _run(name: str, model: nn.Module, priors: dict[str, dict[str, nn.Module]], seed: int = 3) -> InversionOutput:
    spec = INVERSION_ATTACKS[name]
    config = spec.config_type(**FAST[name])
    prior = priors[spec.prior.name] if spec.prior is not None else None
    return spec.run(model, classes=[0, 1, 2, 3], input_shape=SHAPE, config=config, seed=seed, device="cpu", prior=prior)


def _state(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: t.detach().clone() for k, t in m.state_dict().items()}


@pytest.mark.parametrize("name", sorted(INVERSION_ATTACKS))
def test_shape_range_and_confidence(name: str, priors) -> None:
    out = _run(name, _target(), priors)
    assert isinstance(out, InversionOutput)
    assert out.classes.tolist() == [0, 1, 2, 3]
    assert out.reconstructions.shape == (CLASSES, *SHAPE) and out.reconstructions.dtype == np.float32
    assert out.reconstructions.min() >= 0.0 and out.reconstructions.max() <= 1.0
    assert out.target_confidence.shape == (CLASSES,)
    # The kept reconstruction's confidence is the target's own verdict on it.
    with torch.no_grad():
        p = torch.softmax(_target()(torch.from_numpy(np.array(out.reconstructions))).double(), 1)[
            torch.arange(CLASSES), torch.arange(CLASSES)
        ]
    np.testing.assert_allclose(out.target_confidence, p.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", sorted(INVERSION_ATTACKS))
def test_deterministic_under_a_seed(name: str, priors) -> None:
    a, b = _run(name, _target(), priors, seed=5), _run(name, _target(), priors, seed=5)
    np.testing.assert_array_equal(a.reconstructions, b.reconstructions)


@pytest.mark.parametrize("name", sorted(INVERSION_ATTACKS))
def test_target_and_prior_left_as_found(name: str, priors) -> None:
    model = _target()
    model.train()
    before = _state(model)
    prior_states = {p: {k: _state(m) for k, m in mods.items()} for p, mods in priors.items()}
    prior_modes = {p: {k: m.training for k, m in mods.items()} for p, mods in priors.items()}
    _run(name, model, priors)
    assert model.training and all(m.training for m in model.modules())
    for k, t in model.state_dict().items():
        torch.testing.assert_close(t, before[k], rtol=0, atol=0)
    assert all(p.grad is None for p in model.parameters())
    for p, mods in priors.items():
        for k, m in mods.items():
            assert m.training == prior_modes[p][k]
            for key, t in m.state_dict().items():
                torch.testing.assert_close(t, prior_states[p][k][key], rtol=0, atol=0)
            assert all(q.grad is None for q in m.parameters())


@pytest.fixture(scope="module")
def judged() -> dict[str, object]:
    xm, ym = _images(80, seed=1)
    xn, yn = _images(40, seed=2)
    members = LabelledImages(features=xm, labels=ym, ids=np.arange(80))
    non = LabelledImages(features=xn, labels=yn, ids=np.arange(80, 120))
    evaluator = train_evaluator(
        members, num_classes=CLASSES, config=EvaluatorConfig(evaluator_epochs=5, evaluator_width=8), seed=0
    )
    return {"members": members, "non": non, "evaluator": evaluator}


@pytest.mark.parametrize("name", sorted(INVERSION_ATTACKS))
def test_result_is_judged_and_round_trips(name: str, priors, judged, tmp_path) -> None:
    out = _run(name, _target(), priors)
    result = evaluate_reconstructions(
        out,
        attack=name,
        model_id="toy",
        evaluator=judged["evaluator"],
        members=judged["members"],
        non_members=judged["non"],
        config={"attack": dataclasses.asdict(INVERSION_ATTACKS[name].config_type(**FAST[name]))},
        metadata={"seconds": 0.1},
    )
    assert result.reconstructions.shape == (CLASSES, *SHAPE)
    assert result.membership.num_members == 80 and result.membership.num_non_members == 40
    # Nearest-member / non-member ids are members / non-members of the right class.
    assert set(result.nearest_member_ids.tolist()) <= set(range(80))
    assert set(result.nearest_non_member_ids.tolist()) <= set(range(80, 120))
    assert np.all(result.distance_to_member <= result.distance_to_mean + 1.0)
    path = save_inversion_result(result, tmp_path)
    assert path.name == f"inversion-{name}.json"
    assert load_inversion_result(path) == result
