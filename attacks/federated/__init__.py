"""Attacks and audits on federated training: what a server learns from participants' uploads.

:mod:`~attacks.federated.uploads` recovers inputs and membership from a first-layer update,
:mod:`~attacks.federated.similarity` measures how recognisable a recovered image is, and
:mod:`~attacks.federated.dssgd_audit` audits one DSSGD upload with a canary.
"""
