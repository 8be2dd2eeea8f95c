"""The GPU side of measurement: runs inside the worker process that ``harness.gpu.worker`` starts.

``serve(conn, device_id)`` owns one CUDA context (through CuPy, imported here only) and
answers ``MeasureRequest``s with ``Measurement``s. For each request:

1. **Correctness gate**, per check seed: inputs from ``input_sets.make_inputs``; the baseline's
   outputs on them (computed once per (kernel, baseline cubin, seed) and cached); then the
   variant: upload inputs, poisoned outputs and canaries, launch, synchronize, read every
   buffer back with its canary and let ``gate.check_launch`` judge. The first failure is
   the answer. A baseline that itself fails is reported as ``baseline failed: ...``.
   One more launch has its outputs pre-filled with the variant's own results on another
   seed instead of the poison: a variant that skips its work when it finds its outputs
   written keeps a wrong answer. Before each checked launch every byte of the arena outside
   the buffers is set to the canary byte, and checked after it (``guard_ranges``).
   For a small kernel judged on the host the same launches are queued, with one wait and
   one read back for all of them, the guards filled once before them and compared after
   each (``harness.gpu.queued_checks``).
2. **Timing** (``harness.gpu.timing``): ``clock64`` specs launch the instrumented cubin
   in batches, each launch writing its own slice of one clock buffer; ``events`` specs
   replay a captured CUDA graph between two events and convert microseconds to cycles at
   the SM clock measured just before and after. Timed launches alternate between two input
   sets (clock64: outputs restored before each launch) and the buffers timed are judged
   afterwards (``check_sets``): they must do the work. Events specs are then timed on
   outputs wiped before each launch (``harness.gpu.reuse_probe``): a variant timed faster
   than it runs there (where its outputs held its last answer) is ``result reuse``.
3. **Once more after timing**, on the stress inputs of the first check seed
   (``input_sets.stress_seed``: heavy tails, large magnitudes, compared norm-wise). After timing,
   so that a variant that keeps state across launches (a launch counter in a ``.global``)
   and stops working once the checks seem over is seen; on stress inputs, so that an
   approximation valid only over the normal fills' range is seen (queued as the checks
   are, for a small kernel).

A CUDA error is a ``launch error: <cuda error text>`` result. After any failed request
``healthy()`` probes the context; a sticky error (illegal address, misaligned address,
launch failure ...) leaves it unusable, so ``serve`` answers and then exits, and the parent
starts a fresh process. Loaded modules, inputs and baseline outputs are cached across
requests for speed.

Where buffers lie, and the guards around them: ``harness.gpu.buffers``.
"""

from __future__ import annotations

import hashlib
import os
import time
import traceback
from collections import OrderedDict

import numpy as np

from harness.gpu import gate, timing as gpu_timing, input_sets, reuse_probe
from harness import record
from harness.phases import Phases, no_phases
from harness.gpu.buffers import BUFFER_ALIGN, RESERVED_BYTES, ArenaBuffers, cache_get, cache_put, spec_key
from harness.gpu.baselines import (BASELINE_FAILED, DEVICE_SEEDS_KEPT, SEEDS_KEPT,  # noqa: F401
                                   BaselineOutputs, _Failed)
from harness.gpu.queued_checks import QueuedChecks
from harness.gpu.estimate import summarize
from harness.gpu.timing import STICKY_MARKERS, TimingFailed
from harness.record import Measurement

_CACHE_LIMITS = {"modules": 256, "seeds": SEEDS_KEPT}
DEVICE_CHECK_BYTES = 1 << 20
"""Kernels whose buffers hold this many bytes or more are judged on the GPU: their seeds'
inputs and images stay in device memory (one kernel's at a time), launches read back into
device copies, and ``gate.check_launch`` runs on CuPy arrays. Host copies and NumPy
comparisons of a 64M-element kernel took tens of seconds per variant (BENCHMARKS.md,
session 6). Measured again with timed launches checked too (H200, session 12): a 1M-float
relu's measurement took 0.34 s judged on the host, 0.05 s on the GPU; so from 1 MiB on.
Tiny kernels (gemm tiles) keep the host path, whose arrays cost nothing to move."""

# ---------------------------------------------------------------------- the runner


MAX_DYNAMIC_SHARED_ATTRIBUTE = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
DEFAULT_DYNAMIC_SHARED = 48 * 1024  # what a launch may ask for without the attribute


def allow_shared(cp, fn, nbytes: int):
    """``fn``, allowed ``nbytes`` of dynamic shared memory: a launch asking for more than
    48 KiB (Triton's GEMM templates ask for 96 KiB and more) fails with
    CUDA_ERROR_INVALID_VALUE until the function's attribute says it may."""
    if nbytes > DEFAULT_DYNAMIC_SHARED:
        cp.cuda.driver.funcSetAttribute(fn.ptr, MAX_DYNAMIC_SHARED_ATTRIBUTE, int(nbytes))
    return fn


class Runner(ArenaBuffers, BaselineOutputs, QueuedChecks):
    """One CUDA context on one device, with the caches that make a request cheap."""

    phases = staticmethod(no_phases)  # a request's harness.phases.Phases while it is measured

    def __init__(self, device_id: int, arena_handle: bytes | None = None):
        import cupy

        self.cp = cupy
        self.cuda_errors = (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError)
        cupy.cuda.Device(device_id).use()
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        name = props["name"]
        self.device_name = name.decode() if isinstance(name, bytes) else str(name)
        self.l2_bytes = int(props["l2CacheSize"])
        # Graph capture needs a stream other than the legacy default one.
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self._arena, self.arena_source = self._open_arena(arena_handle)
        self.probe_out = self._arena[:32].view(cupy.uint64)
        self.settle_out = self._arena[64:96]  # gpu_timing's settle kernel writes here
        self.clock_buf = self._arena[BUFFER_ALIGN:RESERVED_BYTES].view(cupy.uint64)
        self._modules: OrderedDict = OrderedDict()
        self._digests: dict[bytes, str] = {}  # cubin -> its sha256 (``digest``)
        self._buffers: OrderedDict = OrderedDict()
        self._seeds: OrderedDict = OrderedDict()  # (spec, seed) -> inputs, images
        self._device_seeds: OrderedDict = OrderedDict()  # the same, on the GPU, one spec's
        self._baselines: OrderedDict = OrderedDict()  # (spec, baseline, seed, ref?) -> outputs
        self.own_kernels: dict = {}  # gpu_timing's probe and settle kernels, by entry name
        self.copy_rates: dict = {}  # gpu_timing.copy_gbps's figures, by (bytes, caches)
        self._buffer_sets: OrderedDict = OrderedDict()  # timing's sets of the buffers
        self._guard_tables: OrderedDict = OrderedDict()  # guard ranges on the device, by layout
        self._l2_flush = None  # cold clock64 timing's flush buffer (2x the L2), made once
        self._scratch = None  # harness.gpu.reuse_probe's target for an inout kernel's kept launches
        self._staging: dict = {}  # queued checks' copies of the buffers (queued_checks), one spec's
        self._timing_images: OrderedDict = OrderedDict()  # clock64 timing's images, per spec and slot
        self.batch_graphs: OrderedDict = OrderedDict()  # clock64 batches' graphs (batch_graphs)
        gpu_timing.spin_up(self)

    # -------------------------------------------------------------- plumbing

    def function(self, cubin: bytes, entry: str, shared_mem: int = 0):
        """The kernel ``entry`` of ``cubin``, loaded once per distinct cubin (in-memory load):
        a variant and its clock64 twin share one cubin (``instrument.with_clock_twin``);
        allowed ``shared_mem`` bytes of dynamic shared memory (``allow_shared``)."""
        key = self.digest(cubin)
        module = cache_get(self._modules, key)
        if module is None:
            module = self.cp.cuda.function.Module()
            module.load(bytes(cubin))
            cache_put(self._modules, key, module, _CACHE_LIMITS["modules"])
        # a lookup in the loaded module, microseconds
        return allow_shared(self.cp, module.get_function(entry), shared_mem)

    def digest(self, cubin: bytes) -> str:
        """sha256 of a cubin, once per cubin: a one-thread tile's candidate looks its two
        cubins up ~30 times (a dict keyed by the bytes: Python keeps their hash)."""
        found = self._digests.get(cubin)
        if found is None:
            if len(self._digests) >= 2 * _CACHE_LIMITS["modules"]:
                self._digests.clear()
            found = self._digests[cubin] = hashlib.sha256(cubin).hexdigest()
        return found

    def judged_on_device(self, spec) -> bool:
        """Whether the spec's launches are checked on the GPU (``DEVICE_CHECK_BYTES``)."""
        return sum(p.nbytes for p in spec.buffers()) >= DEVICE_CHECK_BYTES

    def seed_data(self, spec, seed: int) -> tuple[dict, dict]:
        """(inputs, upload images) for one seed: outputs poisoned, every buffer with its
        canary. Host arrays, or device arrays for a kernel judged on the GPU (then the
        inputs' buffers are views of their images)."""
        key = (spec_key(spec), seed)
        if self.judged_on_device(spec):
            data = cache_get(self._device_seeds, key)
            if data is None:
                if any(k[0] != key[0] for k in self._device_seeds):
                    self._device_seeds.clear()  # another kernel's: free its gigabytes
                with self.phases("inputs drawn"):
                    data = self._make_seed_data(spec, seed, self.cp)
                data = cache_put(self._device_seeds, key, data, DEVICE_SEEDS_KEPT)
            return data
        data = cache_get(self._seeds, key)
        if data is None:
            with self.phases("inputs drawn"):
                data = self._make_seed_data(spec, seed, np)
            data = cache_put(self._seeds, key, data, _CACHE_LIMITS["seeds"])
        return data

    @staticmethod
    def _make_seed_data(spec, seed: int, xp) -> tuple[dict, dict]:
        inputs = input_sets.make_inputs(spec, seed, xp)
        images = {p.name: gate.with_canary(gate.poisoned(p, xp) if p.role == "out" else inputs[p.name])
                  for p in spec.buffers()}
        if xp is not np:  # one copy of each input on the device: its image holds it
            for p in spec.buffers():
                if p.role != "out":
                    inputs[p.name] = images[p.name][:p.nbytes].view(inputs[p.name].dtype)
        return inputs, images

    def check_sets(self, request, sets: list[dict], seeds: list[int], when: str,
                   canary_only: frozenset[str] = frozenset()) -> None:
        """Each of ``sets`` (buffers last uploaded with seed ``seeds[i % len(seeds)]``'s
        images, then launched on) judged against the baseline's outputs on its inputs;
        raises _Failed with the first reason. Timing calls it on the buffers it timed:
        a launch that skipped its work left the poison or another input's answer."""
        spec = request.spec
        device = self.judged_on_device(spec)
        for i, bufs in enumerate(sets):
            seed = seeds[i % len(seeds)]
            after = {name: (buf if device else buf.get()) for name, buf in bufs.items()}
            inputs, _ = self.seed_data(spec, seed)
            ok, reason = gate.check_launch(spec, inputs, after, self.baseline_outputs(request, seed),
                                           canary_only=canary_only)
            if not ok:
                raise _Failed(f"{reason} ({input_sets.seed_label(seed)}, timed buffers {i}, {when})")

    def launch(self, fn, spec, args, stream=None, shape=None) -> None:
        """Launch ``fn`` with the spec's grid and block, or ``shape`` (a Launch) if given."""
        grid, block = (shape.grid, shape.block) if shape is not None else (spec.grid, spec.block)
        fn(grid, block, tuple(args), shared_mem=spec.shared_mem, stream=stream)

    def run_checked(self, fn, spec, seed: int, shape=None, images: dict | None = None) -> dict:
        """Upload one seed's images (or ``images``), launch once, synchronize; every
        buffer's image read back (host copies), or for a kernel judged on the GPU the
        buffers themselves: judge them before the next launch, copy what is kept."""
        bufs = self.buffers(spec)
        images = images if images is not None else self.seed_data(spec, seed)[1]
        with self.phases("upload"):
            self.upload(spec, bufs, images)
        with self.phases("launch"):
            self.launch(fn, spec, self.args(spec, bufs), shape=shape)
            self.stream.synchronize()  # a fault in the kernel raises here
        with self.phases("read back"):
            if self.judged_on_device(spec):  # judged in place, before the next upload
                return {p.name: bufs[p.name] for p in spec.buffers()}
            return {p.name: bufs[p.name].get() for p in spec.buffers()}

    def healthy(self) -> bool:
        """False when the context is unusable (a sticky error): a tiny memset must succeed."""
        try:
            self.probe_out.fill(0)
            self.stream.synchronize()
            self.cp.cuda.runtime.deviceSynchronize()
            return True
        except Exception:
            return False

    # -------------------------------------------------------------- correctness

    def check_seed(self, request, seed: int, when: str = "", prefill: dict | None = None) -> dict:
        """One launch of the variant on one seed's inputs, judged by the guards around the
        buffers and by ``gate.check_launch``; raises _Failed with the reason (naming the
        seed, and ``when`` if given), else returns the outputs. ``prefill``: output values
        to upload instead of the poison (``check``'s pre-filled launch)."""
        spec = request.spec
        fn = self.function(request.cubin, spec.entry, spec.shared_mem)
        expected = self.baseline_outputs(request, seed)
        guards = self.guards(spec)
        with self.phases("guards filled"):
            self.fill_guards(guards)
        images = None
        if prefill is not None:
            images = dict(self.seed_data(spec, seed)[1])
            for p in spec.outputs():
                if p.role == "out":
                    images[p.name] = gate.with_canary(prefill[p.name])
        after = self.run_checked(fn, spec, seed, request.launch, images)
        where = input_sets.seed_label(seed) + (f", {when}" if when else "")
        with self.phases("guards compared"):
            reason = self.changed_guard(guards)
        if reason:
            raise _Failed(f"{reason} ({where})")
        inputs, _ = self.seed_data(spec, seed)
        with self.phases("outputs compared"):
            ok, reason = gate.check_launch(spec, inputs, after, expected,
                                           stress=input_sets.is_stress_seed(seed))
            if not ok:
                raise _Failed(f"{reason} ({where})")
            return {p.name: gate.split_canary(after[p.name], p)[0].copy() for p in spec.outputs()}

    def check(self, request) -> dict:
        """The correctness gate over every check seed; raises _Failed with the first reason.
        Returns the largest errors against the baseline that passed (``gate.max_error``)."""
        spec = request.spec
        if self.queues_checks(spec):  # a small kernel: the same launches, queued
            return self.check_queued(request)
        worst, got = (0.0, 0.0), {}
        for seed in request.check_seeds:
            got[seed] = self.check_seed(request, seed)
            expected = self.baseline_outputs(request, seed)
            with self.phases("max error"):
                worst = tuple(map(max, worst, gate.max_error(got[seed], expected, spec)))
        # Once more with the outputs holding the variant's own results on other inputs
        # instead of the poison: a variant that skips its work when it finds its outputs
        # written (or marked, in bits the tolerance leaves free) keeps a wrong answer.
        first, second = request.check_seeds[:2]
        with self.phases("pre-filled check"):
            self.check_seed(request, second, f"outputs pre-filled with its own results on "
                            f"{input_sets.seed_label(first)}", prefill=got[first])
        return {"max_abs_err": worst[0], "max_rel_err": worst[1]}

    # -------------------------------------------------------------- timing

    # -------------------------------------------------------------- one request

    def measure(self, request) -> Measurement:
        """Check, then time one variant; never raises (a failure is an invalid Measurement)."""
        t0 = time.perf_counter()
        spec = request.spec
        result = Measurement(kernel=request.kernel_name or spec.name, device=self.device_name,
                             valid=False, backend="gpu", timer=spec.timing)
        # The pid names the worker process: figures from one process share one placement
        # (module docstring); across a restart they may shift by a few tenths of a percent.
        result.notes = {"check_seeds": list(request.check_seeds), "timing_seed": request.timing_seed,
                        "worker_pid": os.getpid()}
        if request.launch is not None:
            result.notes["launch"] = request.launch.to_json()
        result.notes["judged_on"] = "gpu" if self.judged_on_device(spec) else "host"
        self.phases = phases = Phases(sync=self.stream.synchronize)
        try:
            with phases("check"):
                result.notes.update(self.check(request))
            with phases("timing"):
                if spec.timing == "clock64":
                    samples, notes = gpu_timing.time_clock64(self, request)
                    stats = summarize(samples, batch=gpu_timing.CLOCK_BATCH)
                else:
                    samples, notes = gpu_timing.time_events(self, request)
                    stats = summarize(samples)
            if spec.timing != "clock64":
                with phases("reuse probe"):
                    fn = self.function(request.cubin, spec.entry, spec.shared_mem)
                    notes.update(reuse_probe.probe(self, request, fn, notes["us_per_launch"]))
            stress = input_sets.stress_seed(request.check_seeds[0])
            with phases("stress check"):  # module docstring, step 3
                if self.queues_checks(spec):
                    self.queued_launches(request, [(stress, "after timing", False)])
                else:
                    self.check_seed(request, stress, "after timing")
            result.notes["stress_check"] = f"passed ({input_sets.seed_label(stress)}, after timing)"
            result.valid, result.reason = True, record.OK
            result.cycles, result.p10, result.p90, result.n = (
                stats["cycles"], stats["p10"], stats["p90"], stats["n"])
            result.flags = gate.speedup_flags(request.baseline_cycles, result.cycles)
            result.notes.update(notes, median=stats["median"], std=stats["std"],
                                robust_std=stats["robust_std"], rel_sem=stats["rel_sem"])
        except (_Failed, TimingFailed, reuse_probe.ResultReuse) as failed:
            result.reason = str(failed)
        except self.cuda_errors as err:
            result.reason = f"{record.LAUNCH_ERROR}: {err}"
        except Exception as err:  # a harness bug: say so rather than blame the variant
            result.reason = f"worker error: {type(err).__name__}: {err}"
            result.notes["traceback"] = traceback.format_exc(limit=8)
        finally:
            del self.phases  # the class's: nothing recorded between requests
        result.notes["phases"] = phases.to_json()
        result.seconds = time.perf_counter() - t0
        return result


def serve(conn, device_id: int, arena_handle: bytes | None = None) -> None:
    """The worker process's main loop: handshake, then one answer per request until None/EOF.

    After an invalid answer the context is probed; if it is unusable the process tells the
    parent (``alive=False``) and exits at once with ``os._exit``, skipping CuPy's teardown
    (whose frees would fail on the dead context and print noise).
    """
    try:
        runner = Runner(device_id, arena_handle)
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", runner.device_name))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break  # the parent is gone
        if request is None:
            break
        try:
            measurement = runner.measure(request)
        except KeyboardInterrupt:
            break
        alive = measurement.valid or (
            not any(m in measurement.reason for m in STICKY_MARKERS) and runner.healthy())
        conn.send(("result", measurement, alive))
        if not alive:
            conn.close()
            os._exit(0)
    conn.close()
    os._exit(0)  # skip teardown: the parent does not wait for CuPy's frees
