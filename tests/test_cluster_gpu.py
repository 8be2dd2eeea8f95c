"""The cluster backend with gpu workers (GPU machine, Dask carried as wheels): a local
cluster's workers measure on the GPU, and one killed while a batch is in flight loses
nothing (its candidates are measured by the other worker, the run goes on)."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import pytest

from genomes.genome import parse_inline
from harness.backends import make_backend
from harness.evaluate import Evaluator
from harness.store import Store
from harness.kernels.suite import find_kernel

pytestmark = pytest.mark.gpu
pytest.importorskip("distributed")

GENOMES = ["coarsen(k=2)", "coarsen(k=4)", "coarsen(k=8)", "block(threads=128)",
           "block(threads=512)", "ptxas_opt(level=1)", "cache_ld(policy=cs)",
           "ld_evict(priority=evict_first)"]


def _busy_worker(client, batch, timeout_s: float = 120.0) -> str:
    """The address of a worker measuring a chunk of the batch, as soon as one is (a fixed
    sleep before the kill let the whole batch finish first once: nothing was lost)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not batch.done():
        for worker, tasks in client.processing().items():
            if any("measure_on_worker" in str(t) for t in tasks):
                return worker
        time.sleep(0.02)
    raise AssertionError("no worker was seen measuring before the batch ended")


def test_gpu_workers_measure_and_a_worker_killed_mid_batch_loses_nothing():
    spec = find_kernel("relu")
    genomes = [parse_inline(g) for g in GENOMES]
    with make_backend("gpu", cluster="local:2") as cluster, Store(":memory:") as store:
        assert cluster.kind == "gpu" and cluster.offers()["workers"] == 2
        evaluator = Evaluator(cluster, store)
        pids = cluster.client.run(os.getpid)  # worker address -> its process
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            batch = pool.submit(evaluator.evaluate, spec, genomes)
            os.kill(pids[_busy_worker(cluster.client, batch)], signal.SIGKILL)
            got = batch.result(timeout=400)
        assert cluster.lost_workers >= 1 and "lost" in cluster.describe()
    assert len(got) == len(genomes)
    assert all(m.valid and m.timer == "events" for m in got), [m.reason for m in got]
    assert evaluator.stats.measured <= len(genomes) + 1  # once each (and the baseline)
