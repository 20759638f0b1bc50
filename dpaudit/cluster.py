"""What every node of a Ray cluster must share with the driver: the code and the data.

A job that crosses to another machine is a reference to a function of the installed package plus
its arguments (:mod:`dpaudit.executors`); the worker runs *its own* copy of that function on *its
own* copy of the dataset. Stored results are keyed by the code and the data that made them
(issue "Results that cannot lie"), so a node with another checkout, another torch or a replaced
dataset file would hand back results under keys that do not describe them. docs/architecture.md ("Scale")
fans jobs out on Ray (Moritz et al. 2018, "Ray: A Distributed Framework for Emerging AI
Applications", §4.2: tasks are stateless functions scheduled on any node), so before the first
job the driver asks every node for a :class:`NodeReport` and refuses the cluster, in one line,
when a node's differs from its own:

* the **code**: SHA-256 of every file of the project's packages (:data:`PROJECT_PACKAGES`), and
  the versions of the libraries results depend on (:data:`DEPENDENCIES`);
* the **data**: :func:`dpaudit.data.dataset_files` (the MD5 of every file the load reads) of
  each dataset the run uses, read from the data root the jobs will be given (the same path, or
  each node's ``DPAUDIT_DATA_ROOT`` when none is given) — so a node whose data root holds other
  files is refused, and one without it says so.

The same comparison guards each job where it runs (a node that joins after the check is caught
by its first job). Torch-free; :mod:`dpaudit.data` is imported only to read the data.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import socket
from collections.abc import Mapping, MutableSet, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import _validate as v

__all__ = [
    "PROJECT_PACKAGES",
    "DEPENDENCIES",
    "ClusterMismatch",
    "NodeReport",
    "code_manifest",
    "code_fingerprint",
    "node_report",
    "mismatch",
    "package_dirs",
    "check_nodes",
    "gpu_share",
    "ray_notices_to_stderr",
]

#: The project's top-level packages: a job may call into any of them.
PROJECT_PACKAGES: tuple[str, ...] = ("dpaudit", "attacks", "defenses", "reports")
#: Libraries whose version changes results (training numerics, accounting, data loading).
DEPENDENCIES: tuple[str, ...] = ("torch", "numpy", "scipy", "scikit-learn", "dp-accounting", "ray")


class ClusterMismatch(v.InvalidArgument):
    """A node of the cluster has other code or data than the driver (bad setup: exit 2)."""

    argument = "address"


@dataclass(frozen=True, kw_only=True)
class NodeReport:
    """One node's code and data, as the jobs there would see them.

    Attributes:
        node: how to name the node in a message (``ip (node id prefix)``).
        manifest: ``{package file: SHA-256}`` of the project's files and ``{"dist:NAME": version}``
            of :data:`DEPENDENCIES` (:func:`code_manifest`).
        data: dataset → :func:`~dpaudit.data.dataset_files` there.
        data_errors: dataset → why it could not be read there (missing data root, bad checksum).
    """

    node: str
    manifest: Mapping[str, str]
    data: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    data_errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the manifest: equal on two nodes exactly when their code is."""
        return _digest(self.manifest)


def _digest(manifest: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(manifest), sort_keys=True).encode()).hexdigest()


def package_dirs() -> dict[str, str]:
    """Package name → the directory it is imported from here (found, not imported: importing
    them all would load torch in every worker that only reports)."""
    out = {}
    for name in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise ImportError(f"package {name!r} of dpaudit cannot be found")
        out[name] = str(Path(locations[0]).resolve())
    return out


@functools.lru_cache(maxsize=1)
def _manifest() -> tuple[tuple[str, str], ...]:
    entries: dict[str, str] = {}
    for name, directory in package_dirs().items():
        root = Path(directory)
        for path in sorted(root.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            entries[f"{name}/{path.relative_to(root).as_posix()}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    for dist in DEPENDENCIES:
        try:
            entries[f"dist:{dist}"] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            entries[f"dist:{dist}"] = "not installed"
    return tuple(sorted(entries.items()))


def code_manifest() -> dict[str, str]:
    """``{package file: SHA-256}`` of every file of :data:`PROJECT_PACKAGES` (as imported in this
    process) and ``{"dist:NAME": version}`` of :data:`DEPENDENCIES`; computed once per process."""
    return dict(_manifest())


def code_fingerprint() -> str:
    """SHA-256 of :func:`code_manifest`."""
    return _digest(code_manifest())


def _node_name() -> str:
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            return f"{ray.util.get_node_ip_address()} (node {context.get_node_id()[:8]})"
    except Exception:  # not in a Ray worker: name the host
        pass
    return socket.gethostname()


def node_report(datasets: Sequence[str] = (), data_root: str | None = None, *, node: str | None = None) -> NodeReport:
    """This process's :class:`NodeReport` (run on each node by the Ray executor).

    Args:
        datasets: the datasets the jobs read.
        data_root: the data root the jobs are given (``None``: this node's ``DPAUDIT_DATA_ROOT``
            or default, as for the jobs).
        node: the name to give this node (default: its IP and Ray node id).
    """
    data: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    if datasets:
        from dpaudit.data import dataset_files

        for name in datasets:
            try:
                data[name] = dataset_files(name, data_root=data_root)
            except (OSError, ValueError) as exc:  # not found, a checksum that fails, a bad root
                errors[name] = " ".join(str(exc).split())
    return NodeReport(node=node or _node_name(), manifest=code_manifest(), data=data, data_errors=errors)


def _short(digest: str) -> str:
    return digest[:12] + "…"


def _code_difference(driver: Mapping[str, str], worker: Mapping[str, str]) -> str:
    # Files first: an edited module is the likelier story than a library's version.
    changed = sorted(
        (k for k in set(driver) | set(worker) if driver.get(k) != worker.get(k)),
        key=lambda k: (k.startswith("dist:"), k),
    )
    parts = []
    for key in changed[:3]:
        if key.startswith("dist:"):
            parts.append(f"{key[5:]} {worker.get(key, 'missing')} there, {driver.get(key, 'missing')} here")
        elif key not in worker:
            parts.append(f"{key} missing there")
        elif key not in driver:
            parts.append(f"{key} only there")
        else:
            parts.append(key)
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return ", ".join(parts) + more


def mismatch(driver: NodeReport, worker: NodeReport, *, data_root: str | None = None) -> str | None:
    """One line saying how ``worker`` differs from ``driver`` (code first, then data), or None."""
    if worker.fingerprint != driver.fingerprint:
        return (
            f"worker node {worker.node}: code fingerprint "
            f"{_short(worker.fingerprint)} differs from the driver's "
            f"{_short(driver.fingerprint)} "
            f"({_code_difference(driver.manifest, worker.manifest)}); install the "
            "same checkout on every node, or pass --ship-code"
        )
    root = f"data root {data_root!r}" if data_root is not None else "data root (DPAUDIT_DATA_ROOT)"
    for name in sorted(set(driver.data) | set(driver.data_errors)):
        if name in worker.data_errors:
            return (
                f"worker node {worker.node}: dataset {name!r} cannot be read there "
                f"({worker.data_errors[name]}); every node's {root} must hold the same "
                "files"
            )
        theirs, ours = dict(worker.data.get(name, {})), dict(driver.data.get(name, {}))
        if theirs != ours:
            changed = sorted(f for f in set(theirs) | set(ours) if theirs.get(f) != ours.get(f))
            first = changed[0]
            detail = f"{first}: MD5 {theirs.get(first, 'missing')[:12]} there, {ours.get(first, 'missing')[:12]} here"
            more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
            return (
                f"worker node {worker.node}: dataset {name!r} differs from the driver's "
                f"({detail}{more}); every node's {root} must hold the same files"
            )
    return None


def check_here(driver: NodeReport, datasets: Sequence[str], data_root: str | None) -> None:
    """Raises :class:`ClusterMismatch` when this process's code or data differ from ``driver``'s
    (each job's guard; cheap after the first call in a process)."""
    report = node_report(datasets, data_root)
    problem = mismatch(driver, report, data_root=data_root)
    if problem is not None:
        raise ClusterMismatch(problem)


def ship_env() -> dict[str, object]:
    """A Ray ``runtime_env`` that sends this checkout's packages to every worker (``py_modules``),
    so nodes need only the dependencies (:data:`DEPENDENCIES`, at the same versions) installed."""
    return {"py_modules": list(package_dirs().values())}


#: Models up to this many parameters count as small: with DP-SGD's per-example gradients of a
#: batch of 256 they need under 2.5 GB of GPU memory (4 bytes x 256 x 2.5 M), so four fit on a
#: 16 GB GPU with room for activations.
SMALL_MODEL_PARAMETERS = 2_500_000


def gpu_share(num_parameters: int) -> float:
    """The share of one GPU a ``--device cuda`` job asks Ray for (Ray's fractional ``num_gpus``).

    The rule: a small model (at most :data:`SMALL_MODEL_PARAMETERS` parameters — every model of
    the zoo for digits, MNIST, Fashion-MNIST, Adult and the faces) asks for 0.25, so four such
    jobs share one GPU (a single small job leaves most of a GPU idle: its batches are too small
    to fill it); a larger model asks for a whole GPU.
    """
    return 0.25 if int(num_parameters) <= SMALL_MODEL_PARAMETERS else 1.0


# ----------------------------------------------------------------------------- on a Ray cluster
#: How long the nodes get to report their code and data (a node starting Ray workers is slow).
NODE_CHECK_TIMEOUT = 300.0


def _describe_node(datasets: Sequence[str], data_root: str | None) -> NodeReport:
    return node_report(datasets, data_root)


def check_nodes(
    ray: Any, driver: NodeReport, *, datasets: Sequence[str], data_root: str | None, checked: MutableSet[str]
) -> None:
    """Asks every live node of the cluster not in ``checked`` for its :class:`NodeReport` (a task
    pinned to it, using no CPU so that busy nodes answer too) and compares it with ``driver``'s.

    A node that dies before answering is skipped (Ray counts a lost node alive until its health
    checks fail, about 15 s); one that is alive and cannot answer — dpaudit not importable there,
    say — is refused like a node with other code.

    Raises:
        ClusterMismatch: the first node whose code or data differ, in one line.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] not in checked]
    if not nodes:
        return
    describe = ray.remote(num_cpus=0, max_retries=0)(_describe_node)
    refs = [
        describe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)).remote(
            tuple(datasets), data_root
        )
        for n in nodes
    ]
    for n, ref in zip(nodes, refs):
        try:
            report = ray.get(ref, timeout=NODE_CHECK_TIMEOUT)
        except Exception as exc:  # the node died meanwhile, or cannot run our code at all
            if any(m["NodeID"] == n["NodeID"] and m.get("Alive") for m in ray.nodes()):
                raise ClusterMismatch(
                    f"worker node {n.get('NodeManagerAddress')} (node {n['NodeID'][:8]}) did "
                    f"not report its code and data: {' '.join(str(exc).split())[:300]}"
                ) from None
            continue
        problem = mismatch(driver, report, data_root=data_root)
        if problem is not None:
            raise ClusterMismatch(problem)
        checked.add(n["NodeID"])


def ray_notices_to_stderr() -> None:
    """Sends the notices Ray prints on the driver (``(raylet) Task ... failed. There are 3 retries
    remaining``, after a node is lost) to stderr instead of stdout.

    With ``--json``, stdout carries exactly one JSON object (docs/architecture.md, "Command line"); Ray's
    error listener writes these lines to ``sys.stdout``, which broke it. Ray has no setting for
    this, so its module-level printer is wrapped (looked up by name at each call); a Ray without
    it is left alone.
    """
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_dpaudit_stderr", False):
        return

    def to_stderr(data: Any, ignore_prefix: bool) -> Any:
        return original({**data, "is_err": True}, ignore_prefix)

    to_stderr._dpaudit_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr
