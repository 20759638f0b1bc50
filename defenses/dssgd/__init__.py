"""Distributed selective SGD (Shokri & Shmatikov, CCS 2015) and its differentially private variant.

- :mod:`defenses.dssgd.protocol` — server, participants, upload rules, schedules, in-process engine;
- :mod:`defenses.dssgd.svt` — the DP variant's sparse-vector upload;
- :mod:`defenses.dssgd.flower` — the same participants and server as Flower apps (simulated on Ray);
- :mod:`defenses.dssgd.config` — its hyper-parameters; :mod:`defenses.dssgd.plan` — how a run spends its budget;
- :mod:`defenses.dssgd.defense` — the registered defense: training, records.
"""
