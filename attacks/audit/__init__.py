"""Privacy audits: canaries, the distinguishing games that turn training runs into ε lower bounds, and the PATE
aggregator audit.

:mod:`~attacks.audit.canaries` crafts the records an audit inserts,
:mod:`~attacks.audit.trials` runs and stores the trainings of a game,
:mod:`~attacks.audit.procedures` plays the games (each registered in
:data:`~attacks.audit.procedures.AUDIT_PROCEDURES`) and :mod:`~attacks.audit.pate` audits a
PATE aggregator's answers.
"""
