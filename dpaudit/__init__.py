"""dpaudit: an attack-and-audit evaluation suite for privacy-preserving deep learning.

The core: :mod:`dpaudit.privacy` (claims, accountants, Gaussian calibrations, audit statistics),
:mod:`dpaudit.robustness` (noise layer, Monte Carlo, certification), :mod:`dpaudit.results`
(every result value and the model record, torch-free), :mod:`dpaudit.data`, the model zoo,
weights and the run store. Defenses live in ``defenses``, attacks in ``attacks`` and rendering
in ``reports``; only :mod:`dpaudit.app` imports them and wires them together.
"""

__version__ = "0.1.0"
