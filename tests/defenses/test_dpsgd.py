"""DP-SGD (Abadi et al. 2016, Algorithm 1) and its clipping engine.

Reference implementations (a per-example loop) for the vectorised clipping, statistical tests
for the sampling and the noise, and end-to-end runs on the offline 8×8 digits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

import defenses.clipping as clipping
from defenses import DEFENSES
from defenses.clipping import GradientClipper, clip_gradient, per_example_loss
from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.pca import dp_pca
from defenses.dpsgd.plan import learning_rate_at, plan_dpsgd
from defenses.dpsgd.training import parameter_names, poisson_lot, train_dpsgd
from dpaudit.data import load_dataset, make_splits
from dpaudit.layers import Projection
from dpaudit.privacy.claims import DPClaim, dpsgd_claim
from dpaudit.privacy.events import sampled_gaussian_event
from dpaudit.train_request import TrainRequest

# ----------------------------------------------------------------------------- clipping


def _naive_clipped_sum(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip_norm: float, groups=None, norms=None):
    params = dict(model.named_parameters())
    total = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in params.items()}
    for i in range(len(x)):
        model.zero_grad()
        per_example_loss(model(x[i : i + 1]), y[i : i + 1]).sum().backward()
        g = {n: p.grad.detach().double().clone() for n, p in params.items()}
        if groups is None:
            norm = math.sqrt(sum(float(t.pow(2).sum()) for t in g.values()))
            for n in g:
                total[n] += min(1.0, clip_norm / norm) * g[n]
        else:
            for names, c in zip(groups, norms):
                norm = math.sqrt(sum(float(g[n].pow(2).sum()) for n in names))
                for n in names:
                    total[n] += min(1.0, c / norm) * g[n]
    model.zero_grad()
    return total


class _Sequence(nn.Module):
    """A Linear applied at T = 4 positions per example (exercises the Gram / dense choice)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(6, 5)
        self.out = nn.Linear(20, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.inner(x.view(-1, 4, 6))).flatten(1))


class _Reuse(nn.Module):
    """One Linear called twice per forward (weights shared across calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(24, 24)
        self.out = nn.Linear(24, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.shared(torch.tanh(self.shared(x)))))


def _model(kind: str) -> tuple[nn.Module, tuple[int, ...]]:
    torch.manual_seed(0)
    if kind == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(24, 7), nn.ReLU(), nn.Linear(7, 3)), (24,)
    if kind == "conv":
        return nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 3, stride=2), nn.Flatten(), nn.Linear(27, 3)
        ), (2, 7, 7)
    if kind == "groupnorm":
        return (
            nn.Sequential(
                nn.Conv2d(2, 4, 3, padding="same", padding_mode="reflect"),
                nn.GroupNorm(2, 4),
                nn.ReLU(),
                nn.Conv2d(4, 4, 3, groups=2),
                nn.Flatten(),
                nn.Linear(64, 3),
            ),
            (2, 6, 6),
        )
    if kind == "sequence":
        return _Sequence(), (24,)
    if kind == "reuse":
        return _Reuse(), (24,)
    raise AssertionError(kind)


def _check_against_loop(kind: str, method: str, per_layer: bool) -> None:
    model, shape = _model(kind)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, *shape, generator=gen)
    y = torch.randint(0, 3, (7,), generator=gen)
    clip = 0.3  # small enough that most examples are clipped, so the factors matter
    with GradientClipper(model, clip_norm=clip, per_layer=per_layer, method=method) as clipper:
        res = clipper.clipped_sum(x, y)
        groups = [[clipper._full(layer, n) for n in layer.params] for layer in clipper.layers] if per_layer else None
        expected = _naive_clipped_sum(model, x, y, clip, groups, clipper.layer_clip_norms)
    assert set(res.grads) == set(expected)
    for name, ref in expected.items():
        torch.testing.assert_close(res.grads[name].double(), ref, rtol=1e-4, atol=1e-6, msg=f"{kind} {method} {name}")
    assert res.norms.shape == (7,)
    assert res.batch_size == 7


@pytest.mark.parametrize("kind", ["linear", "conv", "groupnorm", "sequence", "reuse"])
@pytest.mark.parametrize("method", ["hooks", "vmap"])
@pytest.mark.parametrize("per_layer", [False, True], ids=["flat", "per_layer"])
def test_clipped_sum_matches_per_example_loop(kind: str, method: str, per_layer: bool) -> None:
    _check_against_loop(kind, method, per_layer)


@pytest.mark.parametrize("kind", ["conv", "groupnorm", "sequence", "reuse"])
@pytest.mark.parametrize("gram", [True, False], ids=["gram", "materialised"])
def test_gram_and_materialised_norms_agree_with_loop(kind: str, gram: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both ways of getting per-example norms of a layer applied at T > 1 positions.
    monkeypatch.setattr(clipping, "_use_gram", lambda t, d, p: gram)
    _check_against_loop(kind, "hooks", per_layer=False)


def test_hooks_path_uses_book_keeping_for_linear_and_conv() -> None:
    model, _ = _model("groupnorm")
    with GradientClipper(model, clip_norm=1.0) as clipper:
        kinds = [layer.kind for layer in clipper.layers]
    assert kinds == ["conv2d", "generic", "conv2d", "linear"]  # GroupNorm via torch.func


def test_per_layer_sensitivity_is_total_clip_norm() -> None:
    model, _ = _model("conv")
    with GradientClipper(model, clip_norm=2.0, per_layer=True) as clipper:
        assert len(clipper.layer_clip_norms) == 3
        assert clipper.layer_clip_norms[0] == pytest.approx(2.0 / math.sqrt(3))
        assert clipper.sensitivity == pytest.approx(2.0)


def test_empty_batch_gives_zero_sum() -> None:
    model, shape = _model("linear")
    with GradientClipper(model, clip_norm=1.0) as clipper:
        res = clipper.clipped_sum(torch.zeros(0, *shape), torch.zeros(0, dtype=torch.long))
    assert all(float(t.abs().sum()) == 0 for t in res.grads.values())


def test_inplace_modified_output_is_refused() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    with GradientClipper(model, clip_norm=1.0) as clipper, pytest.raises(RuntimeError, match="in place"):
        clipper.clipped_sum(torch.randn(3, 4), torch.tensor([0, 1, 0]))


def test_batchnorm_is_refused() -> None:
    with pytest.raises(ValueError, match="BatchNorm"):
        GradientClipper(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)), clip_norm=1.0)


def test_clip_gradient_bounds_the_norm() -> None:
    g = {"a": torch.full((3,), 4.0), "b": torch.full((2,), 3.0)}
    out = clip_gradient(g, clip_norm=1.0)
    assert float(torch.sqrt(sum(t.pow(2).sum() for t in out.values()))) == pytest.approx(1.0)
    small = clip_gradient({"a": torch.tensor([0.1])}, clip_norm=1.0)
    assert float(small["a"]) == pytest.approx(0.1)


# ----------------------------------------------------------------------------- sampling


def test_poisson_lots_follow_binomial_statistics() -> None:
    n, q, draws = 800, 0.05, 2000
    gen = torch.Generator().manual_seed(123)
    counts = np.zeros(n)
    sizes = np.zeros(draws)
    for t in range(draws):
        lot = poisson_lot(n, q, generator=gen).numpy()
        assert np.unique(lot).size == lot.size  # no example twice in a lot
        counts[lot] += 1
        sizes[t] = lot.size
    # Lot sizes are Binomial(n, q): mean and variance within generous z-bounds.
    mean, var = n * q, n * q * (1 - q)
    assert abs(sizes.mean() - mean) < 5 * math.sqrt(var / draws)
    assert 0.85 * var < sizes.var() < 1.15 * var
    # Per-example inclusion counts are Binomial(draws, q): chi-square goodness of fit.
    chi2 = float(((counts - draws * q) ** 2 / (draws * q * (1 - q))).sum())
    p_value = stats.chi2.sf(chi2, df=n)
    assert 1e-4 < p_value < 1 - 1e-4


# ----------------------------------------------------------------------------- end to end on digits


@pytest.fixture(scope="module")
def digits():
    bundle = load_dataset("digits")
    return bundle, make_splits(bundle, seed=0)


def _small(**kw) -> DPSGDConfig:
    base = dict(noise_multiplier=1.0, clip_norm=1.0, lot_size=60, epochs=2, learning_rate=0.5, accountant="rdp")
    base.update(kw)
    return DPSGDConfig(**base)


def test_registered_in_defenses() -> None:
    spec = DEFENSES["dpsgd"]
    assert spec.config_type is DPSGDConfig and spec.train is train_dpsgd


def test_claim_counts_the_steps_taken_and_lots_are_poisson(digits) -> None:
    bundle, splits = digits
    seen: list[tuple[int, int]] = []
    cfg = _small(momentum=0.5)
    record, model = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=3, progress=False),
        on_step=lambda i, update, lot: seen.append((i, lot)),
    )
    n = len(splits.members)
    steps = [i for i, _ in seen]
    assert steps == list(range(len(steps)))
    assert record.metrics["num_steps"] == len(steps) == plan_dpsgd(cfg, num_members=n).num_steps
    assert isinstance(record.claim, DPClaim)
    assert record.claim.event == sampled_gaussian_event(
        sampling_rate=60 / n, noise_multiplier=1.0, num_steps=len(steps)
    )
    assert record.claim.epsilon(delta=1e-5, accountant="rdp") == pytest.approx(record.metrics["epsilon"])
    sizes = np.array([lot for _, lot in seen])
    assert len(set(sizes.tolist())) > 1  # variable lot size
    assert abs(sizes.mean() - 60) < 5 * math.sqrt(60 / len(sizes))
    assert record.defense == "dpsgd" and record.metrics["test_accuracy"] > 0.3


def test_noise_has_std_sigma_c_per_coordinate(digits) -> None:
    # With an (almost surely) empty lot every step the released sum is pure noise.
    bundle, splits = digits
    updates: list[torch.Tensor] = []
    lots: list[int] = []
    for per_layer in (False, True):
        cfg = DPSGDConfig(
            noise_multiplier=2.5,
            clip_norm=0.8,
            lot_size=None,
            sampling_rate=1e-9,
            expected_lot_size=1.0,
            epochs=4e-9,
            learning_rate=1e-9,
            per_layer=per_layer,
            accountant="rdp",
        )

        def keep(i: int, update: dict[str, torch.Tensor], lot: int) -> None:
            updates.append(torch.cat([t.reshape(-1) for t in update.values()]))
            lots.append(lot)

        train_dpsgd(
            TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=5, progress=False),
            on_step=keep,
        )
    assert len(updates) == 8 and set(lots) == {0}
    noise = torch.cat(updates).double()
    expected = 2.5 * 0.8
    n = noise.numel()
    assert abs(float(noise.mean())) < 5 * expected / math.sqrt(n)
    assert float(noise.std()) == pytest.approx(expected, rel=5 * math.sqrt(0.5 / n) + 1e-3)
    # Gaussian shape: kurtosis ≈ 3.
    z = (noise - noise.mean()) / noise.std()
    assert float(z.pow(4).mean()) == pytest.approx(3.0, abs=0.1)


def test_gradient_canary_is_clipped_and_added_before_noise(digits) -> None:
    # Empty lots and the same seed: the two runs release the same noise, so their difference
    # is exactly what the canary added.
    bundle, splits = digits
    cfg = DPSGDConfig(
        noise_multiplier=1.0,
        clip_norm=0.5,
        lot_size=None,
        sampling_rate=1e-9,
        expected_lot_size=1.0,
        epochs=2e-9,
        learning_rate=1e-9,
        accountant="rdp",
    )
    runs: list[list[dict[str, torch.Tensor]]] = [[], []]
    for k, canary in enumerate((None, lambda step: None if step == 1 else torch.ones(4810) * 3.0)):
        record, model = train_dpsgd(
            TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=0, progress=False),
            on_step=lambda i, u, lot, k=k: runs[k].append(u),
            canary_gradient=canary,
        )
    names = parameter_names(model)
    assert sum(p.numel() for p in model.parameters()) == 4810  # digits-mlp: 64 → 64 tanh → 10
    diff = [torch.cat([(b[n] - a[n]).reshape(-1) for n in names]) for a, b in zip(*runs)]
    torch.testing.assert_close(diff[0], torch.full((4810,), 0.5 / math.sqrt(4810)), atol=1e-5, rtol=0)
    assert float(diff[1].abs().max()) == 0.0
    assert record.metrics["gradient_canary_steps"] == 1


def test_budget_mode_stops_at_target_without_overshooting(digits) -> None:
    bundle, splits = digits
    n = len(splits.members)
    cfg = _small(noise_multiplier=1.2, target_epsilon=1.5, epochs=None, delta=1e-5)
    record, _ = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=1, progress=False)
    )
    steps = record.metrics["num_steps"]
    q = 60 / n
    eps = record.claim.epsilon(delta=1e-5, accountant="rdp")
    one_more = dpsgd_claim(sampling_rate=q, noise_multiplier=1.2, num_steps=steps + 1).epsilon(
        delta=1e-5, accountant="rdp"
    )
    assert eps <= 1.5 < one_more
    assert record.metrics["epsilon"] == pytest.approx(eps)


def test_budget_mode_with_pca_counts_pca_and_stops_in_time() -> None:
    cfg = _small(noise_multiplier=1.2, target_epsilon=2.0, epochs=None, pca_components=10, pca_noise=8.0)
    plan = plan_dpsgd(cfg, num_members=898)
    from defenses.dpsgd.plan import run_claim

    def eps(t: int) -> float:
        return run_claim(cfg, sampling_rate=plan.sampling_rate, noise_multiplier=1.2, num_steps=t).epsilon(
            delta=1e-5, accountant="rdp"
        )

    assert eps(plan.num_steps) <= 2.0 < eps(plan.num_steps + 1)
    without = plan_dpsgd(_small(noise_multiplier=1.2, target_epsilon=2.0, epochs=None), num_members=898)
    assert plan.num_steps < without.num_steps  # PCA spends part of the budget


@pytest.mark.extended
def test_calibrated_sigma_meets_target(digits) -> None:
    cfg = _small(noise_multiplier=None, target_epsilon=3.0, epochs=3)
    plan = plan_dpsgd(cfg, num_members=898)
    eps = dpsgd_claim(
        sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=plan.num_steps
    ).epsilon(delta=1e-5, accountant="rdp")
    assert 2.9 < eps <= 3.0


@pytest.mark.extended
def test_dp_pca_cost_appears_in_claim(digits) -> None:
    bundle, splits = digits
    cfg = _small(pca_components=16, pca_noise=6.0, epochs=1)
    record, model = train_dpsgd(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="abadi-mnist",
            model_options={"hidden": 32},
            config=cfg,
            seed=2,
            progress=False,
        )
    )
    steps = record.metrics["num_steps"]
    plain = dpsgd_claim(sampling_rate=cfg.rate(len(splits.members)), noise_multiplier=1.0, num_steps=steps)
    for accountant in ("rdp", "pld"):
        assert record.claim.epsilon(delta=1e-5, accountant=accountant) > plain.epsilon(
            delta=1e-5, accountant=accountant
        )
    assert "DP-PCA" in record.claim.description
    assert record.model_options["pca_components"] == 16
    proj = next(m for m in model.modules() if isinstance(m, Projection))
    gram = proj.matrix @ proj.matrix.T
    torch.testing.assert_close(gram, torch.eye(16), atol=1e-4, rtol=0)  # orthonormal rows


def test_dp_pca_recovers_principal_subspace_at_low_noise() -> None:
    gen = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(20, 3, generator=gen, dtype=torch.float64))[0]
    x = (torch.randn(2000, 3, generator=gen, dtype=torch.float64) * torch.tensor([5.0, 3.0, 2.0])) @ basis.T
    x = x + 0.01 * torch.randn(2000, 20, generator=gen, dtype=torch.float64)
    p = dp_pca(x.float(), num_components=3, noise=1e-3, generator=torch.Generator().manual_seed(1)).double()
    # The recovered rows span the same subspace: projecting the basis loses almost nothing.
    assert float((p @ basis).norm() ** 2) == pytest.approx(3.0, abs=1e-2)


def test_pca_needs_a_projection_layer(digits) -> None:
    bundle, splits = digits
    with pytest.raises(ValueError, match="pca_components"):
        train_dpsgd(
            TrainRequest(
                bundle=bundle,
                splits=splits,
                model_name="digits-mlp",
                config=_small(pca_components=8, pca_noise=4.0),
                progress=False,
            )
        )


def test_shuffle_mode_is_labelled_non_private_accounting(digits) -> None:
    bundle, splits = digits
    lots: list[int] = []
    cfg = _small(sampling="shuffle-non-private-accounting", epochs=1)
    record, _ = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=0, progress=False),
        on_step=lambda i, u, lot: lots.append(lot),
    )
    assert set(lots) == {60}
    assert "non-private-accounting" in record.claim.description
    assert record.config["sampling"] == "shuffle-non-private-accounting"


def test_training_is_deterministic_under_a_seed(digits) -> None:
    bundle, splits = digits
    cfg = _small(epochs=1, per_layer=True)
    _, a = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=7, progress=False)
    )
    _, b = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=7, progress=False)
    )
    _, c = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=8, progress=False)
    )
    for (n, pa), pb, _pc in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(pa, pb), n
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.state_dict().values(), c.state_dict().values()))


def test_learning_rate_schedule() -> None:
    cfg = _small(learning_rate=0.1, final_learning_rate=0.052, lr_decay_epochs=10)
    assert learning_rate_at(cfg, 0) == pytest.approx(0.1)
    assert learning_rate_at(cfg, 5) == pytest.approx(0.076)
    assert learning_rate_at(cfg, 10) == pytest.approx(0.052)
    assert learning_rate_at(cfg, 50) == pytest.approx(0.052)
    assert learning_rate_at(_small(learning_rate=0.3), 7) == pytest.approx(0.3)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"lot_size": 0}, "lot_size"),
        ({"lot_size": None, "sampling_rate": 1.5}, "sampling_rate"),
        ({"sampling_rate": 0.1, "lot_size": 10}, "lot_size"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"target_epsilon": -2.0}, "target_epsilon"),
        ({"accountant": "magic"}, "accountant"),
        ({"epochs": 0}, "epochs"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"momentum": 1.0}, "momentum"),
        ({"sampling": "shuffle"}, "sampling"),
        ({"pca_components": 10}, "pca_noise"),
        ({"pca_components": 0, "pca_noise": 1.0}, "pca_components"),
        ({"pca_components": 5, "pca_noise": 0.0}, "pca_noise"),
        ({"pca_sampling_rate": 0.0}, "pca_sampling_rate"),
        ({"clipping_method": "fast"}, "clipping_method"),
        ({"physical_batch_size": 0}, "physical_batch_size"),
        ({"epochs": 0}, "epochs"),
        ({"expected_lot_size": -1.0}, "expected_lot_size"),
    ],
)
def test_bad_config_raises_naming_the_argument(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        DPSGDConfig(**kwargs)


def test_config_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        DPSGDConfig(1.0)  # type: ignore[misc]
    cfg = DPSGDConfig()
    with pytest.raises(AttributeError):
        cfg.clip_norm = 2.0  # type: ignore[misc]


def test_default_sampling_rate_is_derived_from_the_number_of_members() -> None:
    # 4·√60000 ≈ 980 → the nearest power of two, 1024 (defenses.dp_defaults, rule 3).
    assert DPSGDConfig().rate(60000) == pytest.approx(1024 / 60000)
    assert DPSGDConfig(lot_size=600).rate(30000) == pytest.approx(0.02)


def test_lot_size_larger_than_members_is_refused() -> None:
    with pytest.raises(ValueError, match="lot_size"):
        plan_dpsgd(DPSGDConfig(lot_size=5000), num_members=100)


def test_unmeetable_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="target_epsilon"):
        plan_dpsgd(_small(noise_multiplier=0.3, target_epsilon=0.01, epochs=None), num_members=898)


def test_epochs_default_only_uncapped_in_budget_mode() -> None:
    from defenses.dp_defaults import DEFAULT_EPOCHS, derived_epochs
    from defenses.dpsgd.plan import resolve_config

    assert _small(epochs=None).epochs == DEFAULT_EPOCHS
    # With a target and no σ the length is derived from ε when the config is resolved.
    assert _small(epochs=None, noise_multiplier=None, target_epsilon=2.0).epochs is None
    assert resolve_config(_small(epochs=None, noise_multiplier=None, target_epsilon=2.0), num_members=898)[
        0
    ].epochs == derived_epochs(target_epsilon=2.0, delta=1e-5, num_members=898, lot_size=60)
    assert _small(epochs=None, target_epsilon=2.0).epochs is None
    assert resolve_config(_small(epochs=None, target_epsilon=2.0), num_members=898)[0].epochs is None


# ----------------------------------------------------------------------------- divergence (issue 11, finding 9)


#: digits-mlp as it was before tanh (a ReLU net diverges within a few steps at a huge learning rate).
RELU = {"activation": "relu", "hidden": 128}


def test_dpsgd_stops_at_a_non_finite_loss_naming_the_step(digits) -> None:
    from dpaudit.training import TrainingDiverged

    bundle, splits = digits
    seen: list[int] = []
    with pytest.raises(
        TrainingDiverged,
        match=r"training diverged: loss became (nan|inf) at step \d+ \(epoch \d+\); "
        r"lower --learning-rate \(now 1e\+30\)",
    ) as exc:
        # ReLU: digits-mlp's tanh saturates, so its loss grows without overflowing for many steps.
        train_dpsgd(
            TrainRequest(
                bundle=bundle,
                splits=splits,
                model_name="digits-mlp",
                model_options=RELU,
                config=_small(learning_rate=1e30),
                progress=False,
            ),
            on_step=lambda i, u, n: seen.append(i),
        )
    # it stops at once: the step named is the first whose loss is not finite, and no later step runs
    step = int(str(exc.value).split("at step ")[1].split()[0])
    assert seen == list(range(step)) and step < 5
    assert isinstance(exc.value, ValueError)  # the CLI maps it to exit 2


def test_nonprivate_training_stops_at_a_non_finite_loss(digits) -> None:
    from defenses.nonprivate import NonPrivateConfig, train_nonprivate
    from dpaudit.training import TrainingDiverged

    bundle, splits = digits
    steps: list[int] = []
    with pytest.raises(TrainingDiverged, match=r"at step \d+ \(epoch 0\); lower --learning-rate \(now 1e\+10\)"):
        train_nonprivate(
            TrainRequest(
                bundle=bundle,
                splits=splits,
                model_name="digits-mlp",
                model_options=RELU,
                config=NonPrivateConfig(epochs=3, learning_rate=1e10),
                progress=False,
            ),
            after_step=lambda i, m: steps.append(i),
        )
    assert len(steps) < 5


def test_a_model_with_non_finite_parameters_never_becomes_a_record(digits) -> None:
    import time

    from defenses._common import build_record
    from dpaudit.models import build_model
    from dpaudit.privacy.claims import NonPrivateClaim
    from dpaudit.training import SGDConfig, TrainingDiverged

    bundle, splits = digits
    model = build_model("digits-mlp", input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    with torch.no_grad():
        model[1].weight[0, 0] = float("nan")
    with pytest.raises(
        TrainingDiverged, match=r"1\.weight holds NaN or infinite values.*lower --learning-rate \(now 0\.05\)"
    ):
        request = TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=SGDConfig(),
            seed=0,
            device=torch.device("cpu"),
        )
        build_record(request, defense="nonprivate", model=model, claim=NonPrivateClaim(), started=time.monotonic())


# ----------------------------------------------------------------------------- budget plan (issue 30, item 1)
@pytest.mark.extended
def test_target_epsilon_without_sigma_calibrates_sigma_for_the_epochs() -> None:
    # σ once defaulted to 1.1, so a target ε with --epochs was silently a step budget (8 steps).
    cfg = DPSGDConfig(clip_norm=1.0, lot_size=64, target_epsilon=2.0, epochs=3, accountant="rdp")
    assert cfg.noise_multiplier is None
    plan = plan_dpsgd(cfg, num_members=718)
    assert plan.num_steps == 3 * plan.steps_per_epoch
    eps = dpsgd_claim(
        sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=plan.num_steps
    ).epsilon(delta=1e-5, accountant="rdp")
    assert 1.95 < eps <= 2.0
    assert plan.note is not None and "calibrated so that 3 epochs (33 steps)" in plan.note
    # target alone: calibrated for the epochs derived from ε, and the plan says so
    from defenses.dp_defaults import derived_epochs

    alone = plan_dpsgd(DPSGDConfig(clip_norm=1.0, lot_size=64, target_epsilon=2.0, accountant="rdp"), num_members=718)
    epochs = derived_epochs(target_epsilon=2.0, delta=1e-5, num_members=718, lot_size=64)
    assert (
        alone.num_steps == epochs * alone.steps_per_epoch
        and f"{epochs:g} epochs" in (alone.note or "")
        and f"epochs {epochs:g}" in (alone.defaults or "")
    )


def test_sigma_default_is_resolved_before_the_config_is_digested() -> None:
    import dataclasses

    from dpaudit.results.record import make_model_id

    cfg = DPSGDConfig(clip_norm=1.0, lot_size=64)
    assert cfg == DPSGDConfig(clip_norm=1.0, lot_size=64, noise_multiplier=1.1)
    assert plan_dpsgd(cfg, num_members=718).note is None  # no target: nothing to say
    ids = {
        make_model_id(defense="dpsgd", dataset="digits", model_name="digits-mlp", seed=0, config=dataclasses.asdict(c))
        for c in (cfg, DPSGDConfig(clip_norm=1.0, lot_size=64, noise_multiplier=1.1))
    }
    assert len(ids) == 1


def test_explicit_sigma_and_epochs_beyond_the_budget_are_refused_not_cut_short() -> None:
    cfg = DPSGDConfig(clip_norm=1.0, lot_size=64, target_epsilon=2.0, noise_multiplier=1.1, epochs=30, accountant="rdp")
    with pytest.raises(
        ValueError,
        match=r"epochs=30 needs 330 steps, but noise_multiplier=1.1 reaches target_epsilon=2 .* after 2 steps",
    ):
        plan_dpsgd(cfg, num_members=718)
    fits = plan_dpsgd(
        DPSGDConfig(clip_norm=1.0, lot_size=64, target_epsilon=2.0, noise_multiplier=4.0, epochs=1, accountant="rdp"),
        num_members=718,
    )
    assert fits.num_steps == fits.steps_per_epoch and fits.noise_multiplier == 4.0


def test_explicit_sigma_without_epochs_says_how_far_the_budget_goes(capsys) -> None:
    from defenses.dpsgd.plan import announce_plan

    plan = plan_dpsgd(
        DPSGDConfig(
            clip_norm=1.0, lot_size=64, learning_rate=0.1, target_epsilon=2.0, noise_multiplier=1.1, accountant="rdp"
        ),
        num_members=718,
    )
    announce_plan(plan)
    assert (
        capsys.readouterr().err == "dpsgd budget: sigma = 1.1 reaches epsilon = 2 after 2 steps (0.178 "
        "epochs); training stops there (leave --noise-multiplier unset and pass "
        "--epochs to calibrate sigma instead)\n"
    )
