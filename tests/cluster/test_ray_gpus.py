"""``--device cuda`` jobs ask Ray for a share of a GPU, checked with Ray's own resource accounting
on a CPU machine: ``ray.init(num_gpus=1)`` declares one logical GPU, which Ray schedules like a
real one (CI has no GPU). Opt-in with the cluster tier (``-m cluster``): a local Ray starts here.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

pytest.importorskip("ray")

pytestmark = pytest.mark.cluster


def test_small_model_jobs_share_one_gpu_four_at_a_time_and_a_gpu_less_cluster_is_refused() -> None:
    import ray

    from dpaudit.app.cost import count_parameters, ray_gpus
    from dpaudit.cluster import ClusterMismatch, gpu_share
    from dpaudit.executors.jobs import Job
    from dpaudit.executors.ray_tasks import RayExecutor

    # The rule: the zoo's small models take a quarter of a GPU, big ones a whole GPU, CPU none.
    mlp = count_parameters("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    assert ray_gpus("cuda", mlp) == 0.25 and ray_gpus("cpu", mlp) == 0.0 and gpu_share(50_000_000) == 1.0

    # Eight CPUs, one (logical) GPU: eight jobs of 0.25 GPU run four at a time, held by the GPU.
    with RayExecutor(workers=8, num_gpus=0.25, init_kwargs={"num_gpus": 1}) as ex:
        jobs = [Job(key=f"j{i}", fn=subprocess.run, kwargs={"args": ["sleep", "6"]}) for i in range(8)]
        done: list[object] = []
        runner = threading.Thread(target=lambda: done.extend(ex.run(jobs)))
        runner.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # sample Ray's accounting while the first wave runs
            if ray.is_initialized() and 8 - ray.available_resources().get("CPU", 0) >= 4:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # a fifth job would have started by now if the GPU did not hold it back
        free = ray.available_resources()
        assert (8 - free.get("CPU", 0), 1 - free.get("GPU", 0)) == (4, 1.0)  # four jobs, the whole GPU
        runner.join(120)
        assert len(done) == 8
    assert not ray.is_initialized()

    # A cluster without a GPU refuses --device cuda jobs in one line, before any runs.
    with RayExecutor(workers=1, num_gpus=0.25) as ex:
        with pytest.raises(ClusterMismatch, match=r"no node of the cluster has a GPU"):
            list(ex.run([Job(key="j", fn=subprocess.run, kwargs={"args": ["true"]})]))
