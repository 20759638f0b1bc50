"""DP-SGD's Poisson lots keyed by sample id: the core's :mod:`dpaudit.sampling`, under the name the defense uses.

The coins live in the core so that the batched trainer (:mod:`dpaudit.batched`) draws exactly
the lots of this defense's loop without importing a defense.
"""

from __future__ import annotations

from dpaudit.sampling import keyed_uniforms, poisson_lot, step_key

__all__ = ["keyed_uniforms", "poisson_lot", "step_key"]
