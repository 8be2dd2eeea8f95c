"""The cluster backend: candidates measured on the workers of a Dask cluster.

    evo run --cluster local[:N]          # a LocalCluster of N worker processes on this host
    evo run --cluster tcp://HOST:8786    # a running scheduler (see README: one worker per GPU)

Each Dask worker holds one measuring backend of the run's kind, made the first time a task
lands there and kept for the worker's life: "gpu", a ``GpuBackend`` on the worker's GPU
(one Dask worker per GPU: dask-cuda's LocalCUDACluster, or ``dask worker --nworkers 1``
started with ``CUDA_VISIBLE_DEVICES`` set; inside it, the usual crash-proof GPU worker
process), or "static" (CPU estimates: how CI runs the cluster path). The driver splits a
batch into one task per worker and gathers the answers in order. A GPU worker instruments
clock64 twins on its own host's cores when they are missing.

Where ptxas runs (``compile_on``, ``[cluster] compile``): "workers" splits each batch's
PTX over the workers, each compiling its share on its host's cores (its share of them,
where several workers share a host), so that a cluster's CPUs, not the driver's, bound
the ptxas stage; "driver" compiles here as without a cluster; "auto" (the default) is
"driver" for a ``local`` cluster, whose workers share the driver's cores anyway, and
"workers" for a scheduler address.

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
COMPILE_ON = ("auto", "workers", "driver")  # where ptxas runs (module docstring)


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


def compile_on_worker(ptx_list: list[str], arch: str, threads: int) -> list:
    """CompileResults for ``ptx_list``, assembled on this worker's host (one Dask task)."""
    from harness.compile import compile_many

    return compile_many(ptx_list, arch, workers=threads)


def worker_cpus() -> int:
    return os.cpu_count() or 1


def worker_device(kind: str, options: str, dask_worker=None) -> str:
    """The device this worker's backend measures on (run on every worker at the start,
    by ``Client.run``, which passes the worker itself as ``dask_worker``)."""
    return _worker_backend(kind, options, dask_worker.name if dask_worker else None).device


# --------------------------------------------------------------------------- driver side
def _threads_per_worker(client) -> dict:
    """Worker address -> ptxas threads for its compile share: its host's cores divided
    among the workers on that host (a host with two GPU workers gives each half)."""
    cpus = client.run(worker_cpus)
    hosts: dict = {}
    for address in cpus:
        hosts.setdefault(_host(address), []).append(address)
    return {a: max(1, cpus[a] // len(hosts[_host(a)])) for a in cpus}


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0]


class ClusterBackend(Backend):
    """Measures on a Dask cluster's workers (see the module docstring)."""

    name = "cluster"

    def __init__(self, address: str, kind: str, options: dict | None = None,
                 compile_on: str = "auto"):
        if kind not in INNER:
            raise EvoError(f"--cluster measures with the gpu or static backend, not {kind!r}")
        if compile_on not in COMPILE_ON:
            raise EvoError(f"[cluster] compile = {compile_on!r}: one of {', '.join(COMPILE_ON)}")
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
        if compile_on == "auto":
            compile_on = "driver" if address.split(":")[0] == "local" else "workers"
        self.compile_on = compile_on
        self.compiled_on_workers = 0  # PTX texts the workers assembled
        self._compile_threads = _threads_per_worker(self.client) if compile_on == "workers" \
            else {}
        self.chosen_because = f"{kind} on {len(devices)} Dask workers at {address}" + \
            (", compiling there" if compile_on == "workers" else "")

    def offers(self) -> dict:
        """What the cluster offers now: workers and their threads; a candidate measured at
        once per worker (one GPU each); ptxas on the workers' shares of their hosts' cores
        (``compile_on`` "workers") or here."""
        info = self.client.scheduler_info()["workers"]
        compile_slots = sum(self._compile_threads.values()) if self.compile_on == "workers" \
            else os.cpu_count() or 1
        return {"workers": len(info), "slots": sum(w.get("nthreads", 1) for w in info.values()),
                "measure_slots": len(info), "compile_slots": compile_slots}

    def compile_many(self, ptx_list: list[str], arch: str, workers: int) -> list:
        """ptxas on the workers' hosts (``compile_on`` "workers"), else here: the batch split
        in one share per worker, each share pinned to its worker (another takes it over if
        that worker dies), answers in input order."""
        if self.compile_on != "workers" or not ptx_list:
            return super().compile_many(ptx_list, arch, workers)
        names = sorted(self._compile_threads) or [None]
        parts = max(1, min(len(ptx_list), len(names)))
        futures = [self.client.submit(compile_on_worker, ptx_list[i::parts], arch,
                                      self._compile_threads.get(names[i], 1), pure=False,
                                      workers=[names[i]] if names[i] else None,
                                      allow_other_workers=True)
                   for i in range(parts)]
        try:
            shares = self.client.gather(futures)
        except EvoError as err:  # e.g. no ptxas on a worker: say where
            raise EvoError(f"--cluster {self.address}: compiling on the workers: {err}") from None
        results: list = [None] * len(ptx_list)
        for i, share in enumerate(shares):
            results[i::parts] = share
        self.compiled_on_workers += len(ptx_list)
        return results

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
        if now != self.workers and self.compile_on == "workers":  # restarted ones get shares
            self._compile_threads = _threads_per_worker(self.client)
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
