"""Privacy analysis of PATE's noisy vote aggregators (torch-free), one module per concept.

Three aggregators of a vote matrix (queries × classes; entry ``[i, j]`` is the number of
teachers voting for class j on query i): LNMax (Papernot et al. 2017, §3 and Theorem 3), GNMax
and Confident-GNMax (Papernot et al. 2018, §3-§4, Algorithm 1).

* :mod:`~dpaudit.privacy.pate.votes` — the vote matrix, its checks, the RDP order grids;
* :mod:`~dpaudit.privacy.pate.mechanisms` — the per-query RDP of each aggregator,
  data-independent and data-dependent;
* :mod:`~dpaudit.privacy.pate.analysis` — whole matrices: RDP summed and converted to (ε, δ);
* :mod:`~dpaudit.privacy.pate.smooth_sensitivity` — publishing a data-dependent ε with
  smooth sensitivity (2018, §4.2 and Appendix C);
* :mod:`~dpaudit.privacy.pate.claim` — :class:`~dpaudit.privacy.pate.claim.PATEClaim`, the
  claim kind ``"pate"``, registered beside the analysis that states it;
* :mod:`~dpaudit.privacy.pate.budget` — the data-independent worst case a run plans with.

The package imports none of its modules: import the one whose concept you need.
"""
