"""MI-Face (Fredrikson et al. 2015, Alg. 1): optimum, stopping rules, batching, contract."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from attacks.inversion.mi_face import MIFaceConfig, MIFaceOutput, mi_face


def _cfg(**kw: object) -> MIFaceConfig:
    """Algorithm 1 to the letter (black start, steps on 1 − p, stop once not improved at all) unless told otherwise."""
    return MIFaceConfig(**{"start_value": 0.0, "descend_on": "cost", "tolerance": 0.0, **kw})  # type: ignore[arg-type]


def _linear(weight: list[list[float]]) -> nn.Module:
    w = torch.tensor(weight, dtype=torch.float32)
    model = nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        model.weight.copy_(w)
    return model


# Class k's logit is 5·(2·x_k − Σx): its confidence is maximised at the corner e_k of [0,1]^4.
W4 = (5.0 * (2.0 * np.eye(4) - 1.0)).tolist()


class _Counting(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls = 0
        self.batch_sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.batch_sizes.append(int(x.shape[0]))
        return self.inner(x)


class _Flat(nn.Module):
    """Logits that ignore the input (with a parameter so the graph has a gradient path)."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias.expand(x.shape[0], -1) + 0.0 * x.reshape(x.shape[0], -1).sum(1, keepdim=True)


def test_reaches_the_known_optimum_corner_for_every_class() -> None:
    cfg = _cfg(max_iterations=2000, step_size=1.0, patience=50, cost_threshold=0.0)
    out = mi_face(_linear(W4), classes=[0, 1, 2, 3], input_shape=(4,), config=cfg, seed=0)
    assert isinstance(out, MIFaceOutput)
    np.testing.assert_allclose(out.reconstructions, np.eye(4, dtype=np.float32), atol=1e-3)
    assert np.all(out.costs < 1e-3)


def test_threshold_stop_uses_cost_at_most_gamma() -> None:
    # γ = 1 is met by any cost, so every class stops after its first step with "threshold";
    # the reversed test (stop when cost ≥ γ) would never stop here.
    cfg = _cfg(max_iterations=500, step_size=0.1, patience=100, cost_threshold=1.0)
    out = mi_face(_linear(W4), classes=[0, 1, 2, 3], input_shape=(4,), config=cfg, seed=0)
    assert out.stop_reasons == ("threshold",) * 4
    assert out.iterations.tolist() == [1, 1, 1, 1]
    # A small γ is reached only once confident (the reversed test would stop at step 1).
    cfg = _cfg(max_iterations=5000, step_size=0.05, patience=1000, cost_threshold=0.05)
    out = mi_face(_linear(W4), classes=[2], input_shape=(4,), config=cfg, seed=0)
    assert out.stop_reasons == ("threshold",)
    assert out.costs[0] <= 0.05 and out.iterations[0] > 1


def test_patience_stop_on_a_flat_cost() -> None:
    cfg = _cfg(max_iterations=1000, step_size=0.5, patience=7, cost_threshold=0.0)
    out = mi_face(_Flat(), classes=[0, 2], input_shape=(2, 3), config=cfg, seed=0)
    assert out.stop_reasons == ("patience", "patience")
    assert out.iterations.tolist() == [7, 7]
    np.testing.assert_allclose(out.costs, 2.0 / 3.0)


def test_max_iterations_stop() -> None:
    cfg = _cfg(max_iterations=5, step_size=0.01, patience=100, cost_threshold=0.0)
    out = mi_face(_linear(W4), classes=[1, 3], input_shape=(4,), config=cfg, seed=0)
    assert out.stop_reasons == ("max_iterations", "max_iterations")
    assert out.iterations.tolist() == [5, 5]


def test_per_class_stopping_is_independent() -> None:
    # Class 0 is confident from the start (large bias), class 1 must descend.
    model = _linear(W4[:2])
    model.bias = nn.Parameter(torch.tensor([30.0, 0.0]))
    cfg = _cfg(max_iterations=50, step_size=0.01, patience=100, cost_threshold=1e-6)
    out = mi_face(model, classes=[0, 1], input_shape=(4,), config=cfg, seed=0)
    assert out.stop_reasons[0] == "threshold" and out.iterations[0] == 1
    assert out.stop_reasons[1] == "max_iterations" and out.iterations[1] == 50


@pytest.mark.parametrize("process", ["none", "denoise", "sharpen"])
def test_range_shape_dtype_and_read_only(process: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(1 * 6 * 5, 4))
    cfg = _cfg(max_iterations=30, step_size=50.0, patience=100, cost_threshold=0.0, process=process)
    out = mi_face(model, classes=[3, 0, 1], input_shape=(1, 6, 5), config=cfg, seed=1)
    r = out.reconstructions
    assert r.shape == (3, 1, 6, 5) and r.dtype == np.float32
    assert r.min() >= 0.0 and r.max() <= 1.0
    assert out.classes.tolist() == [3, 0, 1] and len(out.stop_reasons) == 3
    with pytest.raises(ValueError):
        r[0, 0, 0, 0] = 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.costs = np.zeros(3)  # type: ignore[misc]


def test_deterministic_under_a_seed_and_seed_drives_random_start() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    cfg = _cfg(max_iterations=20, step_size=1.0, patience=100, cost_threshold=0.0, start_value=None)
    a = mi_face(model, classes=[0, 1, 2], input_shape=(4, 4), config=cfg, seed=5)
    b = mi_face(model, classes=[0, 1, 2], input_shape=(4, 4), config=cfg, seed=5)
    c = mi_face(model, classes=[0, 1, 2], input_shape=(4, 4), config=cfg, seed=6)
    np.testing.assert_array_equal(a.reconstructions, b.reconstructions)
    np.testing.assert_array_equal(a.costs, b.costs)
    assert a.stop_reasons == b.stop_reasons
    assert not np.array_equal(a.reconstructions, c.reconstructions)


def test_start_image_is_used() -> None:
    cfg = _cfg(max_iterations=1, step_size=1e-9, patience=10, cost_threshold=0.0)
    start = np.full((4,), 0.25, dtype=np.float32)
    out = mi_face(_linear(W4), classes=[0], input_shape=(4,), config=cfg, seed=0, start=start)
    np.testing.assert_allclose(out.reconstructions[0], start, atol=1e-6)


def test_model_not_mutated() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Dropout(0.5), nn.BatchNorm1d(8), nn.Linear(8, 3))
    model.train()
    model[2].eval()  # a mixed per-module state must come back exactly
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [m.training for m in model.modules()]
    cfg = _cfg(max_iterations=10, step_size=1.0, patience=100, cost_threshold=0.0)
    mi_face(model, classes=[0, 1, 2], input_shape=(1, 4, 4), config=cfg, seed=0)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [m.training for m in model.modules()] == flags
    assert all(p.grad is None for p in model.parameters())


def test_eval_mode_during_attack() -> None:
    seen: list[bool] = []

    class Spy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(self.training)
            return self.lin(x)

    model = Spy().train()
    mi_face(model, classes=[0, 1], input_shape=(4,), config=_cfg(max_iterations=3), seed=0)
    assert seen and not any(seen)
    assert model.training


def test_one_batched_forward_per_iteration() -> None:
    wrapped = _Counting(_linear(W4))
    cfg = _cfg(max_iterations=12, step_size=0.01, patience=100, cost_threshold=0.0)
    out = mi_face(wrapped, classes=[0, 1, 2, 3], input_shape=(4,), config=cfg, seed=0)
    assert out.iterations.tolist() == [12] * 4
    # One forward for the start plus one per iteration, each over all four classes at once.
    assert wrapped.calls == 12 + 1
    assert set(wrapped.batch_sizes) == {4}


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_iterations": 0}, "max_iterations"),
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": float("nan")}, "step_size"),
        ({"patience": 0}, "patience"),
        ({"cost_threshold": 1.5}, "cost_threshold"),
        ({"cost_threshold": -0.1}, "cost_threshold"),
        ({"process": "blur"}, "process"),
        ({"start_value": 2.0}, "start_value"),
        ({"tolerance": -0.01}, "tolerance"),
        ({"tolerance": 1.0}, "tolerance"),
        ({"tolerance": float("nan")}, "tolerance"),
        ({"tolerance": True}, "tolerance"),
        ({"tolerance": "0.1"}, "tolerance"),
    ],
)
def test_bad_config_raises_naming_the_field(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _cfg(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"classes": []}, "classes"),
        ({"classes": [0, 0]}, "classes"),
        ({"classes": [-1]}, "classes"),
        ({"classes": [7]}, "classes"),
        ({"classes": [0.5]}, "classes"),
        ({"input_shape": ()}, "input_shape"),
        ({"input_shape": (0,)}, "input_shape"),
        ({"input_shape": (4,), "config": _cfg(process="denoise")}, "input_shape"),
        ({"config": {"max_iterations": 3}}, "config"),
        ({"seed": "x"}, "seed"),
        ({"start": np.zeros(3)}, "start"),
        ({"start": np.full(4, 2.0)}, "start"),
    ],
)
def test_bad_arguments_raise_naming_them(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {
        "classes": [0],
        "input_shape": (4,),
        "config": _cfg(max_iterations=2),
        "seed": 0,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        mi_face(_linear(W4), **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model"):
        mi_face("not a model", classes=[0], input_shape=(4,), config=_cfg(), seed=0)  # type: ignore[arg-type]


def test_log_probability_descent_moves_classes_the_cost_gradient_cannot() -> None:
    # From the black start, class 3 has p ~ e^-12: ∇(1 − p) is ~0 and the paper's step barely
    # moves it; ∇(−log p) has the same direction with a usable length and reaches the optimum
    # (the corner e_3, where p_3 ~ 1).
    model = _linear((4 * np.asarray(W4)).tolist())
    model.bias = nn.Parameter(torch.tensor([12.0, 0.0, 0.0, 0.0]))
    base = {"max_iterations": 300, "step_size": 0.05, "patience": 300, "cost_threshold": 0.0}
    stuck = mi_face(model, classes=[3], input_shape=(4,), config=_cfg(**base), seed=0)
    moved = mi_face(model, classes=[3], input_shape=(4,), config=_cfg(**base, descend_on="log-probability"), seed=0)
    assert stuck.costs[0] > 0.999
    assert moved.costs[0] < 0.01
    np.testing.assert_allclose(moved.reconstructions[0], [0, 0, 0, 1], atol=1e-3)


def test_restarts_keep_the_lowest_cost_per_class() -> None:
    from attacks.inversion.mi_face import run_mi_face

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    cfg = MIFaceConfig(max_iterations=5, step_size=0.5, patience=100, cost_threshold=0.0, restarts=3)
    out = run_mi_face(model, classes=[0, 1, 2], input_shape=(1, 4, 4), config=cfg, seed=2)
    costs = np.asarray(out.details["restart_cost"])
    assert costs.shape == (3, 3)
    np.testing.assert_array_equal(out.details["best_restart"], costs.argmin(axis=1))
    np.testing.assert_allclose(out.target_confidence, 1.0 - costs.min(axis=1))
    again = run_mi_face(model, classes=[0, 1, 2], input_shape=(1, 4, 4), config=cfg, seed=2)
    np.testing.assert_array_equal(out.reconstructions, again.reconstructions)


def test_config_rejects_unknown_descent() -> None:
    with pytest.raises(ValueError, match="descend_on"):
        MIFaceConfig(descend_on="newton")


# ----------------------------------------------------------------------------- time budget and progress (issue 30, item
# 5)
def test_default_iterations_are_capped_to_the_time_budget() -> None:
    from attacks.inversion.mi_face import DEFAULT_ITERATIONS, SEARCH_SECONDS, plan_iterations

    assert MIFaceConfig().max_iterations is None  # the default is "the paper's 10,000, if they fit"
    steps, note = plan_iterations(MIFaceConfig(), seconds_per_step=0.0005, num_classes=2)
    assert steps == DEFAULT_ITERATIONS and note is None  # 5 s: short, nothing to say
    steps, note = plan_iterations(MIFaceConfig(), seconds_per_step=0.5, num_classes=2)
    assert steps == int(SEARCH_SECONDS / 0.5) == 360
    assert (
        note == "mi-face: one step over 2 classes takes 500 ms here, so the default "
        "10,000 steps are capped at 360 (at most 3.0 min); "
        "pass --max-iterations to choose"
    )
    # One step is a batched pass over all classes: more classes do not buy more time (a budget
    # per class once let the 40 ORL faces run for up to 80 minutes).
    assert plan_iterations(MIFaceConfig(), seconds_per_step=0.5, num_classes=40)[0] == 360
    steps, _ = plan_iterations(MIFaceConfig(restarts=4), seconds_per_step=0.5, num_classes=2)
    assert steps == 90  # restarts share the budget
    steps, note = plan_iterations(MIFaceConfig(max_iterations=10_000), seconds_per_step=0.5, num_classes=2)
    assert steps == 10_000 and note is not None and "83.3 min" in note  # explicit: kept, with its estimate


def test_run_reports_progress_and_stores_the_cap(monkeypatch, capsys) -> None:
    from attacks.inversion import mi_face as mod

    monkeypatch.setattr(mod, "_seconds_per_step", lambda *a, **k: 20.0)  # a slow model: 9 steps fit 3 min
    seen: list[tuple[int, int]] = []
    cfg = MIFaceConfig(step_size=0.5, patience=1000, cost_threshold=0.0, restarts=2)
    out = mod.run_mi_face(
        _Flat(), classes=[0, 1], input_shape=(1, 4, 4), config=cfg, seed=0, progress=lambda d, t: seen.append((d, t))
    )
    assert out.details["max_iterations"] == 4 and max(max(i) for i in out.details["iterations"]) == 4
    # Progress counts classes stopped out of 2 classes x 2 restarts, reported at every step
    # (4 a restart) and once as each restart ends.
    assert len(seen) == 2 * (4 + 1) and all(t == 4 for _, t in seen)
    assert [d for d, _ in seen] == [0] * 3 + [2, 2] + [2] * 3 + [4, 4]
    assert "capped at 4" in capsys.readouterr().err


def _reference_stop(model: nn.Module, label: int, *, cfg: MIFaceConfig, dim: int) -> tuple[int, str]:
    """The convergence rule written out plainly: descend −log p, track the best −log p, compare β steps back."""
    x = torch.full((1, dim), float(cfg.start_value))
    with torch.no_grad():
        best = [-math.log(float(torch.softmax(model(x).double(), 1)[0, label]))]
    for i in range(1, cfg.max_iterations + 1):
        xs = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(-torch.log_softmax(model(xs).double(), 1)[0, label], xs)
        x = (x - cfg.step_size * g.float()).clamp(0.0, 1.0)
        with torch.no_grad():
            p = float(torch.softmax(model(x).double(), 1)[0, label])
        cost = 1.0 - p
        best.append(min(best[-1], -math.log(p)))
        if cost <= cfg.cost_threshold:
            return i, "threshold"
        if i >= cfg.patience and best[i - cfg.patience] - best[i] <= cfg.tolerance * best[i - cfg.patience]:
            return i, "patience"
    return cfg.max_iterations, "max_iterations"


@pytest.mark.extended
def test_convergence_rule_stops_a_creeping_class_where_a_plain_loop_says() -> None:
    # A softmax whose best input is a corner far from the grey start: −log p descent keeps
    # improving the cost a little at every step, so τ = 0 never stops it, and τ > 0 stops it
    # at the first step whose last β steps gained at most τ of the best cost β steps back.
    torch.manual_seed(3)
    model = nn.Linear(6, 3)
    with torch.no_grad():
        model.weight.mul_(0.5)
    base = {"max_iterations": 600, "step_size": 0.02, "patience": 20, "cost_threshold": 0.0, "start_value": 0.5}
    for tolerance in (0.0, 0.001, 0.01, 0.05):
        cfg = MIFaceConfig(**base, tolerance=tolerance)  # type: ignore[arg-type]
        out = mi_face(model, classes=[0, 1, 2], input_shape=(6,), config=cfg, seed=0)
        expected = [_reference_stop(model, c, cfg=cfg, dim=6) for c in (0, 1, 2)]
        assert out.iterations.tolist() == [e[0] for e in expected], tolerance
        assert list(out.stop_reasons) == [e[1] for e in expected], tolerance
    plain = mi_face(model, classes=[0, 1, 2], input_shape=(6,), config=MIFaceConfig(**base, tolerance=0.0), seed=0)  # type: ignore[arg-type]
    assert plain.stop_reasons == ("max_iterations",) * 3  # still improving: the paper's rule never stops it
    loose = mi_face(model, classes=[0, 1, 2], input_shape=(6,), config=MIFaceConfig(**base, tolerance=0.05), seed=0)  # type: ignore[arg-type]
    assert set(loose.stop_reasons) == {"patience"} and loose.iterations.max() < 600
