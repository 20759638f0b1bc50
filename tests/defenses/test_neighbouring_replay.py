"""The neighbouring-replay contract: every defense with a privacy claim respects add/remove-one as a whole pipeline.

For every registered defense whose claim (for its default config) is not ``nonprivate`` — and,
for a defense that is private only in some configurations (DSSGD's DP upload), that
configuration — the defense's own ``replay`` runs on a small digits subset D, on D minus one
member and on D plus one held-out record, with the same seed, and
:func:`dpaudit.replay.compare_traces` must hold: the same mechanism inputs in the same order,
each moved by no more than the sensitivity the claim assumes, and everything released besides
identical (docs/audits/replay.md).

The small config of each defense is derived from its config type: the generic overrides below
are applied one at a time wherever the type has the field and accepts the value, so a defense
added later is replayed with what it accepts of them, and with its defaults otherwise.
A toy DP defense registered for one test shows that a defense without ``replay`` fails the
contract, and that a replay releasing a statistic of the data is caught.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pytest

from defenses import DEFENSES
from defenses.registry import DefenseSpec
from dpaudit.data import Splits, load_dataset, make_splits
from dpaudit.replay import MechanismInput, ReplayTrace, compare_traces
from dpaudit.train_request import TrainRequest

SEED = 3
NUM_MEMBERS = 120

#: Small values for fields many configs share (epochs, lots, sub-models, rounds), tried one at a
#: time: a field the type lacks, or a value it refuses, is skipped.
SMALL: dict[str, Any] = {
    "epochs": 1,
    "sampling_rate": 0.1,
    "accountant": "rdp",
    "redistribution_pretrain_epochs": 1,
    "redistribution_examples": 64,
    "teachers": 4,
    "queries": 20,
    "teacher_eval_examples": 50,
    "student_epochs": 1,
    "participants": 3,
    "rounds": 2,
    "baselines": False,
}

#: Fields that make a config private when its default is not (DSSGD's DP upload), tried in order.
PRIVACY_SWITCHES: tuple[tuple[str, Any], ...] = (("dp_epsilon", 1.0), ("target_epsilon", 8.0))


def _fields(config_type: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_type)} if dataclasses.is_dataclass(config_type) else set()


def _try(spec: DefenseSpec, options: dict[str, Any]) -> Any | None:
    try:
        return spec.config_type(**options)
    except (TypeError, ValueError):
        return None


def _private_options(spec: DefenseSpec) -> dict[str, Any] | None:
    """The options (beyond the defaults) under which ``spec`` makes a privacy claim, or ``None``."""
    default = _try(spec, {})
    if default is None:
        return None
    if spec.claim_kind_for(default) != "nonprivate":
        return {}
    for name, value in PRIVACY_SWITCHES:
        if name in _fields(spec.config_type):
            config = _try(spec, {name: value})
            if config is not None and spec.claim_kind_for(config) != "nonprivate":
                return {name: value}
    return None


def dp_cases() -> list[tuple[str, dict[str, Any]]]:
    """Every (defense, options) of the registry that makes a privacy claim."""
    cases = []
    for name in DEFENSES:
        options = _private_options(DEFENSES[name])
        if options is not None:
            cases.append((name, options))
    return cases


def small_config(spec: DefenseSpec, options: dict[str, Any], *, num_members: int) -> Any:
    """``options`` plus whatever of :data:`SMALL` the config type accepts; a public divisor q·N for DP-SGD-like lots."""
    fields = _fields(spec.config_type)
    chosen = dict(options)
    for name, value in SMALL.items():
        if name in fields and name not in chosen and _try(spec, {**chosen, name: value}) is not None:
            chosen[name] = value
    if "expected_lot_size" in fields and "sampling_rate" in chosen:
        # A divisor fixed in the config, not derived from N (which D and D′ do not share).
        chosen["expected_lot_size"] = chosen["sampling_rate"] * num_members
    config = spec.config_type(**chosen)
    assert spec.claim_kind_for(config) != "nonprivate", f"{spec.name}: the small config {chosen} lost the privacy claim"
    return config


@pytest.fixture(scope="module")
def digits() -> tuple[Any, Splits, dict[str, Splits]]:
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=NUM_MEMBERS, num_non_members=40)
    removed, added = int(splits.members[NUM_MEMBERS // 2]), int(splits.non_members[0])
    pairs = {
        f"D minus member {removed}": dataclasses.replace(splits, members=np.setdiff1d(splits.members, [removed])),
        # The added record leaves the non-members; the population (public data) is unchanged.
        f"D plus held-out record {added}": dataclasses.replace(
            splits, members=np.union1d(splits.members, [added]), non_members=np.setdiff1d(splits.non_members, [added])
        ),
    }
    return bundle, splits, pairs


def check_contract(name: str, options: dict[str, Any], digits: tuple[Any, Splits, dict[str, Splits]]) -> list[str]:
    """Replays ``name`` on D and each neighbour; returns the verdicts' summaries. Fails naming what broke."""
    spec = DEFENSES[name]
    kind = spec.claim_kind_for(spec.config_type(**options))
    assert spec.replay is not None, (
        f"{name} makes a {kind!r} claim but registers no replay "
        "(DefenseSpec.replay): every defense with a privacy claim must replay "
        "its own pipeline"
        " on D and D ± one record (docs/audits/replay.md, 'Adding a replay')"
    )
    bundle, splits, pairs = digits
    config = small_config(spec, options, num_members=len(splits.members))
    request = TrainRequest(
        bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=SEED, device="cpu"
    )
    run = spec.replay(request)
    assert isinstance(run, ReplayTrace) and run.defense == name, (
        f"{name}: replay returned {type(run).__name__} for defense {getattr(run, 'defense', None)!r}"
    )
    summaries = []
    for label, neighbour in pairs.items():
        verdict = compare_traces(run, spec.replay(dataclasses.replace(request, splits=neighbour)))
        detail = "\n  ".join(f"[{f.kind}] {f.message}" for f in verdict.findings[:8])
        assert verdict.holds, f"{name} vs {label}: {verdict.summary()}\n  {detail}"
        summaries.append(f"{label}: {verdict.summary()}")
    return summaries


@pytest.mark.extended
@pytest.mark.parametrize(
    ("name", "options"),
    dp_cases(),
    ids=lambda x: x if isinstance(x, str) else ",".join(f"{k}={v}" for k, v in x.items()) or "default",
)
def test_neighbouring_replay_holds(name: str, options: dict[str, Any], digits) -> None:
    started = time.monotonic()
    for line in check_contract(name, options, digits):
        print(line)
    print(f"{name}: {time.monotonic() - started:.1f} s")


def test_the_cases_cover_every_privacy_claim() -> None:
    """DP-SGD and Secure-SGD by default, PATE by default, DSSGD through its DP upload; no non-private defense."""
    cases = dict(dp_cases())
    assert {"dpsgd", "secure-sgd", "pate"} <= set(cases)
    assert "dssgd" in cases and cases["dssgd"], "DSSGD's DP configuration must be replayed"
    assert "nonprivate" not in cases and "smoothing" not in cases


# ----------------------------------------------------------------------------- a toy DP defense

TOY = "toy-dp-of-a-replay-test"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig:
    clip: float = 1.0
    leak_mean: bool = False
    skip_clipping: bool = False


def _toy_train(request: TrainRequest[Any], /) -> Any:
    raise AssertionError("the replay contract never trains the toy")


def _toy_replay(request: TrainRequest[ToyConfig], /) -> ReplayTrace:
    """A Gaussian sum of clipped feature vectors; optionally with a planted bug."""
    bundle, splits, config = request.bundle, request.splits, request.config
    x = bundle.all().subset(splits.members).features.reshape(len(splits.members), -1).double().numpy()
    clipped = x * np.minimum(1.0, config.clip / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12))
    total = (x if config.skip_clipping else clipped).sum(axis=0)  # the bug of a sum never clipped
    released: dict[str, Any] = {"clip norm": config.clip}
    if config.leak_mean:  # the bug of a statistic released outside the mechanism
        released["feature mean"] = x.mean(axis=0)
    return ReplayTrace(
        defense=TOY,
        mechanism_inputs=(MechanismInput(name="sum", value=total, sensitivity=config.clip, norm="l2"),),
        released=released,
    )


def _toy(replay: Any) -> DefenseSpec:
    return DefenseSpec(
        name=TOY,
        summary="a toy DP defense of a test",
        config_type=ToyConfig,
        train=_toy_train,
        claim_kind="dp",
        replay=replay,
        order=999,
    )


def test_a_dp_defense_without_replay_fails_the_contract(digits) -> None:
    with DEFENSES.temporarily(_toy(None)):
        assert (TOY, {}) in dp_cases()
        with pytest.raises(AssertionError, match=f"{TOY} makes a 'dp' claim but registers no replay"):
            check_contract(TOY, {}, digits)
    assert TOY not in DEFENSES


def test_a_correct_toy_replay_holds_and_planted_bugs_are_caught(digits) -> None:
    with DEFENSES.temporarily(_toy(_toy_replay)):
        lines = check_contract(TOY, {}, digits)
        assert len(lines) == 2 and all("holds" in line for line in lines)
        with pytest.raises(AssertionError, match=r"feature mean differs between neighbours"):
            check_contract(TOY, {"leak_mean": True}, digits)
        with pytest.raises(AssertionError, match=r"\[sensitivity\] sum moved by"):
            check_contract(TOY, {"skip_clipping": True, "clip": 0.01}, digits)


# ----------------------------------------------------------------------------- DP-SGD's sampling and DP-PCA


def test_keyed_poisson_lots_of_neighbours_differ_only_in_the_changed_record() -> None:
    import torch

    from defenses.dpsgd.sampling import poisson_lot

    ids = np.arange(0, 3000, 3)
    without = np.delete(ids, 200)
    lots_d, lots_minus, sizes = [], [], []
    for step in range(200):
        a = ids[poisson_lot(ids, 0.05, generator=torch.Generator().manual_seed(step)).numpy()]
        b = without[poisson_lot(without, 0.05, generator=torch.Generator().manual_seed(step)).numpy()]
        assert set(a) - set(b) <= {ids[200]} and set(b) <= set(a), (
            f"step {step}: the lots differ beyond the removed record"
        )
        lots_d.append(a)
        lots_minus.append(b)
        sizes.append(len(a))
    # The law is unchanged: each record in a lot with probability q, independently (binomial sizes,
    # mean Nq = 50, variance Nq(1-q) = 47.5; the bounds are ~5 standard errors wide).
    assert abs(np.mean(sizes) - 50) < 5 * np.sqrt(47.5 / 200)
    assert 47.5 / 2 < np.var(sizes) < 47.5 * 2
    hits = np.zeros(len(ids))
    for a in lots_d:
        hits[np.searchsorted(ids, a)] += 1
    assert abs(hits.mean() / 200 - 0.05) < 0.005 and np.corrcoef(hits[:-1], hits[1:])[0, 1] < 0.15


def _dpsgd_replays(digits, **options: Any) -> list[Any]:
    bundle, splits, pairs = digits
    spec = DEFENSES["dpsgd"]
    config = spec.config_type(
        epochs=1, sampling_rate=0.1, expected_lot_size=0.1 * len(splits.members), accountant="rdp", **options
    )
    model_options = {"hidden": 32} if "pca_components" in options else None
    model = "abadi-mnist" if "pca_components" in options else "digits-mlp"
    request = TrainRequest(
        bundle=bundle,
        splits=splits,
        model_name=model,
        model_options=model_options,
        config=config,
        seed=SEED,
        device="cpu",
    )
    run = spec.replay(request)
    return [
        compare_traces(run, spec.replay(dataclasses.replace(request, splits=neighbour))) for neighbour in pairs.values()
    ]


def test_dp_pca_input_is_replayed_within_its_sensitivity(digits) -> None:
    verdicts = _dpsgd_replays(digits, pca_components=8, pca_noise=4.0, pca_sampling_rate=0.5)
    for verdict in verdicts:
        assert verdict.holds, verdict.summary()
    # DP-PCA's covariance (a sampled record moves its upper triangle by ≤ ‖xxᵀ‖_F = 1), then one
    # clipped sum per step: 1 epoch at q = 0.1 is 10 steps.
    assert verdicts[0].num_mechanism_inputs == 1 + 10


@pytest.mark.slow  # ~1 s each: what the replay reports, beside the contract
def test_shuffled_lots_are_reported_as_not_add_remove_stable(digits) -> None:
    verdicts = _dpsgd_replays(digits, sampling="shuffle-non-private-accounting")
    assert all(not v.holds for v in verdicts)
    assert all({f.kind for f in v.findings} == {"sensitivity"} for v in verdicts)


@pytest.mark.slow  # ~1 s each: what the replay reports, beside the contract
def test_a_sampling_rate_derived_from_the_number_of_members_is_reported(digits) -> None:
    """With a lot size L (q = L / N), N — which D and D ± 1 do not share — sets q, the steps and the divisor."""
    bundle, splits, pairs = digits
    spec = DEFENSES["dpsgd"]
    config = spec.config_type(epochs=1, lot_size=12, accountant="rdp")
    request = TrainRequest(
        bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=SEED, device="cpu"
    )
    verdict = compare_traces(
        spec.replay(request), spec.replay(dataclasses.replace(request, splits=next(iter(pairs.values()))))
    )
    assert not verdict.holds
    assert "sampling rate" in {f.name for f in verdict.findings if f.kind == "released"}


def test_an_observer_that_returns_none_changes_nothing(digits) -> None:
    """The observer sees each step's pre-noise sum and the lot's ids; returning None leaves the run as it was."""
    import torch

    from defenses.dpsgd.training import train_dpsgd

    bundle, splits, _ = digits
    config = DEFENSES["dpsgd"].config_type(epochs=1, sampling_rate=0.1, accountant="rdp")
    seen: list[tuple[int, int, float]] = []

    def observer(step: int, clipped_sum: dict, lot_ids: np.ndarray) -> None:
        assert set(lot_ids) <= set(splits.members.tolist())
        seen.append((step, len(lot_ids), float(sum(t.double().norm() ** 2 for t in clipped_sum.values()) ** 0.5)))

    request = TrainRequest(
        bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=SEED, progress=False
    )
    _, plain = train_dpsgd(request)
    record, observed = train_dpsgd(request, observer=observer)
    for (name, a), b in zip(plain.state_dict().items(), observed.state_dict().values()):
        assert torch.equal(a, b), name
    assert [s for s, _, _ in seen] == list(range(record.metrics["num_steps"]))
    # Each sum is at most (lot size) · C / L in L2 (triangle inequality over clipped gradients).
    expected = 0.1 * len(splits.members)
    assert all(norm <= size * config.clip_norm / expected * (1 + 1e-6) for _, size, norm in seen)
    assert record.metrics["mean_lot_size"] == pytest.approx(np.mean([size for _, size, _ in seen]))
