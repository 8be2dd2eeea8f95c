"""The cluster backend: candidates measured on the workers of a Dask cluster.

    evo run --cluster local[:N]          # a LocalCluster of N worker processes on this host
    evo run --cluster tcp://HOST:8786    # a running scheduler (see README: one worker per GPU)

Each Dask worker holds one measuring backend of the run's kind, made the first time a task
lands there and kept for the worker's life: "gpu", a ``GpuBackend`` on the worker's GPU
(one Dask worker per GPU: dask-cuda's LocalCUDACluster, or ``dask worker --nworkers 1``
started with ``CUDA_VISIBLE_DEVICES`` set; inside it, the usual crash-proof GPU worker
process), or "static" (CPU estimates: how CI runs the cluster path). The driver submits one
task per candidate and gathers the answers in order; the scheduler runs each on a free
worker, so a batch spreads over the cluster. Candidates arrive compiled; a GPU worker
instruments clock64 twins on its own host's cores when they are missing.

A worker that dies takes its running tasks with it: the scheduler gives them to another
worker (``distributed.scheduler.allowed-failures`` times), so the run goes on, nothing is
lost, and nothing is stored twice (only the driver writes the store). The backend counts
the workers it lost (``lost_workers``; ``describe()`` says so). Results do not depend on
which worker measured what: a GPU candidate's input seeds come from (run seed, kernel,
code hash), and static estimates are pure functions of the code.

Dask is imported here only (``pip install 'evo-ptx[cluster]'``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
from pathlib import Path

from genomes.errors import EvoError
from harness.backends import Backend, Variant
from harness.record import Measurement

INNER = ("auto", "gpu", "static")  # what a cluster worker can measure with (auto: gpu
# when every worker sees a GPU, else static)


def _client_for(address: str):
    """(client, cluster or None) for ``local[:N]`` or a scheduler address."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise EvoError("--cluster needs Dask: pip install 'evo-ptx[cluster]' "
                       "(dask and distributed)") from None
    if address == "local" or address.startswith("local:"):
        count = address.partition(":")[2]
        if count and not (count.isdigit() and int(count) > 0):
            raise EvoError(f"--cluster {address!r}: write local or local:N, N a positive number "
                           "of worker processes")
        # A GPU worker runs the GPU backend, which measures in a child process of its own
        # (crash isolation): Dask's worker processes are daemons unless told otherwise,
        # and a daemon may not have children. Set for this process, so that a worker the
        # nanny restarts after a crash gets it too.
        import dask

        dask.config.set({"distributed.worker.daemon": False})
        # One thread per worker: a worker measures one candidate at a time, as a GPU must.
        cluster = LocalCluster(n_workers=int(count) if count else _local_workers(),
                               threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(cluster), cluster
    try:
        return Client(address, timeout="20s"), None
    except (OSError, TimeoutError) as err:
        raise EvoError(f"--cluster {address}: no Dask scheduler answered ({err})") from None


def _local_workers() -> int:
    """``local`` alone: one worker per visible GPU, else two (static on CPU workers)."""
    from harness.backends import gpu_visible

    ok, _ = gpu_visible()
    if ok:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    return 2


# --------------------------------------------------------------------------- worker side
_BACKENDS: dict = {}  # in each worker process: (kind, options as JSON) -> its backend
_LOCK = threading.Lock()


def _worker_backend(kind: str, options: str, worker_name) -> Backend:
    with _LOCK:
        if (kind, options) not in _BACKENDS:
            from harness.backends import make_backend

            knobs = json.loads(options)
            if kind == "gpu" and "gpus" not in knobs:
                import cupy

                knobs["gpus"] = [gpu_of_worker(worker_name,
                                               cupy.cuda.runtime.getDeviceCount())]
            _BACKENDS[(kind, options)] = make_backend(kind, **knobs)
        return _BACKENDS[(kind, options)]


def gpu_of_worker(name, gpus: int) -> int:
    """The GPU a worker measures on: a LocalCluster names its workers 0..N-1, one per
    visible GPU; a worker started by hand (one per GPU, CUDA_VISIBLE_DEVICES set, as the
    README says) has another name and sees its own GPU as device 0."""
    return name % gpus if isinstance(name, int) and gpus > 0 else 0


def worker_sees_gpu() -> bool:
    from harness.backends import gpu_visible

    return gpu_visible()[0]


def _local_spec(spec, ptx_text: str):
    """The spec with a PTX file this host can read (another host's path may not exist)."""
    if spec.ptx_path.is_file():
        return spec
    folder = Path(tempfile.gettempdir()) / f"evo-cluster-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    path = folder / f"{spec.name}.ptx"
    path.write_text(ptx_text)
    return dataclasses.replace(spec, ptx_path=path)


def measure_on_worker(kind: str, options: str, spec, ptx_text: str, variants: list[Variant],
                      baseline: Measurement | None) -> list[Measurement]:
    """Candidates measured by this worker's backend, in order (one Dask task)."""
    from distributed import get_worker

    backend = _worker_backend(kind, options, get_worker().name)
    return backend.measure_many(_local_spec(spec, ptx_text), variants, baseline)


def worker_device(kind: str, options: str, dask_worker=None) -> str:
    """The device this worker's backend measures on (run on every worker at the start,
    by ``Client.run``, which passes the worker itself as ``dask_worker``)."""
    return _worker_backend(kind, options, dask_worker.name if dask_worker else None).device


# --------------------------------------------------------------------------- driver side
class ClusterBackend(Backend):
    """Measures on a Dask cluster's workers (see the module docstring)."""

    name = "cluster"

    def __init__(self, address: str, kind: str, options: dict | None = None):
        if kind not in INNER:
            raise EvoError(f"--cluster measures with the gpu or static backend, not {kind!r}")
        self.client, self._cluster = _client_for(address)
        if kind == "auto":
            seen = self.client.run(worker_sees_gpu)
            kind = "gpu" if seen and all(seen.values()) else "static"
        self.address, self.kind = address, kind
        self.options = json.dumps(options or {}, sort_keys=True)
        self.wants_clock_ptx = self.remeasures = kind == "gpu"
        try:
            devices = self.client.run(worker_device, kind, self.options)
        except Exception as err:
            self.close()
            hint = ("; start workers with DASK_DISTRIBUTED__WORKER__DAEMON=False (the gpu "
                    "backend measures in a child process)") if "daemonic" in str(err) else ""
            raise EvoError(f"--cluster {address}: a worker could not start its {kind} "
                           f"backend: {type(err).__name__}: {err}{hint}") from None
        if not devices:
            self.close()
            raise EvoError(f"--cluster {address}: the cluster has no workers")
        names = set(devices.values())
        if len(names) != 1:
            self.close()
            raise EvoError(f"--cluster {address}: workers measure on different devices "
                           f"({', '.join(sorted(names))}); results must come from one model")
        self.device = names.pop()
        self.workers = set(devices)
        self.lost_workers = 0
        self.chosen_because = f"{kind} on {len(devices)} Dask workers at {address}"

    def offers(self) -> dict:
        """What the cluster offers now: workers and their threads (measure slots)."""
        info = self.client.scheduler_info()["workers"]
        return {"workers": len(info), "slots": sum(w.get("nthreads", 1) for w in info.values())}

    def measure_many(self, spec, variants: list[Variant],
                     baseline: Measurement | None = None) -> list[Measurement]:
        # One task per worker, not per candidate: a task costs the driver a few ms (on the
        # H100, per-candidate tasks ran at 79 % of the local backend's throughput). A chunk
        # whose worker dies is rerun whole by another; only returned results are recorded.
        ptx_text = spec.ptx_text()
        parts = max(1, min(len(variants), len(self.workers)))
        chunks = [variants[i::parts] for i in range(parts)]
        futures = [self.client.submit(measure_on_worker, self.kind, self.options, spec,
                                      ptx_text, chunk, baseline, pure=False)
                   for chunk in chunks if chunk]
        measured = self.client.gather(futures)
        self._count_lost()
        results: list = [None] * len(variants)
        for i, chunk in enumerate(measured):
            results[i::parts] = chunk
        return results

    def _count_lost(self) -> None:
        now = set(self.client.scheduler_info()["workers"])
        self.lost_workers += len(self.workers - now)
        self.workers = now

    def describe(self) -> str:
        lost = f"; {self.lost_workers} worker(s) lost and their work rerun" \
            if self.lost_workers else ""
        return f"{self.kind} on {self.device} ({self.chosen_because}{lost})"

    def close(self) -> None:
        client, cluster = getattr(self, "client", None), getattr(self, "_cluster", None)
        self.client = self._cluster = None
        for thing in (client, cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # closing must not hide the error that led here
                    pass
