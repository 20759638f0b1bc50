"""Canaries for privacy audits: input canaries scored on the final model, and gradient canaries.

The threat models of docs/audits/statistics.md §5, from weakest to strongest:

* **Mislabelled examples** — a held-out example with a wrong label: the model can only fit it
  by memorising it, so its loss separates IN from OUT (a simple strong input canary; Nasr et
  al. 2021, "Adversary Instantiation", §4.1; Steinke, Nasr & Jagielski 2023, §6).
* **ClipBKD** (Jagielski, Ullman & Oprea 2020, "Auditing Differentially Private Machine
  Learning", §3.2, Alg. 2) — a point far along the *last* principal component of the data
  (the direction the data barely varies in, so clean gradients hardly move the model there),
  labelled with the class a simple classifier finds least likely, inserted k times (group
  size k). Features here live in [0, 1], so the point is clipped into the box.
* **Dirac gradient canary** (Nasr et al. 2021, §4.3; Nasr et al. 2023, "Tight Auditing", §4)
  — in the white-box model the adversary inserts a gradient directly: zero everywhere except
  one coordinate. Choosing a coordinate whose clean per-example gradient is *identically zero*
  (a first-layer weight of an input feature that is 0 in every example) makes the released
  coordinate exactly ``canary + N(0, σ²C²)``, independent of the data and of every earlier
  step: each step is then one observation of a Gaussian mechanism with μ = 1/σ.

Scores follow the suite's convention: higher = more likely IN (negative loss for input
canaries; the released coordinate for Dirac canaries).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.data import ArrayDataset
from dpaudit.seeding import numpy_rng
from dpaudit.specs import PlainSpec

__all__ = [
    "mislabelled_canaries",
    "clipbkd_canaries",
    "with_canaries",
    "loss_scores",
    "DiracCanary",
    "find_dirac_coordinate",
    "DIRAC_SCORES",
]

DIRAC_SCORES = ("dirac", "norm")


def _check_dataset(name: str, ds: object) -> ArrayDataset:
    if not isinstance(ds, ArrayDataset):
        raise v.invalid_type(name, f"{name} must be an ArrayDataset, got {type(ds).__name__}")
    return ds


def mislabelled_canaries(pool: ArrayDataset, *, num_canaries: int, seed: int, id_offset: int) -> ArrayDataset:
    """``num_canaries`` examples from ``pool`` (never trained on otherwise) with wrong labels.

    Args:
        pool: examples the target does not otherwise see (held-out or test data).
        num_canaries: how many canaries (≤ len(pool)).
        seed: root seed (the stream ``"canaries/mislabelled"`` picks examples and labels).
        id_offset: first id of the canaries (choose it above every id of the dataset, so the
            canaries never collide with real samples).

    Returns:
        The canaries as an :class:`ArrayDataset` with ids ``id_offset …``.
    """
    pool = _check_dataset("pool", pool)
    m = v.integer("num_canaries", num_canaries, minimum=1)
    if m > len(pool):
        raise v.invalid("num_canaries", f"num_canaries must be <= the pool size {len(pool)}, got {m}")
    rng = numpy_rng(seed, "canaries/mislabelled")
    pick = torch.from_numpy(rng.choice(len(pool), size=m, replace=False))
    labels = pool.labels.index_select(0, pick).numpy()
    # A uniformly random *other* class: shift by 1..K-1 modulo K.
    shift = rng.integers(1, pool.num_classes, size=m)
    wrong = (labels + shift) % pool.num_classes
    return ArrayDataset(
        name="canaries/mislabelled",
        features=pool.features.index_select(0, pick).clone(),
        labels=wrong,
        ids=np.arange(id_offset, id_offset + m, dtype=np.int64),
        num_classes=pool.num_classes,
    )


def clipbkd_canaries(data: ArrayDataset, *, group_size: int = 1, scale: float = 10.0, id_offset: int) -> ArrayDataset:
    """The ClipBKD poisoning point (Jagielski et al. 2020, Alg. 2), ``group_size`` copies.

    x = clip(mean + scale · v, 0, 1), v the last principal component of the centred data
    (sign chosen so the clipped point moves furthest from the mean), labelled with the class
    a multinomial logistic regression on ``data`` finds least likely at x.

    Args:
        data: the training data the canary should stand out from.
        group_size: k, copies inserted (group privacy: ε_LB is divided by k).
        scale: how far along v (the paper uses 10× the component in standardised units).
        id_offset: first id of the copies.
    """
    data = _check_dataset("data", data)
    k = v.integer("group_size", group_size, minimum=1)
    scale = v.positive("scale", scale)
    x = data.features.reshape(len(data), -1).double().numpy()
    mean = x.mean(0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=True)
    last = vt[-1]
    candidates = [np.clip(mean + s * scale * last, 0.0, 1.0) for s in (1.0, -1.0)]
    point = max(candidates, key=lambda c: float(np.linalg.norm(c - mean)))
    sub = np.random.default_rng(0).permutation(len(x))[:2000]  # enough for "least likely"
    seen = np.unique(data.labels.numpy()[sub])
    probs = np.zeros(data.num_classes)
    if seen.size > 1:
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(max_iter=300).fit(x[sub], data.labels.numpy()[sub])
        probs[clf.classes_] = clf.predict_proba(point[None])[0]
    else:  # a one-class training set (e.g. --num-members 1): every other class is unseen
        probs[seen] = 1.0
    probs[np.setdiff1d(np.arange(data.num_classes), seen)] = -1.0  # an unseen class is least likely
    label = int(np.argmin(probs))
    feats = torch.from_numpy(np.repeat(point[None], k, axis=0)).float().reshape(k, *data.input_shape)
    return ArrayDataset(
        name="canaries/clipbkd",
        features=feats,
        labels=np.full(k, label, dtype=np.int64),
        ids=np.arange(id_offset, id_offset + k, dtype=np.int64),
        num_classes=data.num_classes,
    )


def blank_canary(model: nn.Module, *, input_shape: tuple[int, ...], num_classes: int, id_offset: int) -> ArrayDataset:
    """The blank target of worst-case-start audits (Annamalai & De Cristofaro 2024, §4): one all-zero input.

    Its label is the class ``model`` (the audit's starting point) finds least likely at the
    blank input, so its loss stays high and its gradient keeps reaching the clip norm at every
    step, pointing the same way: the largest, steadiest signal one record can leave.

    Args:
        model: the model every training starts from (the crafted initial state loaded).
        input_shape: one example's shape.
        num_classes: classes of the task.
        id_offset: the canary's id (above every id of the dataset).
    """
    if not isinstance(model, nn.Module):
        raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    x = torch.zeros((1, *input_shape))
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            label = int(model(x).reshape(1, -1).argmin(1))
    finally:
        model.train(was)
    return ArrayDataset(
        name="canaries/blank",
        features=x,
        labels=torch.tensor([label]),
        ids=np.array([id_offset]),
        num_classes=num_classes,
    )


def worst_case_initial_state(
    model: nn.Module,
    auditor_data: ArrayDataset,
    *,
    epochs: int = 5,
    learning_rate: float = 0.01,
    batch_size: int = 32,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Parameters an auditor starts every training from so the target's gradient stands out.

    Annamalai & De Cristofaro (NeurIPS 2024, §4.2): train the model non-privately on data of
    the same distribution that is *not* the audited training set (the auditor's own half),
    plain SGD, a few epochs. From there the training records' gradients are small and
    scattered, while a target the model gets wrong keeps a clipped gradient of norm C, so the
    final models with and without it differ by almost exactly the target's T steps against
    the noise — the worst case the DP guarantee has to cover. The state is public: it does not
    depend on the audited records.

    Args:
        model: the architecture, freshly built (trained in place and returned as a state).
        auditor_data: the auditor's records (disjoint from the audited training set).
        epochs: passes over ``auditor_data`` (their recipe: 5).
        learning_rate: SGD step (their recipe: 0.01).
        batch_size: examples per step (their recipe: 32).
        seed: order of the examples.

    Returns:
        The state dict after pre-training (CPU tensors).
    """
    auditor_data = _check_dataset("auditor_data", auditor_data)
    epochs = v.integer("epochs", epochs, minimum=0)
    learning_rate = v.positive("learning_rate", learning_rate)
    batch_size = v.integer("batch_size", batch_size, minimum=1)
    opt = torch.optim.SGD(model.parameters(), lr=learning_rate)
    gen = torch.Generator().manual_seed(int(seed) % 2**63)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(auditor_data), generator=gen).split(batch_size):
            opt.zero_grad()
            nn.functional.cross_entropy(model(auditor_data.features[idx]), auditor_data.labels[idx]).backward()
            opt.step()
    model.eval()
    return {k: t.detach().cpu().clone() for k, t in model.state_dict().items()}


def with_canaries(data: ArrayDataset, canaries: ArrayDataset, include: np.ndarray | None = None) -> ArrayDataset:
    """``data`` plus the canaries selected by ``include`` (all when ``None``)."""
    data, canaries = _check_dataset("data", data), _check_dataset("canaries", canaries)
    if include is None:
        chosen = canaries
    else:
        mask = np.asarray(include, dtype=bool).reshape(-1)
        if mask.size != len(canaries):
            raise v.invalid("include", f"include must have one entry per canary ({len(canaries)}), got {mask.size}")
        if not mask.any():
            return data
        idx = torch.from_numpy(np.nonzero(mask)[0])
        chosen = ArrayDataset(
            name=canaries.name,
            features=canaries.features.index_select(0, idx),
            labels=canaries.labels.index_select(0, idx),
            ids=canaries.ids.index_select(0, idx),
            num_classes=canaries.num_classes,
        )
    return ArrayDataset(
        name=data.name,
        features=torch.cat([data.features, chosen.features]),
        labels=torch.cat([data.labels, chosen.labels]),
        ids=torch.cat([data.ids, chosen.ids]),
        num_classes=data.num_classes,
    )


@torch.no_grad()
def loss_scores(
    model: nn.Module, features: torch.Tensor, labels: torch.Tensor, *, device: torch.device | str = "cpu"
) -> np.ndarray:
    """Negative cross-entropy of each example on ``model`` (higher = more likely IN)."""
    if not isinstance(model, nn.Module):
        raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    was = model.training
    model.eval()
    try:
        param = next(model.parameters(), None)
        dev = param.device if param is not None else torch.device(device)
        logits = (
            torch.cat([model(x.to(dev)).float().cpu() for x in features.split(1024)])
            if len(features)
            else torch.zeros(0, 1)
        )
        loss = nn.functional.cross_entropy(logits, labels.cpu(), reduction="none")
    finally:
        model.train(was)
    return (-loss).double().numpy()


@dataclass(frozen=True, kw_only=True)
class DiracCanary(PlainSpec):
    """A gradient canary that is zero except at one coordinate (Nasr et al. 2021, §4.3).

    Attributes:
        parameter: the parameter's name (as in ``model.named_parameters()``).
        index: the flat index of the coordinate within that parameter.
        magnitude: the canary's value there. Any value ≥ C gives the same *correctly clipped*
            canary (norm C); a larger value exposes implementations that fail to clip it.
        decoupled: whether every clean per-example gradient is structurally zero at the
            coordinate (then the released coordinate is exactly canary + Gaussian noise).
        reason: how the coordinate was chosen.
    """

    parameter: str
    index: int
    magnitude: float
    decoupled: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.parameter, str) or not self.parameter:
            raise v.invalid_type("parameter", f"parameter must be a non-empty string, got {self.parameter!r}")
        v.integer("index", self.index, minimum=0)
        v.positive("magnitude", self.magnitude)

    def gradient(self, shapes: Mapping[str, torch.Size | tuple[int, ...]]) -> dict[str, torch.Tensor]:
        """The canary as ``{parameter: tensor}`` (the other parameters are implicitly zero)."""
        shape = tuple(shapes[self.parameter])
        g = torch.zeros(int(math.prod(shape)))
        g[self.index] = self.magnitude
        return {self.parameter: g.reshape(shape)}

    def read(self, update: Mapping[str, torch.Tensor]) -> float:
        """The canary's coordinate of a released update."""
        return float(update[self.parameter].reshape(-1)[self.index])


def _first_linear(model: nn.Module, in_features: int) -> tuple[str, nn.Linear] | None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            return (name, module) if module.in_features == in_features else None
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding)):
            return None
    return None


def find_dirac_coordinate(model: nn.Module, data: ArrayDataset, *, magnitude: float, probe: int = 256) -> DiracCanary:
    """Chooses the Dirac canary's coordinate: where clean gradients are (≈) zero.

    Preferred, and exact: when the model's first layer is a Linear on the flattened input and
    some input feature is 0 in every example of ``data``, the weight from that feature to the
    first hidden unit has a per-example gradient of exactly 0 for every example at every
    parameter value (∂ℓ/∂W[h, j] = δ_h · x_j). Otherwise the coordinate with the smallest
    largest per-example gradient over ``probe`` examples at the current parameters is used
    (``decoupled=False``: the audit is then still sound, but less tight).

    Args:
        model: the architecture being trained (only its structure and current weights matter).
        data: the training data.
        magnitude: the canary's value at the coordinate (≥ the clip norm C).
        probe: examples used by the fallback.
    """
    data = _check_dataset("data", data)
    magnitude = v.positive("magnitude", magnitude)
    flat = data.features.reshape(len(data), -1)
    names = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    found = _first_linear(model, flat.shape[1])
    if found is not None:
        zero = torch.nonzero(flat.abs().amax(0) == 0).reshape(-1)
        if zero.numel():
            _, layer = found
            j = int(zero[0])
            return DiracCanary(
                parameter=names[id(layer.weight)],
                index=j,
                magnitude=magnitude,
                decoupled=True,
                reason=f"weight from input feature {j} (zero in all {len(data)} examples) to hidden unit 0",
            )
    # Fallback: per-example gradients on a probe set (torch.func), smallest max |g|.
    from torch.func import functional_call, grad, vmap

    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    n = min(len(data), v.integer("probe", probe, minimum=1))
    x, y = data.features[:n], data.labels[:n]

    def loss_one(prm: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, (prm, buffers), (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    grads = vmap(grad(loss_one), in_dims=(None, 0, 0))(params, x, y)
    best = (math.inf, "", 0)
    for name, g in grads.items():
        m = g.reshape(n, -1).abs().amax(0)
        i = int(torch.argmin(m))
        if float(m[i]) < best[0]:
            best = (float(m[i]), name, i)
    return DiracCanary(
        parameter=best[1],
        index=best[2],
        magnitude=magnitude,
        decoupled=False,
        reason=f"smallest largest per-example gradient ({best[0]:.3g}) over {n} examples; not structurally zero",
    )
