"""Distributed selective SGD (Shokri & Shmatikov, CCS 2015) and its differentially private variant.

- :mod:`defenses.dssgd.protocol` — server, participants, upload rules, schedules, in-process engine;
- :mod:`defenses.dssgd.svt` — the DP variant's sparse-vector upload;
- :mod:`defenses.dssgd.flower` — the same participants and server as Flower apps (simulated on Ray);
- :mod:`defenses.dssgd.defense` — the registered defense: config, training, records.
"""
