"""dpaudit: an attack-and-audit evaluation suite for privacy-preserving deep learning.

The core package: privacy claims and accountants (upper bounds), Gaussian calibrations,
data, model zoo, records, run store and the command line. Defenses live in ``defenses``,
attacks in ``attacks`` and rendering in ``reports``; the core imports none of them except
in its application layer (``dpaudit.cli``), which wires them together.
"""

__version__ = "0.1.0"
