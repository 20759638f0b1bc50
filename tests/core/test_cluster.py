"""The code and data every node must share with the driver (dpaudit.cluster), without a cluster.

The real two-node cluster (a node with another checkout or data root refused before any job)
is tests/cluster/test_ray_cluster.py (``-m cluster``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dpaudit.cluster import ClusterMismatch, NodeReport, check_here, code_manifest, mismatch, node_report

ROOT = Path(__file__).resolve().parents[2]


def _driver() -> NodeReport:
    return NodeReport(
        node="driver",
        manifest={"dpaudit/a.py": "1" * 64, "dpaudit/b.py": "2" * 64, "dist:torch": "2.4.0"},
        data={"mnist": {"mnist/train.idx": "a" * 32}},
    )


def test_the_manifest_covers_every_file_of_the_packages_as_imported_here() -> None:
    manifest = code_manifest()
    ours = ROOT / "dpaudit" / "cluster.py"
    assert manifest["dpaudit/cluster.py"] == hashlib.sha256(ours.read_bytes()).hexdigest()
    assert {k.split("/")[0] for k in manifest if not k.startswith("dist:")} == {
        "dpaudit",
        "attacks",
        "defenses",
        "reports",
    }
    assert "dist:torch" in manifest and not any("__pycache__" in k for k in manifest)


def test_same_code_and_data_pass() -> None:
    driver = _driver()
    assert mismatch(driver, NodeReport(node="10.0.0.2", manifest=dict(driver.manifest), data=dict(driver.data))) is None


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"dpaudit/b.py": "3" * 64}, "(dpaudit/b.py); install the same checkout on every node"),
        ({"dist:torch": "2.5.1"}, "(torch 2.5.1 there, 2.4.0 here)"),
        ({"dpaudit/c.py": "4" * 64}, "(dpaudit/c.py only there)"),
    ],
)
def test_other_code_is_one_line_naming_the_node_the_fingerprints_and_the_file(change, needle) -> None:
    driver = _driver()
    worker = NodeReport(node="10.0.0.2 (node ab12cd34)", manifest={**driver.manifest, **change}, data=dict(driver.data))
    line = mismatch(driver, worker)
    assert line is not None and "\n" not in line
    assert line.startswith(
        "worker node 10.0.0.2 (node ab12cd34): code fingerprint "
        f"{worker.fingerprint[:12]}… differs from the driver's "
        f"{driver.fingerprint[:12]}…"
    )
    assert needle in line


def test_other_or_missing_data_is_one_line_naming_the_file() -> None:
    driver = _driver()
    other = NodeReport(node="n2", manifest=dict(driver.manifest), data={"mnist": {"mnist/train.idx": "b" * 32}})
    assert mismatch(driver, other, data_root="/data") == (
        "worker node n2: dataset 'mnist' differs from the driver's "
        f"(mnist/train.idx: MD5 {'b' * 12} there, {'a' * 12} here); every node's "
        "data root '/data' must hold the same files"
    )
    missing = NodeReport(
        node="n2", manifest=dict(driver.manifest), data_errors={"mnist": "dataset 'mnist' not found under /data"}
    )
    assert "dataset 'mnist' cannot be read there (dataset 'mnist' not found under /data)" in (
        mismatch(driver, missing) or ""
    )


def test_a_job_on_a_node_with_other_code_refuses_to_run() -> None:
    here = node_report()
    check_here(here, (), None)  # the same process: passes
    driver = NodeReport(node="driver", manifest={**here.manifest, "dpaudit/cluster.py": "0" * 64})
    with pytest.raises(ClusterMismatch, match=r"\(dpaudit/cluster.py\)") as info:
        check_here(driver, (), None)
    assert info.value.argument == "address"  # the CLI names --address, exit 2


def test_ray_notices_on_the_driver_go_to_stderr_so_json_stdout_stays_one_object(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Seen on a real cluster: after a lost node, Ray printed "(raylet) Task _ray_call failed.
    # There are 3 retries remaining" on the driver's stdout, before --json's object.
    pytest.importorskip("ray")
    from ray._private import worker as ray_worker

    from dpaudit.cluster import ray_notices_to_stderr

    ray_notices_to_stderr()
    ray_notices_to_stderr()  # idempotent: one wrapper
    ray_worker.print_to_stdstream(
        {"lines": ["Task _ray_call failed. There are 3 retries remaining"], "pid": "raylet", "is_err": False},
        ignore_prefix=False,
    )
    out, err = capsys.readouterr()
    assert out == "" and "3 retries remaining" in err
