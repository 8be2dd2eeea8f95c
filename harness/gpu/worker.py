"""The parent side of GPU measurement: one crash-proof worker process per GPU.

A kernel variant can hang its GPU (an infinite loop) or poison its CUDA context for good
(an illegal or misaligned address: every later CUDA call in that process fails with the
same error; DESIGN.md, "Facts measured on an H200"). So the GPU is driven from a child
process, ``harness.gpu.runner.serve``, started with ``multiprocessing``'s *spawn* method
(a fork would copy the parent's threads and any CUDA state into the child).

``GpuWorker.measure(request)`` sends one ``MeasureRequest`` over a pipe and waits up to
``request.timeout_s``:

* an answer arrives           -> that ``Measurement`` (valid or not, with its reason);
* nothing in time             -> SIGKILL the child, ``reason = "timeout"``;
* the child dies (pipe EOF)   -> ``reason = "launch error: worker process died ..."``;
* the child reports that its context is unusable (a sticky CUDA error) -> its
  ``launch error: <cuda error text>`` measurement; the child exits by itself.

In the last three cases a fresh child is started lazily, on the next ``measure``. Nothing
a candidate does raises here; only a worker that cannot start at all (no GPU, no CuPy)
raises ``WorkerStartError``, since every later candidate would fail the same way.

The child's entry point is configurable (``GpuWorker(target=...)``) so that the process
plumbing is tested on machines without a GPU (tests/test_worker_cpu.py).

Protocol (pickled tuples over one ``multiprocessing.Pipe``):
child -> parent once: ``("ready", device_name)`` or ``("error", text)``;
parent -> child: a ``MeasureRequest``, or ``None`` to stop;
child -> parent per request: ``("result", Measurement, alive)`` where ``alive=False``
means the child is about to exit because its CUDA context is unusable.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from genomes.errors import RuntimeFailure
from harness.gpu import input_sets, spawn
from harness import record
from harness.record import Measurement
from genomes.launch import Launch
from harness.kernels.spec import KernelSpec

MIN_CHECK_SEEDS = 5
"""Fewest fresh input sets a variant must pass: one lucky input set proves little."""


class WorkerStartError(RuntimeFailure):
    """The GPU worker process could not start (no GPU, no CuPy, a broken driver)."""


@dataclass(frozen=True)
class MeasureRequest:
    """Everything the worker needs to check and time one variant of one kernel.

    ``cubin`` is the variant, ``baseline_cubin`` the unmodified kernel (its outputs are the
    reference the variant must match), ``clock_cubin`` the variant instrumented with
    ``harness.gpu.instrument.instrument`` (needed when ``spec.timing == "clock64"``).
    Correctness runs on every seed of ``check_seeds``; timing uses ``timing_seed``'s inputs.
    Timing stops once the standard error of the reported cycles (``estimate.central``, a
    smoothed median) is under ``target_rel_sem`` of them (after at least ``min_reps`` samples) or
    after ``max_reps`` samples.
    ``clock_cubin`` may be ``cubin`` itself holding the instrumented twin as entry
    ``clock_entry`` (``harness.gpu.instrument.with_clock_twin``).
    ``launch`` is the variant's grid and block when its genome changed them.
    ``check_reference=True`` also compares the baseline with the spec's NumPy reference
    on the first check seed (to validate the spec itself; ``runner.baseline_outputs``). ``baseline_cycles`` enables the ">10x speedup" flag.
    """

    spec: KernelSpec
    cubin: bytes
    baseline_cubin: bytes
    clock_cubin: bytes | None = None
    check_seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    timing_seed: int = 0
    warmup: int = 10
    min_reps: int = 30
    max_reps: int = 1000
    target_rel_sem: float = 0.005
    timeout_s: float = 10.0
    baseline_cycles: float | None = None
    kernel_name: str = ""
    check_reference: bool = False
    clock_entry: str | None = None  # the timed entry of clock_cubin (None: spec.entry)
    launch: Launch | None = None  # the variant's launch (None: the spec's); the baseline
    # always runs with the spec's own launch

    def __post_init__(self):
        if len(self.check_seeds) < MIN_CHECK_SEEDS:
            raise ValueError(f"need at least {MIN_CHECK_SEEDS} check seeds, got {len(self.check_seeds)}")
        if set(input_sets.timing_seeds(self.timing_seed)) & set(self.check_seeds):
            raise ValueError(f"timing_seed {self.timing_seed} (or the inputs unlike it, seed "
                             f"{input_sets.timing_seeds(self.timing_seed)[1]}) is also a check seed; "
                             "time on other inputs")
        if not 1 <= self.min_reps <= self.max_reps:
            raise ValueError(f"need 1 <= min_reps <= max_reps, got {self.min_reps}, {self.max_reps}")

    @property
    def name(self) -> str:
        """The kernel name recorded in the Measurement."""
        return self.kernel_name or self.spec.name

    def __reduce__(self):
        # KernelSpec.meta is a MappingProxyType, which pickle refuses; send a plain dict
        # and wrap it again on the other side.
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["spec"] = dataclasses.replace(self.spec, meta=dict(self.spec.meta))
        return (_rebuild_request, (values,))


def _rebuild_request(values: dict) -> MeasureRequest:
    spec = values["spec"]
    values["spec"] = dataclasses.replace(spec, meta=MappingProxyType(dict(spec.meta)))
    return MeasureRequest(**values)


def _serve_gpu(conn, device_id: int, arena_handle: bytes | None = None) -> None:
    """The default child entry point; imports CuPy only inside the child."""
    from harness.gpu.runner import serve

    serve(conn, device_id, arena_handle)


COLD_GATE_S = 60.0
"""Added to a request's timeout the first time a child judges a dtype on the GPU: CuPy
compiles the gate's device kernels (NVRTC) on first use, and with an empty kernel cache
that took 15 s of gelu's first measurement on an H200 (40 compiles; 0.05 s once cached;
BENCHMARKS.md, session 13), which a 10 s timeout recorded as a hang."""


class GpuWorker:
    """One GPU, driven from a child process that is restarted after any crash or hang.

    Use as a context manager, or call ``close()``. Not thread-safe: one request at a time
    (a GPU measures one kernel at a time anyway; use one GpuWorker per GPU).
    """

    def __init__(self, device_id: int = 0, *, target: Callable | None = None,
                 start_timeout_s: float = 120.0, lend_arena: bool | None = None):
        self.device_id = device_id
        self.start_timeout_s = start_timeout_s
        self.restarts = 0  # children started after the first, for reports and tests
        self._target = target or _serve_gpu
        self._ctx = spawn.context()  # children never run the caller's script again
        self._proc = None
        self._conn = None
        self._device = ""
        self._started = 0
        self._judged: set[tuple] = set()  # dtypes the current child has judged on the GPU
        # The arena this worker's children measure in, lent once and kept across restarts
        # (harness.gpu.arena), passed as the child's third argument; by default only the real
        # GPU child takes one.
        self._lends_arena = target is None if lend_arena is None else lend_arena
        self._arena: bytes | None = None
        self._keeper = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def pid(self) -> int | None:
        """The current child's process id (None when no child runs)."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        """Start a child and wait for its handshake; WorkerStartError if it cannot start."""
        parent_end, child_end = self._ctx.Pipe()
        args: tuple = (child_end, self.device_id)
        if self._lends_arena:
            args += (self._lend_arena(),)
        proc = self._ctx.Process(target=self._target, args=args,
                                 name=f"evo-gpu{self.device_id}", daemon=True)
        proc.start()
        child_end.close()  # so that the child's death reads as EOF here
        self._proc, self._conn = proc, parent_end
        self._judged = set()
        try:
            if not parent_end.poll(self.start_timeout_s):
                raise WorkerStartError(f"GPU worker {self.device_id} did not start within "
                                       f"{self.start_timeout_s:g} s")
            kind, payload = parent_end.recv()
        except (EOFError, OSError, ValueError, TypeError):
            self._kill()
            raise WorkerStartError(f"GPU worker {self.device_id} died while starting "
                                   f"(exit code {proc.exitcode})") from None
        except WorkerStartError:
            self._kill()
            raise
        if kind != "ready":
            self._kill()
            hint = ""
            if "cupy" in str(payload).lower():
                hint = ("; install CuPy (pip install 'evo-ptx[gpu]') on a machine with an NVIDIA "
                        "GPU, or use --backend static (no GPU) or replay (from a store)")
            raise WorkerStartError(f"GPU worker {self.device_id} could not start: {payload}{hint}")
        self._device = str(payload)
        self.restarts += self._started > 0
        self._started += 1

    def _lend_arena(self) -> bytes | None:
        """This worker's arena handle, lent on first use; None (the child then allocates
        its own and says so in its placement notes) when no keeper can lend one."""
        if self._keeper is None:
            from harness.gpu import arena

            try:
                self._keeper = arena.keeper(self.device_id)
            except Exception:  # no keeper process at all: measuring still works
                return None
            self._arena = self._keeper.lend()
        return self._arena

    def _ensure_started(self) -> None:
        if self._proc is not None:
            return
        try:
            self._start()
        except WorkerStartError:
            if not self._started:
                raise  # never started here: no GPU, no CuPy; retrying will not help
            time.sleep(1.0)  # a restart right after a kill: give the driver a moment, once
            self._start()

    def _kill(self) -> int | None:
        """SIGKILL the child (if still running), reap it, drop the pipe; returns its exit code."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        if proc.is_alive():
            proc.kill()
        proc.join(10)
        return proc.exitcode

    def close(self) -> None:
        """Ask the child to stop, and kill it if it does not within a few seconds; give
        the arena back for the next worker on this GPU."""
        if self._proc is not None:
            try:
                self._conn.send(None)
                self._proc.join(5)
            except (OSError, ValueError):
                pass
            self._kill()
        if self._keeper is not None:
            self._keeper.take_back(self._arena)
            self._keeper, self._arena = None, None

    def __enter__(self) -> GpuWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass

    def device_name(self) -> str:
        """The GPU's name as CUDA reports it ('NVIDIA H200'); starts the child if needed."""
        self._ensure_started()
        return self._device

    # ------------------------------------------------------------------ measuring

    def _cold_gate_s(self, spec) -> float:
        """``COLD_GATE_S`` for the first request of the child to judge these dtypes on the
        GPU, else 0."""
        from harness.gpu.runner import DEVICE_CHECK_BYTES

        if sum(p.nbytes for p in spec.buffers()) < DEVICE_CHECK_BYTES:
            return 0.0
        dtypes = tuple(sorted({p.dtype for p in spec.buffers()}))
        if dtypes in self._judged:
            return 0.0
        self._judged.add(dtypes)
        return COLD_GATE_S

    def _invalid(self, request: MeasureRequest, reason: str, start: float) -> Measurement:
        return Measurement(kernel=request.name, device=self._device, valid=False, reason=reason,
                           backend="gpu", seconds=time.perf_counter() - start)

    def measure(self, request: MeasureRequest) -> Measurement:
        """Check and time one variant in the child; every failure is a Measurement.

        Raises only WorkerStartError (no child can be started at all).
        """
        start = time.perf_counter()
        if self._proc is not None and not self._proc.is_alive():
            self._kill()  # died between requests (killed from outside): not this candidate's fault
        self._ensure_started()
        try:
            self._conn.send(request)
        except (OSError, ValueError):
            # The child died between requests (killed from outside): one fresh try.
            self._kill()
            self._start()
            self._conn.send(request)
        timeout = request.timeout_s + self._cold_gate_s(request.spec)
        try:
            answered = self._conn.poll(timeout)
        except (OSError, ValueError):
            answered = True  # a broken pipe: recv below reports it as a death
        if not answered:
            self._kill()
            return self._invalid(request, f"{record.TIMEOUT}: no answer within {timeout:g} s "
                                          "(hang or infinite loop); worker killed and restarted", start)
        try:
            kind, measurement, alive = self._conn.recv()
            if kind != "result" or not isinstance(measurement, Measurement):
                raise TypeError(f"unexpected answer {kind!r} from the worker")
        except Exception:  # EOF (the child died), a broken pipe, or an answer that did not unpickle
            code = self._kill()
            return self._invalid(request, f"{record.LAUNCH_ERROR}: worker process died "
                                          f"(exit code {code}); restarted", start)
        if not alive:
            self._kill()  # it is exiting by itself; reap it and start afresh next time
        measurement.seconds = time.perf_counter() - start
        return measurement


__all__ = [
    "MIN_CHECK_SEEDS",
    "GpuWorker",
    "MeasureRequest",
    "WorkerStartError",
]
