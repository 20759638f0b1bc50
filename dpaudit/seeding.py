"""Seed streams: one root seed, an independent stream per component.

Library code never seeds global generators (docs/architecture.md, "Style"). A component asks for its
own stream by name — ``derive_seed(root, "splits")``, ``torch_generator(root, "batches")`` —
and gets a seed from ``numpy.random.SeedSequence`` keyed on the root seed and a stable hash of
the name, so streams are independent and reproducible across processes and machines.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

from dpaudit import _validate as v

if TYPE_CHECKING:  # torch only where a torch generator is asked for, so numpy users stay torch-free
    import torch

__all__ = ["derive_seed", "numpy_rng", "torch_generator"]


def _key(component: str | int) -> int:
    if isinstance(component, int) and not isinstance(component, bool):
        return component
    return int.from_bytes(hashlib.sha256(str(component).encode()).digest()[:8], "little")


def derive_seed(seed: int, *components: str | int) -> int:
    """A 63-bit seed for the stream named by ``components`` under the root ``seed``."""
    seed = v.integer("seed", seed, minimum=0)
    seq = np.random.SeedSequence(entropy=seed, spawn_key=tuple(_key(c) for c in components))
    return int(seq.generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1, 2**32], dtype=np.uint64)) & (
        2**63 - 1
    )


def numpy_rng(seed: int, *components: str | int) -> np.random.Generator:
    """A NumPy generator on the named stream."""
    return np.random.default_rng(derive_seed(seed, *components))


def torch_generator(seed: int, *components: str | int, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator on the named stream (on ``device``)."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *components))
    return gen
