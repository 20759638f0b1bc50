"""The application layer: the only package that wires ``attacks``, ``defenses`` and ``reports`` together.

- :mod:`dpaudit.app.cli` — the parser, the verbs it offers and the exit statuses;
- :mod:`dpaudit.app.verbs` — one module per verb: parse, build a typed spec, call a run, print;
- :mod:`dpaudit.app.runs` — one function per job kind (train or load, membership, audit,
  certify): a typed spec and a run directory in, a typed result out. Scripts, tests and the
  README call these, never a CLI module.
"""
