"""Judging reconstructions: an independent evaluation classifier, KNN distance, PSNR, and members vs class average.

Zhang et al. (2020, "The Secret Revealer", §4.1) judge a model-inversion attack with an
*evaluation classifier*: a network of another architecture than the target, trained on the same
private data, which the attacker never queries. Attack accuracy is the share of target classes
whose reconstruction the evaluator puts in the class (top-1) or among its five most likely
labels (top-5); the KNN distance is the L2 distance, in the evaluator's penultimate feature
space, from a reconstruction to the nearest private image of its class; PSNR is measured
against that image. Using the target itself as the judge would reward adversarial inputs that
fool the target without looking like the class, which is why the evaluator must differ.

The seeds' question — does inversion reveal *members*, or only what the class looks like on
average? — is answered in pixel space, where the evaluator's own memorisation of its training
images cannot bias the comparison: per class, the RMS distance from the reconstruction to the
members' mean, to the nearest member and to the nearest held-out non-member; and a membership
score (−distance from a candidate to its class's reconstruction) over members and non-members,
which the membership machinery turns into AUC, TPR at low FPR and an honest ε_LB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from attacks.inversion.base import InversionOutput, eval_mode
from dpaudit import _validate as v
from dpaudit.options import option
from dpaudit.results.inversion import InversionResult
from dpaudit.results.membership import MembershipResult
from dpaudit.seeding import torch_generator

__all__ = [
    "EvaluatorConfig",
    "LabelledImages",
    "build_evaluator",
    "evaluate_reconstructions",
    "evaluator_accuracy",
    "train_evaluator",
]

# Steps the default evaluator schedule aims for: ~40 epochs of the 280 ORL training faces,
# a few epochs of MNIST — enough for >= 90 % held-out accuracy on both on a CPU.
_TARGET_STEPS = 400


def _epochs(name: str, value: Any) -> int | None:
    return None if value is None else v.integer(name, value, minimum=1)


@dataclass(frozen=True, kw_only=True)
class EvaluatorConfig:
    """How the evaluation classifier is trained (cached per run, data and seed).

    Attributes:
        evaluator_epochs: passes over the private data; ``None`` picks about 400 steps of
            batch 32 (at least 2 and at most 60 epochs).
        evaluator_width: channels of the first convolution (doubled twice).
    """

    evaluator_epochs: int | None = option(
        None,
        kind=int,
        help="epochs of the evaluation classifier (default: about 400 steps)",
        metavar="N",
        check=_epochs,
    )
    evaluator_width: int = option(
        32,
        help="channels of the evaluation classifier's first convolution",
        metavar="W",
        check=lambda n, x: v.integer(n, x, minimum=1),
    )


@dataclass(frozen=True, kw_only=True)
class LabelledImages:
    """Images with labels and sample ids (members or non-members of the target)."""

    features: torch.Tensor
    labels: torch.Tensor
    ids: np.ndarray

    def of_class(self, label: int) -> tuple[torch.Tensor, np.ndarray]:
        mask = (self.labels == label).cpu().numpy()
        return self.features[torch.from_numpy(mask)], self.ids[mask]


class _Evaluator(nn.Module):
    """A small CNN whose penultimate layer is the feature space of the KNN distance."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: int) -> None:
        super().__init__()
        c, h, w = input_shape
        layers: list[nn.Module] = []
        # Large images (ORL faces, 112×92) are averaged down first: identity survives halving,
        # and the network stays small enough to train on a CPU in seconds.
        while max(h, w) > 64:
            layers.append(nn.AvgPool2d(2))
            h, w = h // 2, w // 2
        ch = c
        for out in (width, 2 * width, 4 * width):
            layers += [nn.Conv2d(ch, out, 3, padding=1), nn.ReLU()]
            if min(h, w) >= 8:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            ch = out
        layers += [nn.AdaptiveAvgPool2d((4, 4)), nn.Flatten(), nn.Linear(ch * 16, 128), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build_evaluator(input_shape: tuple[int, ...], num_classes: int, config: EvaluatorConfig) -> nn.Module:
    """The evaluation classifier's architecture for images of ``input_shape`` (C, H, W).

    Raises:
        ValueError: ``input_shape`` is not (C, H, W).
    """
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise v.invalid(
            "input_shape", f"input_shape must be (C, H, W) for the evaluation classifier, got {input_shape!r}"
        )
    return _Evaluator(shape, v.integer("num_classes", num_classes, minimum=2), config.evaluator_width)


def train_evaluator(
    private: LabelledImages,
    *,
    num_classes: int,
    config: EvaluatorConfig,
    seed: int,
    device: str | torch.device = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> nn.Module:
    """Trains the evaluation classifier on the private data (Zhang et al. 2020, §4.1).

    Training images are jittered (shifts of up to 3 pixels, Gaussian noise σ = 0.03) so the
    evaluator's verdict rests on what the class looks like rather than on exact pixels, which
    reconstructions never match.

    Args:
        private: the private (member) images and labels.
        num_classes: the dataset's number of classes.
        config: the training schedule and width.
        seed: seeds initialisation, batches and jitter.
        device: where to train.
        progress: called with (epochs done, total) after every epoch.

    Returns:
        The trained evaluator, in eval mode, on ``device``.
    """
    shape = tuple(private.features.shape[1:])
    gen = torch_generator(seed, "inversion-evaluator")
    # Initialisation draws from the global stream; fork it so the caller's stream is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        model = build_evaluator(shape, num_classes, config).to(device)
    n = private.features.shape[0]
    batch = 32
    epochs = config.evaluator_epochs or max(2, min(60, math.ceil(_TARGET_STEPS * batch / max(n, 1))))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_all, y_all = private.features.to(device), private.labels.to(device)
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(n, generator=gen)
        for i in range(0, n, batch):
            idx = order[i : i + batch].to(device)
            x = x_all[idx]
            noise = torch.randn(x.shape, generator=gen).to(device)
            x = (x + 0.03 * noise).clamp(0.0, 1.0)
            if x.ndim == 4 and min(x.shape[-2:]) >= 16:
                dy, dx = (int(s) for s in torch.randint(-3, 4, (2,), generator=gen))
                x = torch.roll(x, (dy, dx), (2, 3))
            loss = F.cross_entropy(model(x), y_all[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if progress is not None:
            progress(epoch + 1, epochs)
    model.eval()
    return model


@torch.no_grad()
def _embed(
    evaluator: nn.Module, x: torch.Tensor, device: torch.device, batch: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    feats, logits = [], []
    with eval_mode(evaluator):
        for i in range(0, x.shape[0], batch):
            f = evaluator.features(x[i : i + batch].to(device))  # type: ignore[operator]
            feats.append(f.cpu())
            logits.append(evaluator.head(f).cpu())  # type: ignore[operator]
    return torch.cat(logits).double(), torch.cat(feats).double()


def evaluator_accuracy(evaluator: nn.Module, data: LabelledImages, *, device: str | torch.device = "cpu") -> float:
    """The evaluator's accuracy on ``data`` (held-out images: how much its verdicts are worth)."""
    logits, _ = _embed(evaluator, data.features, torch.device(device))
    return float((logits.argmax(1) == data.labels.cpu()).double().mean())


def _rms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pixel RMS distance between each row of ``a`` (n, …) and each of ``b`` (m, …) → (n, m)."""
    a2, b2 = a.flatten(1).double(), b.flatten(1).double()
    return torch.cdist(a2, b2) / math.sqrt(a2.shape[1])


def _judge_class(
    evaluator: nn.Module,
    r: torch.Tensor,
    feats: torch.Tensor,
    members: tuple[torch.Tensor, np.ndarray],
    non_members: tuple[torch.Tensor, np.ndarray],
    *,
    device: torch.device,
    per: dict[str, list[Any]],
) -> tuple[list[int], list[float], list[bool]]:
    """Judges one class's reconstruction ``r`` (evaluator features ``feats``) against its members and non-members.

    Appends the class's measures to ``per``; returns the candidates' ids, membership scores and
    true membership.
    """
    (xm, idm), (xn, idn) = members, non_members
    dev = device
    _, fm = _embed(evaluator, xm, dev)
    knn = torch.cdist(feats, fm)[0]
    j = int(knn.argmin())
    mse = float(((r.double() - xm[j : j + 1].double()) ** 2).mean())
    per["knn"].append(float(knn[j]))
    per["knn_id"].append(int(idm[j]))
    per["psnr"].append(10.0 * math.log10(1.0 / mse) if mse > 0 else math.inf)
    mean_img = xm.double().mean(0, keepdim=True)
    dm, dn = _rms(r, xm)[0], _rms(r, xn)[0]
    jm, jn = int(dm.argmin()), int(dn.argmin())
    per["mean"].append(float(_rms(r, mean_img)[0, 0]))
    per["member"].append(float(dm[jm]))
    per["non"].append(float(dn[jn]))
    per["member_id"].append(int(idm[jm]))
    per["non_id"].append(int(idn[jn]))
    per["img_mean"].append(mean_img[0].float())
    per["img_member"].append(xm[jm].float())
    per["img_non"].append(xn[jn].float())
    # Membership score: nearer the class's reconstruction = more likely a member.
    return [*idm.tolist(), *idn.tolist()], [*(-dm).tolist(), *(-dn).tolist()], [True] * len(idm) + [False] * len(idn)


def evaluate_reconstructions(
    output: InversionOutput,
    *,
    attack: str,
    model_id: str,
    evaluator: nn.Module,
    members: LabelledImages,
    non_members: LabelledImages,
    config: Mapping[str, object],
    metadata: Mapping[str, object],
    device: str | torch.device = "cpu",
) -> InversionResult:
    """Judges an attack's reconstructions and asks whether they reveal members.

    Args:
        output: the attack's reconstructions, one per target class.
        attack: the attack's name.
        model_id: the target's id.
        evaluator: the trained evaluation classifier (never the target).
        members: the target's training images (at least one per target class).
        non_members: held-out images of the same distribution (at least one per target class).
        config: attack, evaluator and prior parameters to store with the result.
        metadata: timings and diagnostics to store with the result.
        device: where the evaluator runs.

    Returns:
        The stored result: evaluator top-5, KNN distance and PSNR to the nearest member, the
        pixel distances to class mean / nearest member / nearest non-member, the images the
        report shows, and the membership score as a :class:`MembershipResult`.

    Raises:
        ValueError: a target class has no member or no non-member to compare with.
    """
    dev = torch.device(device)
    classes = [int(c) for c in output.classes]
    recon = torch.from_numpy(np.array(output.reconstructions, dtype=np.float32))
    if recon.ndim == 2:
        raise ValueError(f"reconstructions must be images (K, C, H, W) to be judged, got shape {tuple(recon.shape)}")
    logits, rec_feats = _embed(evaluator, recon, dev)
    top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices.numpy().astype(np.int64)
    per: dict[str, list[Any]] = {
        k: []
        for k in (
            "knn",
            "knn_id",
            "psnr",
            "mean",
            "member",
            "non",
            "member_id",
            "non_id",
            "img_mean",
            "img_member",
            "img_non",
        )
    }
    cand_ids, cand_scores, cand_member = [], [], []
    for i, label in enumerate(classes):
        xm, idm = members.of_class(label)
        xn, idn = non_members.of_class(label)
        if xm.shape[0] == 0 or xn.shape[0] == 0:
            raise v.invalid(
                "classes",
                f"classes: class {label} needs at least one member and one non-member to "
                f"judge its reconstruction, got {xm.shape[0]} and {xn.shape[0]}",
            )
        ids, scores, member = _judge_class(
            evaluator, recon[i : i + 1], rec_feats[i : i + 1], (xm, idm), (xn, idn), device=dev, per=per
        )
        cand_ids += ids
        cand_scores += scores
        cand_member += member
    membership = MembershipResult(
        attack=f"inversion-{attack}",
        model_id=model_id,
        sample_ids=np.asarray(cand_ids, dtype=np.int64),
        scores=np.asarray(cand_scores, dtype=np.float64),
        is_member=np.asarray(cand_member, dtype=bool),
        config={"score": "minus pixel RMS distance to the reconstruction of the candidate's class"},
        metadata={"classes": classes},
    )

    def stack(key: str) -> np.ndarray:
        return torch.stack(per[key]).numpy().astype(np.float32).clip(0.0, 1.0)

    return InversionResult(
        attack=attack,
        model_id=model_id,
        target_classes=np.asarray(classes, dtype=np.int64),
        reconstructions=np.asarray(output.reconstructions, dtype=np.float32),
        target_confidence=np.asarray(output.target_confidence, dtype=np.float64),
        evaluator_top5=top5,
        knn_distance=np.asarray(per["knn"]),
        knn_ids=np.asarray(per["knn_id"], dtype=np.int64),
        psnr=np.asarray(per["psnr"]),
        distance_to_mean=np.asarray(per["mean"]),
        distance_to_member=np.asarray(per["member"]),
        distance_to_non_member=np.asarray(per["non"]),
        nearest_member_ids=np.asarray(per["member_id"], dtype=np.int64),
        nearest_non_member_ids=np.asarray(per["non_id"], dtype=np.int64),
        class_means=stack("img_mean"),
        nearest_members=stack("img_member"),
        nearest_non_members=stack("img_non"),
        membership=membership,
        config=config,
        metadata={**metadata, "details": dict(output.details)},
    )
