"""The private halves of generative model inversion (Zhang et al. 2020, §4.1), registered as datasets.

GMI trains the target on some classes and its GAN prior on the others; the public halves are
named on the attack's command line (``--public-data mnist:5-9``, ``faces:20-39``).
"""

from __future__ import annotations

from dpaudit.data import faces, idx
from dpaudit.data.registry import register_dataset
from dpaudit.data.subsets import class_subset_source

__all__ = ["MNIST_0_4", "FACES_1_20"]

_MNIST = next(source for source in idx.SOURCES if source.name == "mnist")

MNIST_0_4 = register_dataset(
    class_subset_source(
        _MNIST,
        (0, 1, 2, 3, 4),
        name="mnist-0-4",
        description="MNIST digits 0-4 only (GMI's private half; public half mnist:5-9)",
    )
)
FACES_1_20 = register_dataset(
    class_subset_source(
        faces.SOURCE,
        tuple(range(20)),
        name="faces-1-20",
        description="AT&T/ORL identities s1-s20 only, labels 0-19 (GMI's private half; public half faces:20-39)",
    )
)
