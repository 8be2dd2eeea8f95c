"""The GPU backend: check and time each candidate on real GPUs through ``GpuWorker``s.

One ``GpuWorker`` (a crash-proof child process) per ``--gpus`` id. A worker measures one
candidate at a time, so measurements on one GPU never overlap; with several GPUs the
candidates of a batch are spread over them (one thread per GPU pulls the next candidate).
Work that runs processes of its own on a GPU (a finalist check, a peer's timing) borrows one
GPU (``lend``): no candidate goes to it meanwhile, and the other GPUs go on measuring.
All GPUs must be the same model: results are stored under one device name, and the store
must never mix devices.

Per kernel the backend compiles, once, the baseline cubin (its outputs are the reference
every variant must match) and, for ``timing == "clock64"`` specs, the instrumented variants
(``harness.gpu.instrument``). Each candidate is checked on five fresh input seeds and timed on
a separate one, all drawn from an RNG seeded by (run seed, kernel, code hash): fresh for
every candidate, yet the same whichever order, GPU or resumed run measures it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import random
import socket
import threading

from genomes.errors import EvoError
from harness.backends import Backend, Variant
from harness.compile import compile_many, compile_ptx
from harness.record import Measurement

#: Fresh input sets per candidate for the correctness gate.
CHECK_SEEDS = 5

class IdleWorkers:
    """The workers free to measure. A measurement takes any; a finalist check the one it
    was booked on (``GpuBackend.book``), and while a check waits for its worker no
    measurement is given that one, so the check waits for one candidate at most."""

    def __init__(self, workers):
        self._cond = threading.Condition()
        self._free = list(workers)
        self._wanted: dict = {}  # worker -> checks waiting for it

    def take(self, worker=None):
        """``worker`` once it is free, or any free worker no check waits for."""
        with self._cond:
            if worker is None:
                self._cond.wait_for(lambda: any(w not in self._wanted for w in self._free))
                worker = next(w for w in self._free if w not in self._wanted)
            else:
                self._wanted[worker] = self._wanted.get(worker, 0) + 1
                try:
                    self._cond.wait_for(lambda: worker in self._free)
                finally:
                    self._wanted[worker] -= 1
                    if not self._wanted[worker]:
                        del self._wanted[worker]
                        self._cond.notify_all()  # given up (interrupted): others may take it
            self._free.remove(worker)
            return worker

    def give(self, worker) -> None:
        with self._cond:
            self._free.append(worker)
            self._cond.notify_all()

    def count(self) -> int:
        with self._cond:
            return len(self._free)


class GpuBackend(Backend):
    """Measures on the GPUs ``gpus`` (CUDA device ids); see the module docstring."""

    wants_clock_ptx = True
    remeasures = True

    name = "gpu"

    def __init__(self, gpus: list[int], *, seed: int = 0, arch: str = "sm_90",
                 timeout_s: float = 10.0, worker_factory=None, check_sets: int = CHECK_SEEDS,
                 timing: dict | None = None):
        from harness.gpu.worker import GpuWorker

        if not gpus or len(set(gpus)) != len(gpus):
            raise EvoError(f"--gpus needs distinct device ids, got {gpus}")
        self.gpus = list(gpus)
        factory = worker_factory or GpuWorker
        self.arch, self.timeout_s = arch, timeout_s
        # Timing knobs passed to every MeasureRequest (warmup, min_reps, max_reps,
        # target_rel_sem); check_sets = fresh input sets per candidate.
        self.check_sets, self.timing = check_sets, dict(timing or {})
        self.seed = seed
        self.workers = []
        try:
            for gpu in gpus:
                self.workers.append(factory(gpu))
            # each starts its processes (its arena keeper, then itself: CuPy imported and a
            # context made, seconds each): all GPUs at once, not one after another
            with concurrent.futures.ThreadPoolExecutor(len(self.workers)) as pool:
                names = set(pool.map(lambda worker: worker.device_name(), self.workers))
        except BaseException:
            self.close()
            raise
        if len(names) != 1:
            self.close()
            raise EvoError(f"GPUs {gpus} are different models ({', '.join(sorted(names))}); "
                           "measure on one model at a time so results are comparable")
        self.device = names.pop()
        self.gpus = list(gpus)
        # One pool of idle workers for the backend, not per call: two batches measured
        # at once (a pipelined caller) must never talk to one worker at the same time.
        self._idle = IdleWorkers(self.workers)
        self._sharing = threading.Condition()  # guards the three below
        self._booked = {w: 0 for w in self.workers}  # worker -> finalist checks booked on it
        self._shared: dict = {}  # worker lent to sharers -> how many hold it
        self._lent: set = set()  # the shared workers already taken from the idle pool
        self.host = socket.gethostname()
        self._baseline_cubins: dict[str, bytes] = {}

    # ------------------------------------------------------------------ per kernel
    def _baseline_cubin(self, spec) -> bytes:
        """The unmodified kernel's cubin, compiled once per kernel (the correctness reference)."""
        if spec.name not in self._baseline_cubins:
            result = compile_ptx(spec.ptx_text(), self.arch)
            if not result.ok:
                raise EvoError(f"kernel {spec.name}: the baseline PTX does not assemble: {result.error}")
            self._baseline_cubins[spec.name] = result.cubin
        return self._baseline_cubins[spec.name]

    def _clock_cubins(self, spec, variants: list[Variant]) -> list[bytes | str | None]:
        """Instrumented cubins for clock64 specs (an error text where that failed), else None."""
        if spec.timing != "clock64":
            return [None] * len(variants)
        from harness.gpu.instrument import instrument

        texts: list[str | None] = []
        errors: dict[int, str] = {}
        for i, v in enumerate(variants):
            try:
                texts.append(instrument(v.ptx, spec.entry))
            except EvoError as err:
                texts.append(None)
                errors[i] = f"cannot instrument for clock64: {err}"
        todo = [t for t in texts if t is not None]
        compiled = iter(compile_many(todo, self.arch, workers=os.cpu_count()))
        out: list[bytes | str | None] = []
        for i, text in enumerate(texts):
            if text is None:
                out.append(errors[i])
                continue
            c = next(compiled)
            out.append(c.cubin if c.ok else f"instrumented variant does not assemble: {c.error}")
        return out

    def prepare(self, spec, variants: list[Variant]) -> None:
        """Instrument and assemble the clock64 cubins ahead of measuring (CPU work), for
        the variants that do not have theirs yet (the Evaluator's apply pool usually
        assembles each variant with its twin in one module)."""
        todo = [v for v in variants if v.clock_cubin is None]
        if spec.timing == "clock64" and todo:
            for v, clock in zip(todo, self._clock_cubins(spec, todo)):
                v.clock_cubin = clock

    def timeout_for(self, spec, reference: bool = False) -> float:
        """Seconds a worker may take for one candidate: ``timeout_s``, plus time to make,
        upload, read back and compare each input set of a kernel with large buffers (a
        DRAM-sized kernel's 512 MB took over 10 s on an H100; about 4 s per 256 MB per set
        is allowed, the baseline's launches and the stress check included). ``reference``:
        the baseline, also compared with the spec's NumPy reference on one set (gelu's
        on 64M floats takes seconds), 8 s per 256 MB more. Why: in session 6's
        bench_peer call gelu_dram's baseline came back without a time while its variant
        passed; the reference check is the likely cost (not confirmed on a GPU)."""
        sets = self.check_sets + 2
        data = sum(p.nbytes for p in spec.buffers())
        return self.timeout_s + (sets * 4.0 + (8.0 if reference else 0.0)) * data / (256 << 20)

    def offers(self) -> dict:
        return {**super().offers(), "measure_slots": len(self.workers)}  # one per GPU

    @contextlib.contextmanager
    def book(self):
        """The device id a finalist check will run on, chosen before its processes start,
        so that they make their CUDA context there and on no other GPU before their turn
        (``lend(share=True, device=...)``): the GPU fewest checks are booked on. Made in
        the turn, sixteen checks' contexts at once on four GPUs held each GPU 8-15 s a
        check, made before 0.2-5 s (BENCHMARKS.md, session 23)."""
        with self._sharing:
            worker = min(self.workers, key=lambda w: self._booked[w])
            self._booked[worker] += 1
        try:
            yield worker.device_id
        finally:
            with self._sharing:
                self._booked[worker] -= 1

    @contextlib.contextmanager
    def lend(self, share: bool = False, device: int | None = None):
        """One GPU, its device id, kept from measurements while the caller holds it (a
        finalist check's processes, a peer's timing); taken once its current candidate
        is done. ``share``: callers that may run beside one another (finalist checks: they
        time nothing) hold the GPU ``device`` together (booked with ``book``; None: booked
        here); it goes back to measuring when the last of them is done. Otherwise any idle
        GPU, to the caller alone. The other GPUs go on measuring meanwhile; before, a
        finalist check held every GPU of the run (with two GPUs resnet50's model job ran
        1.37x faster than with one, BENCHMARKS.md session 17)."""
        if not share:
            worker = self._idle.take()
            try:
                yield worker.device_id
            finally:
                self._idle.give(worker)
            return
        if device is None:
            with self.book() as booked, self.lend(share=True, device=booked) as gpu:
                yield gpu
            return
        worker = next(w for w in self.workers if w.device_id == device)
        with self._sharing:
            self._shared[worker] = self._shared.get(worker, 0) + 1
            first = self._shared[worker] == 1
        try:
            if first:  # takes it from the measurements; later sharers wait for that
                self._idle.take(worker)
                with self._sharing:
                    self._lent.add(worker)
                    self._sharing.notify_all()
            else:
                with self._sharing:
                    self._sharing.wait_for(lambda: worker in self._lent)
            yield device
        finally:
            with self._sharing:
                self._shared[worker] -= 1
                if not self._shared[worker]:
                    del self._shared[worker]
                    if worker in self._lent:
                        self._lent.discard(worker)
                        self._idle.give(worker)

    # ------------------------------------------------------------------ measuring
    def measure_many(self, spec, variants: list[Variant],
                     baseline: Measurement | None = None) -> list[Measurement]:
        """Check and time each variant; results in order. Failures are invalid Measurements."""
        from harness.gpu.worker import MeasureRequest

        base_cubin = self._baseline_cubin(spec)
        if any(v.clock_cubin is None for v in variants):
            self.prepare(spec, variants)
        clocks = [v.clock_cubin if spec.timing == "clock64" else None for v in variants]
        base_cycles = baseline.cycles if baseline is not None and baseline.valid else None
        jobs: list[tuple[int, MeasureRequest | str]] = []
        for i, (v, clock) in enumerate(zip(variants, clocks)):
            # Seeds depend on the candidate alone (a str seed is hashed with SHA-512, not
            # Python's salted hash), so they do not depend on order, GPU or resume.
            rng = random.Random(f"{self.seed}:{spec.name}:{v.code_hash or v.ptx_hash}")
            seeds = tuple(rng.sample(range(1, 2**31), self.check_sets + 1))
            if isinstance(clock, str):
                jobs.append((i, clock))
                continue
            if spec.timing == "clock64" and v.launch is not None and math.prod(v.launch.grid) > 1:
                jobs.append((i, f"clock64 timing measures one block; this genome launches "
                                f"{math.prod(v.launch.grid)} (time the kernel with events)"))
                continue
            jobs.append((i, MeasureRequest(
                spec=spec, cubin=v.compiled.cubin, baseline_cubin=base_cubin, clock_cubin=clock,
                check_seeds=seeds[:-1], timing_seed=seeds[-1], **self.timing,
                timeout_s=self.timeout_for(spec, v.is_baseline and spec.reference is not None),
                baseline_cycles=base_cycles, kernel_name=spec.name,
                check_reference=v.is_baseline and spec.reference is not None,
                clock_entry=v.clock_entry, launch=v.launch)))

        idle = self._idle

        def run(job) -> Measurement:
            i, request = job
            if isinstance(request, str):
                return Measurement(kernel=spec.name, device=self.device, valid=False,
                                   reason=f"launch error: {request}", backend=self.name)
            worker = idle.take()  # whichever GPU is free: one candidate per GPU at a time
            try:
                m = worker.measure(request)
            finally:
                idle.give(worker)
            m.notes = {**m.notes, "gpu": worker.device_id, "host": self.host}
            return m

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.workers)) as pool:
            results = list(pool.map(run, jobs))
        return [self._complete(m, v) for m, v in zip(results, variants)]

    def _complete(self, m: Measurement, v: Variant) -> Measurement:
        """Add what the worker cannot know: ptxas's figures and the hashes."""
        c = v.compiled
        return dataclasses.replace(
            m, device=self.device, backend=self.name, registers=c.registers,
            spill_stores=c.spill_stores, spill_loads=c.spill_loads, shared_mem=c.shared_mem,
            ptx_hash=v.ptx_hash, sass_hash=v.code_hash)

    def close(self) -> None:
        for w in getattr(self, "workers", []):
            try:
                w.close()
            except Exception:  # closing must not hide the error that led here
                pass
        self.workers = []
