"""Batched Monte Carlo over a randomized model's noise: argmax counts and softmax moments.

PixelDP (Lecuyer et al. 2019, §3.3) and HGM (Phan et al. 2019, Eq. 10) certify with bounds on
the *expected* scores of the randomized model, estimated from n independent noise draws;
randomized smoothing (Cohen et al. 2019, §3.2 CERTIFY) uses the argmax counts of the same
draws. This module produces both in one pass.

Cost: the noise sits after the first layer, so the first layer is evaluated once per input
and only the rest of the network once per draw; draws of several inputs share one batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.progress import Progress
from dpaudit.robustness.noise import NoiseLayer, find_noise_layer, is_randomized, seeded_noise

__all__ = ["MonteCarloScores", "expected_score_accuracy", "sample_scores"]


@dataclass(frozen=True, kw_only=True)
class MonteCarloScores:
    """What n noise draws of a randomized classifier say about each input.

    Attributes:
        counts: (n_inputs, k) int64, how often each class was the argmax.
        mean: (n_inputs, k) float64, mean softmax score per class.
        variance: (n_inputs, k) float64, unbiased sample variance of the softmax scores.
        num_draws: draws per input.
        seconds: wall time of the sampling.
    """

    counts: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    num_draws: int
    seconds: float

    @property
    def draws_per_second(self) -> float:
        return float(self.counts.shape[0] * self.num_draws / max(self.seconds, 1e-12))


def _split_at_noise(model: nn.Module) -> tuple[NoiseLayer, nn.Module] | None:
    if isinstance(model, nn.Sequential) and len(model) > 0 and isinstance(model[0], NoiseLayer):
        return model[0], nn.Sequential(*list(model)[1:])
    return None


@torch.no_grad()
def sample_scores(
    model: nn.Module,
    features: torch.Tensor,
    *,
    num_draws: int,
    seed: int = 0,
    stream: str = "certify",
    device: torch.device | str = "cpu",
    batch_size: int = 4096,
    progress: bool = False,
) -> MonteCarloScores:
    """Draws the model's noise ``num_draws`` times per input (batched) and tallies the scores.

    Args:
        model: a randomized classifier (a zoo model with a noise layer); a deterministic
            model gives identical draws.
        features: (n, …) inputs.
        num_draws: n, draws per input.
        seed: root seed; the noise comes from its ``stream`` (the model's own generator is
            restored afterwards).
        stream: name of the seed stream (use different names for independent samples, e.g.
            the selection and estimation draws of CERTIFY).
        device: where to compute.
        batch_size: most forward rows at once (inputs × draws).
        progress: show progress on stderr.
    """
    import time

    draws = v.integer("num_draws", num_draws, minimum=1)
    batch_size = v.integer("batch_size", batch_size, minimum=1)
    device = torch.device(device)
    started = time.monotonic()
    was_training = model.training
    model.eval()
    noise = find_noise_layer(model)
    split = _split_at_noise(model)
    n = features.shape[0]
    counts = sums = sq = None  # sized on the first batch, once the number of classes is known
    per_input = max(1, batch_size // draws)  # inputs per batch when all their draws fit
    draws_per_batch = min(draws, batch_size)
    try:
        with (
            seeded_noise(model, seed, stream, device=device),
            Progress(n, f"monte carlo ({draws} draws)", enabled=progress) as bar,
        ):
            for start in range(0, n, per_input):
                x = features[start : start + per_input].to(device)
                b = x.shape[0]
                h = noise.layer(x) if split is not None and noise is not None else None
                done = 0
                while done < draws:
                    m = min(draws_per_batch, draws - done)
                    if split is not None and h is not None:
                        hn = h.repeat_interleave(m, dim=0)
                        hn = split[0].add_noise(hn)
                        logits = split[1](hn)
                    else:
                        logits = model(x.repeat_interleave(m, dim=0))
                    probs = torch.softmax(logits.double(), dim=1).reshape(b, m, -1)
                    k = probs.shape[-1]
                    if sums is None or sq is None or counts is None:
                        sums = torch.zeros(n, k, dtype=torch.float64)
                        sq = torch.zeros(n, k, dtype=torch.float64)
                        counts = torch.zeros(n, k, dtype=torch.int64)
                    top = probs.argmax(-1)
                    counts[start : start + b] += torch.nn.functional.one_hot(top, k).sum(1).cpu()
                    sums[start : start + b] += probs.sum(1).cpu()
                    sq[start : start + b] += (probs**2).sum(1).cpu()
                    done += m
                bar.update(b)
    finally:
        model.train(was_training)
    assert counts is not None and sums is not None and sq is not None
    mean = sums / draws
    var = (sq - draws * mean**2) / max(draws - 1, 1)
    return MonteCarloScores(
        counts=counts.numpy(),
        mean=mean.numpy(),
        variance=var.clamp_min(0).numpy(),
        num_draws=draws,
        seconds=time.monotonic() - started,
    )


def expected_score_accuracy(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor | np.ndarray,
    *,
    num_draws: int,
    seed: int = 0,
    stream: str = "matched-accuracy",
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> float:
    """Accuracy of the argmax of the expected softmax scores (PixelDP's prediction, Lecuyer et al. 2019 §3.3).

    A randomized model's scores are averaged over ``num_draws`` noise draws; a deterministic
    model needs one. This puts a noise-layer model and a plain one on the same footing, on the
    same inputs (the HGM reproduction's Secure-SGD vs DP-SGD comparison).

    Args:
        model: a classifier, with or without a noise layer.
        features: (n, …) inputs.
        labels: n true labels.
        num_draws: draws per input for a randomized model.
        seed: root seed of the noise (see :func:`sample_scores`).
        stream: the seed stream's name (the default is the one the reproduction scripts use).
        device: where to compute.
        progress: show progress on stderr (a CNN's 10,000 test images × 16 draws take minutes on a CPU).
    """
    draws = v.integer("num_draws", num_draws, minimum=1)
    scores = sample_scores(
        model,
        features,
        num_draws=draws if is_randomized(model) else 1,
        seed=seed,
        stream=stream,
        device=device,
        progress=progress,
    )
    return float(np.mean(scores.mean.argmax(axis=1) == np.asarray(labels)))
