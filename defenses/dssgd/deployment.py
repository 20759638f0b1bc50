"""DSSGD as a real Flower federation: one SuperLink, one SuperNode per participant, ``flwr run``.

The Flower App is ``examples/dssgd-flower/`` (its ``pyproject.toml`` names the apps of this
module and lists every run_config key with its default). Nothing but plain settings crosses the
network before training: the SuperLink's ServerApp and every SuperNode's ClientApp each build
the same :class:`~defenses.dssgd.protocol.FederationSetup` from the run's run_config with
:func:`setup_from_run_config`, exactly as ``dpaudit train --defense dssgd`` builds it
(:func:`defenses.dssgd.defense.federation_setup`: the member split, the seeded partitions, the
common initial model). A SuperNode started with ``--node-config "partition-id=I"`` then trains
participant I on partition I only.

**Result.** With a sequential schedule (``round-robin``, ``random``) the federation applies the
same uploads in the same order as Flower's simulation engine (:func:`defenses.dssgd.flower.run_flower`)
and the in-process engine, and ends with bitwise the same global parameters, ``stat`` and local
models (none under the DP upload, whose participants send the noised upload only:
:func:`~defenses.dssgd.protocol.turn_reply`) when every process trains with one thread (``OMP_NUM_THREADS=1``, what the
simulation's
Ray workers use): float32 arrays cross the network unchanged, and each participant's generators
and parameters are carried in the SuperNode's per-node ``context.state``.

**Missing participants.** A participant is *missing* when its turn brings no reply within
``turn-timeout`` seconds (run_config) or the SuperLink answers that its node or message is
unavailable or its ClientApp crashed. The rule (Shokri & Shmatikov, CCS 2015, §4: participants
train independently and the server applies each upload on its own, so the others need not wait):

* the missed turn is skipped (no upload is applied for it) and the round goes on with the next
  participant; the missing participant is *dropped*: every later turn of it is skipped too, so a
  node that died costs one timeout, not one per round;
* the outcome records every skipped (round, participant) turn
  (:attr:`~defenses.dssgd.protocol.FederationOutcome.missed_turns`, ``missed_turns`` in
  ``outcome.json``) and each dropped participant with why (``dropped``); a dropped participant
  has no final local model (``None``);
* the run starts only when all N SuperNodes are connected and have said which participant they
  are within ``node-timeout`` seconds; otherwise, and when a ClientApp raises, the run stops with
  one line in ``failure.json`` (:func:`defenses.dssgd.flower.read_outcome` raises it).

A SuperNode killed mid-round therefore costs at most ``turn-timeout`` seconds. Flower itself
reports a silent node unavailable only once two heartbeats are missed (up to 60 s in Flower 1.42;
the server takes that notice when it comes first), and a waiting ``Grid.send_and_receive``
without a timeout never returns, which is why the server keeps its own deadline per turn. Choose
``turn-timeout`` above the slowest honest turn: a real SuperNode starts a fresh ClientApp process
for every message (importing torch and dpaudit) and polls the SuperLink every 3 s, and a
participant that answers too late is dropped like a dead one.

**Across machines** (Flower 1.42; the SuperLink serves the Control, Fleet and ServerApp APIs
over HTTP on one port)::

    # every machine: Python with dpaudit[federated] and the dataset (digits ships with
    # scikit-learn; others under --data-root, passed as run_config data-root)
    # host A, the parameter server:
    flower-superlink --insecure --host 0.0.0.0 --port 9091 --disable-runtime-dependency-installation
    # host I+1, participant I of N (I = 0 .. N-1), one each (OMP_NUM_THREADS=1: the
    # simulation's float arithmetic bit for bit; leave it out to use every core):
    OMP_NUM_THREADS=1 flower-supernode --insecure --superlink HOST_A:9091 \\
        --node-config "partition-id=I num-partitions=N"
    # the submitting machine (needs flwr and examples/dssgd-flower only; `flwr run` ships the
    # app to the SuperLink): a SuperLink connection in $FLWR_HOME/config.toml (~/.flwr/)
    #   [superlink.dssgd]
    #   address = "HOST_A:9091"
    #   insecure = true
    flwr run examples/dssgd-flower dssgd --stream \\
        --run-config 'participants=N rounds=10 result-dir="/srv/dssgd/run1"'

The result lands in ``result-dir`` on host A (``outcome.npz``, ``outcome.json``,
``progress.jsonl``; :func:`defenses.dssgd.flower.read_outcome` reads it). ``--insecure`` sends
everything in clear text: outside a trusted network give the SuperLink ``--ssl-*`` certificates
and the SuperNodes ``--root-certificates`` (Flower's "Enable TLS connections" guide). Every
SuperNode holds the whole dataset and uses only its own partition, a deterministic function of
the settings; a deployment whose nodes hold only their own data would ship the partition ids
instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dpaudit.specs import spec_from_dict
from dpaudit.train_request import TrainRequest

from .config import DSSGDConfig
from .defense import federation_setup
from .flower import RunConfig, client_app, load_bundle, server_app
from .protocol import FederationSetup

__all__ = ["SETUP_KEYS", "setup_from_run_config", "dssgd_config", "make_client_app", "make_server_app"]

#: run_config keys that define the federation (the rest, ``rounds``, ``download-fraction``,
#: ``schedule``, ``turn-timeout``, ``node-timeout`` and ``result-dir``, steer the server).
SETUP_KEYS: tuple[str, ...] = (
    "dataset",
    "data-root",
    "model",
    "seed",
    "split-seed",
    "member-fraction",
    *(f.name.replace("_", "-") for f in dataclasses.fields(DSSGDConfig)),
)
#: Federations built in this process, by their settings (a ClientApp process serves one message).
_SETUPS: dict[tuple[tuple[str, Any], ...], FederationSetup] = {}


def dssgd_config(run_config: RunConfig) -> DSSGDConfig:
    """The :class:`~defenses.dssgd.config.DSSGDConfig` of a run_config (keys as ``--run-config``
    spells them, ``upload-fraction`` for ``upload_fraction``; ``dp-epsilon`` 0 means no DP upload).

    Raises:
        ValueError: a value out of range (named as the option).
    """
    given: dict[str, object] = {}
    for field in dataclasses.fields(DSSGDConfig):
        key = field.name.replace("_", "-")
        if key in run_config:
            given[field.name] = run_config[key]
    if not given.get("dp_epsilon"):
        given["dp_epsilon"] = None  # TOML has no null: 0 stands for "not private"
    # Read by the fields' types (the codec of every stored value), then checked by the config itself.
    return spec_from_dict(DSSGDConfig, given)


def setup_from_run_config(run_config: RunConfig) -> FederationSetup:
    """The federation a run_config describes, as ``dpaudit train --defense dssgd`` would build it.

    Keys: ``dataset``, ``data-root`` (empty: the default resolution), ``model``, ``seed``,
    ``split-seed`` (negative: ``seed``), ``member-fraction`` and the :class:`DSSGDConfig` options
    (:func:`dssgd_config`). Deterministic, so every machine builds the same federation.
    """
    from dpaudit.data import make_splits

    key = tuple(sorted((k, run_config[k]) for k in SETUP_KEYS if k in run_config))
    if key not in _SETUPS:
        data_root = str(run_config.get("data-root", "")) or None
        bundle = load_bundle(str(run_config["dataset"]), data_root)
        seed = int(run_config["seed"])
        split_seed = int(run_config.get("split-seed", -1))
        splits = make_splits(
            bundle,
            seed=seed if split_seed < 0 else split_seed,
            member_fraction=float(run_config.get("member-fraction", 0.5)),
        )
        request = TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name=str(run_config["model"]),
            config=dssgd_config(run_config),
            seed=seed,
            progress=False,
        )
        _SETUPS[key] = federation_setup(request, data_root=data_root)
    return _SETUPS[key]


def make_client_app() -> Any:
    """The participants' ClientApp of a real federation (each builds its setup from run_config)."""
    return client_app(setup_from_run_config)


def make_server_app() -> Any:
    """The parameter server's ServerApp of a real federation."""
    return server_app(setup_from_run_config)
