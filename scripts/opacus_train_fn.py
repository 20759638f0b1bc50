"""An example third-party training function: DP-SGD with Opacus, audited through ``--train-fn``.

``dpaudit audit --train-fn scripts/opacus_train_fn.py:train`` audits any function with the
signature ``train(dataset, *, seed) -> torch.nn.Module`` against the claim given on the command
line, so users can audit their own DP-SGD without porting it. This one trains a small MLP with
Opacus (Yousefpour et al. 2021, "Opacus: User-Friendly Differential Privacy Library in
PyTorch"; checked against Opacus 1.6): Poisson lots of rate ``SAMPLING_RATE``
(``DPDataLoader``), per-example clipping to ``MAX_GRAD_NORM`` and Gaussian noise
``NOISE_MULTIPLIER · MAX_GRAD_NORM``, for ``EPOCHS`` epochs of ``round(1/q)`` steps. The
matching claim::

    dpaudit audit --train-fn scripts/opacus_train_fn.py:train --threat black-box --method one-run \\
        --claim-noise-multiplier 6.6 --claim-sampling-rate 0.1 --claim-num-steps 300 --delta 1e-5 --out runs/opacus

(``python scripts/opacus_train_fn.py`` prints the claim's ε.) The noisy sum is divided by the
public constant ``EXPECTED_BATCH_SIZE`` rather than by q·len(dataset): the dataset's size
changes with the canaries, and a normaliser that depends on it would itself leak.

Two deliberately broken variants keep the same claim while their DP machinery is silently
off, so an audit must flag them: :func:`train_no_noise` (noise multiplier 0) and
:func:`train_extra_nonprivate_epochs` (non-private fine-tuning after the private phase).
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

NOISE_MULTIPLIER = 6.6
MAX_GRAD_NORM = 1.0
SAMPLING_RATE = 0.1
EPOCHS = 30
STEPS = EPOCHS * round(1 / SAMPLING_RATE)
EXPECTED_BATCH_SIZE = 32
LEARNING_RATE = 4.0
HIDDEN = 256


def _mlp(features: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, classes))


def _model(dataset: torch.utils.data.Dataset) -> nn.Module:
    x, _ = dataset[0]
    return _mlp(int(x.numel()), int(getattr(dataset, "num_classes", 10)))


def model() -> nn.Module:
    """The architecture :func:`train` trains on digits (8×8, 10 classes), for ``--model-fn``.

    ``dpaudit audit --init worst-case`` crafts its start on it::

        dpaudit audit --train-fn scripts/opacus_train_fn.py:train --model-fn scripts/opacus_train_fn.py:model \\
            --init worst-case --claim-noise-multiplier 6.6 --claim-sampling-rate 0.1 --claim-num-steps 300 --out
            runs/opacus
    """
    return _mlp(64, 10)


def _train(
    dataset: torch.utils.data.Dataset,
    *,
    seed: int,
    noise_multiplier: float,
    extra_nonprivate_epochs: int = 0,
    initial_state: dict[str, torch.Tensor] | None = None,
) -> nn.Module:
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    torch.manual_seed(seed)  # a third-party function may seed globals; the suite never does
    model = _model(dataset)
    if initial_state is not None:  # the auditor's start (worst-case audits); public, so no privacy cost
        model.load_state_dict(initial_state)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    loader = DPDataLoader(dataset, sample_rate=SAMPLING_RATE, generator=torch.Generator().manual_seed(seed))
    engine = PrivacyEngine(accountant="prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus warns about secure RNG and the zero-noise variant
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=noise_multiplier,
            max_grad_norm=MAX_GRAD_NORM,
            poisson_sampling=False,  # the loader already draws Poisson lots at SAMPLING_RATE
            noise_generator=torch.Generator().manual_seed(seed + 1),
        )
    optimizer.expected_batch_size = EXPECTED_BATCH_SIZE  # public constant, not q·len(dataset)
    loss_fn = nn.CrossEntropyLoss()
    # Opacus's hooks make torch warn that inputs need no gradient; expected, and noisy in logs.
    warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
    model.train()
    for _ in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            # An empty Poisson lot still needs its backward: Opacus then clips an empty batch and
            # adds the noise of the step (skipping it left no per-sample gradient and crashed on
            # the tiny datasets `dpaudit check` trains on). The sum over the lot, not a mean of
            # nothing; Opacus's own normaliser divides by the expected lot size.
            (nn.functional.cross_entropy(model(x), y, reduction="sum") / max(len(y), 1)).backward()
            optimizer.step()
    plain = model._module
    if extra_nonprivate_epochs:  # the planted mistake: a "harmless" fine-tuning pass
        opt = torch.optim.SGD(plain.parameters(), lr=0.1)
        plain_loader = torch.utils.data.DataLoader(
            dataset, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed)
        )
        for _ in range(extra_nonprivate_epochs):
            for x, y in plain_loader:
                opt.zero_grad()
                loss_fn(plain(x), y).backward()
                opt.step()
    return plain.eval()


def train(
    dataset: torch.utils.data.Dataset, *, seed: int, initial_state: dict[str, torch.Tensor] | None = None
) -> nn.Module:
    """Opacus DP-SGD: Poisson rate 0.1, σ = 6.6, C = 1, 300 steps (claim: ``claim_epsilon()``)."""
    return _train(dataset, seed=seed, noise_multiplier=NOISE_MULTIPLIER, initial_state=initial_state)


def train_no_noise(
    dataset: torch.utils.data.Dataset, *, seed: int, initial_state: dict[str, torch.Tensor] | None = None
) -> nn.Module:
    """Broken on purpose: the noise multiplier silently 0 while the claim says σ = 6.6."""
    return _train(dataset, seed=seed, noise_multiplier=0.0, initial_state=initial_state)


def train_extra_nonprivate_epochs(
    dataset: torch.utils.data.Dataset, *, seed: int, initial_state: dict[str, torch.Tensor] | None = None
) -> nn.Module:
    """Broken on purpose: DP-SGD followed by 30 non-private epochs on the same data."""
    return _train(
        dataset, seed=seed, noise_multiplier=NOISE_MULTIPLIER, extra_nonprivate_epochs=30, initial_state=initial_state
    )


def claim_epsilon(delta: float = 1e-5) -> float:
    """ε (PLD) of the claim the functions above make."""
    from dpaudit.api import dpsgd_claim

    return dpsgd_claim(sampling_rate=SAMPLING_RATE, noise_multiplier=NOISE_MULTIPLIER, num_steps=STEPS).epsilon(
        delta=delta
    )


if __name__ == "__main__":
    eps = claim_epsilon()
    print(f"claim: DP-SGD q={SAMPLING_RATE} sigma={NOISE_MULTIPLIER} T={STEPS}: epsilon(delta=1e-5) = {eps:.4f} (PLD)")
    if not math.isfinite(eps):
        raise SystemExit(1)
