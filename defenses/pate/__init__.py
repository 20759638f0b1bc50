"""PATE: Private Aggregation of Teacher Ensembles (Papernot et al. 2017, 2018).

Private data is cut into disjoint partitions (:mod:`defenses.pate.partition`), one teacher
is trained per partition, and a student learns from public queries labelled by a noisy vote
of the teachers (:mod:`defenses.pate.aggregators`: LNMax, GNMax, Confident-GNMax). Only the
student is released. The privacy analysis of the votes lives in :mod:`dpaudit.privacy`.
"""
