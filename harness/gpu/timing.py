"""How the GPU worker times a variant that passed the correctness gate.

Runs in the worker process with its ``harness.gpu.runner.Runner`` (CUDA context, arena,
loaded modules, input images):

* ``time_clock64``: single-block specs. The clock64-instrumented cubin runs in batches: an
  upload of the inputs, one untimed launch (right after the copy), then ``CLOCK_BATCH``
  timed launches back to back, each writing its own slice of one clock buffer, so a batch
  needs one readback, and after them one launch of a tiny *settle* kernel that loads one
  word of the kernel's first buffer. Both serve one end: that successive batches do not
  all sit in the same GPU latency state, so that the figure, an average over batches,
  lands on the same mix of states in every measurement. Uploading again every batch does
  that for the states an upload leaves (on an H100 all launches after one upload ran
  ~1243 or all ~1246 cycles); the settle launch for the states that outlast uploads (on
  H200s, whole measurements read ~1312 or ~1315 cycles, whole processes too; with it,
  both mix within each measurement: see ``_SETTLE_PTX``).
* ``time_events``: many-block specs. The uninstrumented cubin, as a captured CUDA graph of
  K back-to-back launches replayed between two events; microseconds become cycles at the
  SM clock measured (``sm_mhz``) just before and after.

Both stop by the request's rule (``harness.gpu.estimate.precise_enough``). A variant that
cannot be timed raises ``TimingFailed`` with the reason.

The result-reuse hole (a variant that remembered its last input, or found its outputs
already written, skipped the work on repeated launches and read 2.4x fast): clock64 batches
alternate between two input sets that differ in every element (``input_sets.timing_seeds``),
outputs and inouts are restored (poison, input) before every timed launch, and the buffers
timed are judged against the baseline afterwards (``Runner.check_sets``), in both modes.
Within an events graph launches still repeat one input on the outputs the launch before
left: what closes reuse there is the static check (``harness.hidden_state``), the arena
guard and the pre-filled check launch (``harness.gpu.runner``). Giving every launch an
input of its own cost the figures their precision on an H200 (the notes at ``batch`` and
``time_events``).

Caches (the spec's ``caches``): "warm" as above, every launch on the same buffers, so data
that fits in the L2 is read from it. "cold": every timed launch reads from DRAM. Events
timing rotates the launches of its graph among ``cold_copies`` sets of the buffers, so
that at least ``COLD_FACTOR`` L2s of other data pass between two uses of one set (one set
when the buffers alone are that large); clock64 timing flushes the L2 (a memset of twice
its size) before each timed launch. The notes' ``caches`` says which, in words.

``copy_gbps``: the bandwidth of a device copy moving the same bytes (read + write), timed
the same way and with the same caches, once per worker and size: the roofline that events
timing's notes carry for the report (``copy_gbps``).
"""

from __future__ import annotations

import functools

import numpy as np

from harness.gpu import batch_graphs, input_sets, instrument
from harness.gpu.estimate import precise_enough

TIMING_FAILED = "timing failed"
"""Reason prefix when a variant passed the gate but could not be timed (e.g. no clock words)."""

STICKY_MARKERS = ("IllegalAddress", "ILLEGAL_ADDRESS", "MisalignedAddress", "MISALIGNED_ADDRESS",
                  "LaunchFailure", "LAUNCH_FAILED", "IllegalInstruction", "ILLEGAL_INSTRUCTION",
                  "HardwareStackError", "HARDWARE_STACK_ERROR", "InvalidPc", "INVALID_PC", "Assert")
"""CUDA errors that leave the context unusable (the runner's ``healthy()`` also probes)."""

CLOCK_BATCH = 8  # clock64 launches per upload of the inputs and readback of the clock words
EVENTS_CHUNK = 5  # events-mode replays between two looks at the stopping rule
EVENTS_MIN_SAMPLES = 10
"""Events timing's least number of graph replays, each averaging ``graph_launches``
launches: the request's ``min_reps`` counts launches, so a graph of k launches needs
``ceil(min_reps / k)`` replays, and never fewer than this, for the standard error the
stopping rule reads to mean something. Before, ``min_reps`` (30) counted replays of ~1 ms
each: 30 ms per candidate whatever the precision reached (relu@4M: a third of its
measurement, H200, BENCHMARKS.md session 14)."""
GRAPH_TARGET_S = 1e-3  # an events-mode graph replay should take about this long
MAX_GRAPH_LAUNCHES = 256
COLD_FACTOR = 4  # cold: this many L2s of other data pass between two uses of one buffer set
MAX_COLD_COPIES = 64  # a smaller kernel is timed partly warm (its notes say so)
COPY_REPLAYS = 20  # replays of copy_gbps's graph (median)
PROBE_SPIN_NS = 1_000_000  # the SM-clock probe spins this long (1 ms)
SPIN_UP_S = 0.5
"""A new worker keeps the GPU busy this long before its first measurement (timing on a
warmed-up GPU, as benchmark harnesses do). Measured on an H200, gemm_tile_4x6x8: right
after a busy minute five fresh workers read within 0.04 %; after a light minute the same
cubin read 1333 or 1337 cycles from one measurement to the next (0.27 %). With this
spin-up one precision test passed (0.2 %) and the next `evo stability` read 0.22 %:
it does not remove the two states; BENCHMARKS.md has the figures."""

_PROBE_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry evo_clock_probe(.param .u64 out, .param .u64 spin_ns)
{
    .reg .u64 %rd<8>; .reg .pred %p<2>;
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [spin_ns]; cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd3, %globaltimer; mov.u64 %rd4, %clock64;
$L_spin:
    mov.u64 %rd5, %globaltimer; sub.u64 %rd6, %rd5, %rd3; setp.lt.u64 %p1, %rd6, %rd2;
    @%p1 bra $L_spin;
    mov.u64 %rd7, %clock64;
    st.global.u64 [%rd1], %rd3; st.global.u64 [%rd1+8], %rd5;
    st.global.u64 [%rd1+16], %rd4; st.global.u64 [%rd1+24], %rd7;
    ret;
}
"""  # one thread spins ~1 ms on %globaltimer (ns), reading %clock64 at both ends: SM MHz


_SETTLE_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry evo_settle(.param .u64 src, .param .u64 out)
{
    .reg .b64 %r<4>; .reg .b32 %v<1>;
    mov.u64 %r0, %clock64;
    ld.param.u64 %r3, [src]; cvta.to.global.u64 %r3, %r3;
    ld.global.u32 %v0, [%r3];
    ld.param.u64 %r2, [out]; cvta.to.global.u64 %r2, %r2;
    st.global.u32 [%r2+16], %v0;
    mov.u64 %r1, %clock64;
    st.global.u64 [%r2], %r0; st.global.u64 [%r2+8], %r1;
    ret;
}
"""
"""One thread loads the first word of ``src`` and stores it (with its own clock64 reads,
which nothing uses: the kernel is kept exactly as it was measured) to ``out``. Launched
once after each clock64 batch. Measured on H200s (session 4 of BENCHMARKS.md, Precision):
without it the same cubin read one of two figures ~3 cycles apart for whole measurements
(gemm_tile_4x6x8 1312 or 1315, gemm_tile_2x2x2 442 or 445), switching at no event we
could find; with it every measurement read near the middle (1313.4 +- 0.05 %), and five
fresh workers agreed within 0.05 %. A settle kernel without the load did not do it, so the
mechanism is a guess: the load, from whichever SM runs it, moves the buffer's lines
between the L2's partitions. Clocks (1980 / 3201 MHz, P0), code and buffer placement,
and the kernel-parameter fetch were each ruled out."""


_COPY_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry evo_copy(.param .u64 dst, .param .u64 src, .param .u64 chunks)
{
    .reg .b64 %d<10>; .reg .b32 %v<4>; .reg .b32 %t<4>; .reg .pred %p<2>;
    ld.param.u64 %d1, [dst]; ld.param.u64 %d2, [src]; ld.param.u64 %d3, [chunks];
    cvta.to.global.u64 %d1, %d1; cvta.to.global.u64 %d2, %d2;
    mov.u32 %t0, %ctaid.x; mov.u32 %t1, %ntid.x; mov.u32 %t2, %tid.x;
    mul.wide.u32 %d4, %t0, %t1; cvt.u64.u32 %d5, %t2; add.u64 %d4, %d4, %d5;
    setp.ge.u64 %p1, %d4, %d3;
    @%p1 bra $L_done;
    shl.b64 %d7, %d4, 4; add.u64 %d8, %d2, %d7; add.u64 %d9, %d1, %d7;
    ld.global.v4.u32 {%v0, %v1, %v2, %v3}, [%d8];
    st.global.v4.u32 [%d9], {%v0, %v1, %v2, %v3};
$L_done:
    ret;
}
"""
"""The roofline's copy: each thread moves one 16-byte chunk (v4 load, v4 store), as a good
elementwise kernel does (what torch's copy_ does too), timed as kernels are: a graph of
back-to-back launches."""


def _own_kernel(runner, ptx: str, entry: str):
    """One of the timer's own kernels (the SM-clock probe, the settle kernel), its PTX
    loaded once per runner: the driver JIT-compiles it the first time."""
    fn = runner.own_kernels.get(entry)
    if fn is None:
        module = runner.cp.cuda.function.Module()
        module.load(ptx.encode() + b"\0")
        fn = runner.own_kernels[entry] = module.get_function(entry)
    return fn


def _settle(runner, src) -> None:
    _own_kernel(runner, _SETTLE_PTX, "evo_settle")((1, 1, 1), (1, 1, 1), (src, runner.settle_out))


class TimingFailed(Exception):
    """A variant that passed the gate but could not be timed; the message is the reason."""


def time_clock64(runner, request, before_batch=None) -> tuple[list[float], dict]:
    """Cycles of each launch of the instrumented cubin, read from its clock words.

    ``before_batch()``, where given, runs before each batch's upload (a diagnostic:
    ``harness.tools.clock_states`` uses it to see what moves the GPU between states)."""
    spec = request.spec
    if request.clock_cubin is None:
        raise TimingFailed(f"{TIMING_FAILED}: spec {spec.name} times with clock64 but the "
                           "request has no clock_cubin (instrument the variant)")
    fn = runner.function(request.clock_cubin, request.clock_entry or spec.entry, spec.shared_mem)
    seeds = input_sets.timing_seeds(request.timing_seed)
    images = [runner.seed_data(spec, seed)[1] for seed in seeds]
    for seed in seeds:  # the baseline's answers first: its launches stay out of the batches
        runner.baseline_outputs(request, seed)
    bufs = runner.buffers(spec)
    args = runner.args(spec, bufs)
    words = instrument.clock_words(spec)
    clock = runner.clock_buf  # room for 1 + CLOCK_BATCH launches of a 1024-thread block
    cold = spec.caches == "cold"
    base = clock.data.ptr
    after_upload: list[int] = []
    batches = [0]
    # Outputs and inouts restored before every timed launch, not only at uploads: a
    # variant that finds its own last answer in its outputs (a marker in their rounding
    # slack keyed on the input) must do the work on every launch the figure averages.
    # The cycles are counted inside the kernel, so the copies stay out of the figure.
    kept = [runner.written_on_device(spec, image, slot=i) for i, image in enumerate(images)]
    # Every buffer's image on the device too: a batch's upload is then a device copy, and
    # the whole batch (upload, clock poison, launches and restores, settle) is captured
    # once per input set as a CUDA graph and replayed: one call a batch instead of ~25
    # (a one-thread tile's timing was 4.2 of its 15.6 ms in the worker, H200, session 24).
    # The launches, their order and what lies between them on the GPU are the same.
    # The images lie where the last request's did (``slot``), so a graph captured for an
    # earlier candidate of the kernel serves, given this one's function (batch_graphs).
    whole = [runner.on_device(spec, image, slot=i) for i, image in enumerate(images)]
    graphs: dict = {}  # (input set, launches) -> replay
    failed_capture = []
    graph_use = {"captured": 0, "reused": 0}
    places = _batch_places(spec, request, bufs, whole, kept, base)

    def queue(count: int, which: int) -> None:
        runner.restore(bufs, whole[which])  # the upload: a device-to-device copy
        clock[:count * words].fill(instrument.CLOCK_POISON)
        for i in range(count):
            if i:
                runner.restore(bufs, kept[which])
            if cold:
                runner.flush_l2()
            runner.launch(fn, spec, args + [base + 8 * words * i], shape=request.launch)
        if bufs:
            _settle(runner, next(iter(bufs.values())))

    def batch(count: int) -> list[int]:
        # A fresh upload per batch (module docstring), then one launch more
        # than asked: the first runs right after the copy, in whatever state the copy
        # left the caches, and is kept out of the samples (its median goes in the notes).
        # Suspect: on an H200 over 10 % of launches ran ~180 cycles long when every 8th
        # launch (12.5 %) was such a first one. Each launch writes its own slice of the
        # clock buffer, so a batch's launches run back to back.
        # Each batch uploads the other of the two timing input sets (they differ in
        # every element), outputs poisoned, and restores outputs and inouts before each
        # launch: no launch starts on an answer, and the last one's outputs are judged
        # after timing. (Giving every launch buffers of its own did it too, but spread
        # the launches over nine placements: per-launch noise 0.2 -> 11 %, H200, session 12.)
        if before_batch is not None:
            before_batch()
        count += 1
        key = (batches[0] % 2, count)
        replay = graphs.get(key)
        if replay is None:  # a kept or captured graph, run once by its own check
            run = functools.partial(queue, count, key[0])
            try:
                replay, how = batch_graphs.replay(runner, (places, *key), fn, run)
                graph_use[how] += 1
                why = ""
            except Exception as err:  # a graph for this request alone, as before
                if _sticky(runner, err):
                    raise
                replay, why = replayable(runner, run)
                graph_use["captured"] += not why
            graphs[key] = replay
            if why:  # not captured: nothing ran; a plain batch from now on
                failed_capture.append(why)
                replay()
        else:
            replay()
        runner.stream.synchronize()
        batches[0] += 1
        rows = clock[:count * words].get().reshape(count, words)
        pairs = rows.reshape(count, -1, 2)
        start, end = pairs[..., 0], pairs[..., 1]
        if (pairs == instrument.CLOCK_POISON).any() or (end < start).any():
            try:  # the slow path only to get cycles_from_clock's precise message
                [instrument.cycles_from_clock(row) for row in rows]
            except ValueError as err:
                raise TimingFailed(f"{TIMING_FAILED}: {err}") from None
        # cycles_from_clock for all rows at once: max(end) - min(start) per launch.
        cycles = (end.max(axis=1) - start.min(axis=1)).astype(np.int64).tolist()
        after_upload.append(cycles[0])
        return cycles[1:]

    # Warm-up in whole batches (16 launches for the default 10): the graphs it captures
    # are the timed batches' own. What a capture must not do (load a module, allocate
    # memory) is done once before the first.
    _own_kernel(runner, _SETTLE_PTX, "evo_settle")
    clock[:words].fill(instrument.CLOCK_POISON)
    if cold:
        runner.flush_l2()
    for _ in range(0, request.warmup, CLOCK_BATCH):
        batch(CLOCK_BATCH)
    after_upload.clear()
    samples: list[float] = []
    variances = []  # per batch: launch-to-launch noise within one upload's state
    while not precise_enough(samples, request.min_reps, request.max_reps, request.target_rel_sem,
                             batch=CLOCK_BATCH):  # every batch but a last one is full
        cycles = batch(min(CLOCK_BATCH, request.max_reps - len(samples)))
        samples += cycles
        variances.append(float(np.var(cycles)))
    with runner.phases("timed buffers checked"):
        runner.check_sets(request, [bufs], [seeds[(batches[0] - 1) % 2]], "after timing")
    notes = {"batches": (f"each replayed from a CUDA graph ({graph_use['captured']} captured, "
                         f"{graph_use['reused']} kept from an earlier candidate)"
                         if not failed_capture else
                         f"launched one by one: {failed_capture[0]}")}
    return samples, {**notes, "launches_per_upload": f"1 untimed + {CLOCK_BATCH} + 1 settle",
                     "timed_inputs": ("batches alternate between two input sets that differ "
                                      "in every element; outputs and inouts restored before "
                                      "every launch; the last launch's outputs checked after "
                                      "timing"),
                     "placement": runner.placement(spec),
                     "after_upload_median": (float(np.median(after_upload))
                                             if after_upload else None),
                     "caches": (f"cold (the L2 flushed before each launch: a memset of "
                                f"{2 * runner.l2_bytes >> 20} MiB)" if cold else
                                f"warm ({-(-request.warmup // CLOCK_BATCH) * CLOCK_BATCH} "
                                "warm-up launches first, and one after each upload of the "
                                "inputs)"),
                     "within_batch_std": float(np.sqrt(np.mean(variances)))}


def _probe(runner):
    return _own_kernel(runner, _PROBE_PTX, "evo_clock_probe")


def sm_mhz(runner) -> float:
    """The SM clock now, in MHz: Δ%clock64 / Δ%globaltimer over a ~1 ms spin of one thread."""
    with runner.phases("SM clock probed"):
        return _sm_mhz(runner)


def _sm_mhz(runner) -> float:
    _probe(runner)((1, 1, 1), (1, 1, 1), (runner.probe_out, np.uint64(PROBE_SPIN_NS)))
    runner.stream.synchronize()
    t0, t1, c0, c1 = (int(v) for v in runner.probe_out.get())
    return (c1 - c0) / (t1 - t0) * 1000.0


def spin_up(runner, seconds: float = SPIN_UP_S) -> None:
    """Keep every SM busy for ``seconds`` (the probe kernel, 4 blocks of 256 threads per SM,
    each thread spinning on %globaltimer): a GPU that was idle measures in two states."""
    sms = runner.cp.cuda.runtime.getDeviceProperties(runner.cp.cuda.Device().id)[
        "multiProcessorCount"]
    _probe(runner)((4 * sms, 1, 1), (256, 1, 1), (runner.probe_out, np.uint64(seconds * 1e9)))
    runner.stream.synchronize()


def time_events(runner, request) -> tuple[list[float], dict]:
    """Cycles per launch of the uninstrumented cubin, from CUDA events around graph replays."""
    spec, stream = request.spec, runner.stream
    fn = runner.function(request.cubin, spec.entry, spec.shared_mem)
    seeds = [request.timing_seed]
    images = [runner.seed_data(spec, request.timing_seed)[1]]
    runner.baseline_outputs(request, request.timing_seed)  # before any timed launch
    held = set_bytes(spec)  # one set of the buffers: what cold timing rotates
    # One set of buffers (cold: copies, rotated). Alternating two sets whose inputs differ
    # in every element, so that no launch ran on its predecessor's input, made figures
    # bimodal (layernorm: 6 % between measurements, 0.2 % with one set; H200, session 12).
    copies = cold_copies(held, runner.l2_bytes) if spec.caches == "cold" else 1
    arg_sets = runner.rotated_args(spec, copies, images)

    def loop(count: int):
        return lambda: [runner.launch(fn, spec, arg_sets[i % copies], stream, request.launch)
                        for i in range(count)]

    loop(max(request.warmup, 1))()
    estimate = elapsed_us(runner, loop(10), 10)  # includes the ~µs launch floor: an upper bound
    k = int(min(MAX_GRAPH_LAUNCHES, max(1, GRAPH_TARGET_S * 1e6 / max(estimate, 1e-3))))
    k = max(copies, k // copies * copies)  # whole rotations: no set is reused early
    notes = {"graph_launches": k, "caches": caches_note(spec, held, copies, runner.l2_bytes),
             "placement": runner.placement(spec)}
    with runner.phases("graph captured"):
        replay, failed = replayable(runner, loop(k))
    if failed:
        notes["graph"] = f"{failed}; timed a loop of {k} launches on one stream"
    mhz_before = sm_mhz(runner)
    samples: list[float] = []
    least = min(request.max_reps, max(EVENTS_MIN_SAMPLES, -(-request.min_reps // k)))
    while not precise_enough(samples, least, request.max_reps, request.target_rel_sem):
        for _ in range(min(EVENTS_CHUNK, request.max_reps - len(samples))):
            samples.append(elapsed_us(runner, replay, k))
    mhz_after = sm_mhz(runner)
    # With an inout buffer each launch starts from the last one's result (a residual added in
    # place), so neither it nor the outputs computed from it hold one launch's answer: all
    # judged by their canaries here, and on one launch from restored inouts by the reuse
    # probe after timing (harness.gpu.reuse_probe). A captured decoder's fused residual + RMSNorm
    # failed as its own baseline when only the inout was spared (H200, session 13).
    inouts = any(p.role == "inout" for p in spec.buffers())
    spared = frozenset(p.name for p in spec.outputs()) if inouts else frozenset()
    with runner.phases("timed buffers checked"):
        runner.check_sets(request, runner.buffer_sets(spec, copies), seeds, "after timing",
                          canary_only=spared)
    mhz = (mhz_before + mhz_after) / 2
    moved = spec.bytes_read + spec.bytes_written  # the least the kernel must move
    notes.update(sm_mhz_before=round(mhz_before, 1), sm_mhz_after=round(mhz_after, 1),
                 sm_mhz=round(mhz, 1), us_per_launch=float(np.median(samples)),
                 bytes_moved=moved)
    with runner.phases("copy roofline"):
        notes["copy_gbps"] = round(copy_gbps(runner, moved, spec.caches), 1)
    return [us * mhz for us in samples], notes


def _batch_places(spec, request, bufs, whole, kept, clock_base: int) -> tuple:
    """What a clock64 batch's stream work depends on besides the function it launches:
    a graph kept under it does the same work (``batch_graphs``). Device addresses, so
    that a kernel's images made anew (another place) never meet a graph of the old ones."""
    def addresses(arrays):
        return tuple(getattr(getattr(a, "data", None), "ptr", a) for a in arrays)

    return (spec.name, spec.entry, spec.grid, spec.block, spec.caches, spec.shared_mem, spec.params,
            None if request.launch is None else (request.launch.grid, request.launch.block),
            addresses(bufs.values()), clock_base,
            tuple(addresses(w.values()) for w in whole), tuple(addresses(k.values()) for k in kept))


def _sticky(runner, err) -> bool:
    """Whether ``err`` left the context unusable (a sticky CUDA error: the variant's)."""
    return isinstance(err, runner.cuda_errors) and any(m in str(err) for m in STICKY_MARKERS)


def replayable(runner, run) -> tuple:
    """(replay, why not a graph): ``run`` (stream work) captured as a CUDA graph whose
    replay does it again, or, where capture fails, ``run`` itself and the reason."""
    stream = runner.stream
    try:
        stream.begin_capture()
        try:
            run()
        finally:
            graph = stream.end_capture()
        replay = functools.partial(graph.launch, stream)  # keeps the graph alive
        replay()
        stream.synchronize()
        return replay, ""
    except Exception as err:  # capture unsupported here: the caller times a plain loop
        if _sticky(runner, err):
            raise
        return run, f"capture failed ({err})"


def elapsed_us(runner, run, count: int = 1) -> float:
    """Microseconds per ``count`` of ``run`` (stream work), between two CUDA events."""
    cp, stream = runner.cp, runner.stream
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    run()
    stop.record(stream)
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1000.0 / count


def set_bytes(spec) -> int:
    """Bytes of one set of the spec's buffers (what one launch can touch)."""
    return sum(p.nbytes for p in spec.buffers())


def cold_copies(nbytes: int, l2_bytes: int) -> int:
    """Sets of buffers of ``nbytes`` each that cold timing rotates among: enough that
    ``COLD_FACTOR`` L2s of the others pass between two uses of one (at most
    ``MAX_COLD_COPIES``); 1 when one set alone is that large."""
    if nbytes >= COLD_FACTOR * l2_bytes:
        return 1
    return min(MAX_COLD_COPIES, -(-COLD_FACTOR * l2_bytes // max(nbytes, 1)) + 1)


def caches_note(spec, nbytes: int, copies: int, l2_bytes: int) -> str:
    """How events timing treated the L2, in words (the notes' ``caches``)."""
    if spec.caches != "cold":
        return "warm (inputs reused across launches)"
    mib, l2 = nbytes / 2**20, l2_bytes >> 20
    if copies == 1:
        return f"cold (the buffers, {mib:.0f} MiB, exceed {COLD_FACTOR}x the {l2} MiB L2)"
    passing = (copies - 1) * nbytes
    warmth = "" if passing >= COLD_FACTOR * l2_bytes else \
        f"; only {passing / l2_bytes:.1f}x the L2 passes between uses: partly warm"
    return (f"cold (launches rotate among {copies} copies of the {mib:.2f} MiB of buffers, "
            f"{l2} MiB L2{warmth})")


def copy_gbps(runner, moved: int, caches: str = "warm") -> float:
    """GB/s of a device-to-device copy moving ``moved`` bytes (half read, half written;
    ``_COPY_PTX``), as a captured graph of copies replayed between events, with ``caches``
    as the kernels (cold: rotated among copies, as ``time_events`` does); once per runner
    and size."""
    key = (moved, caches)
    if key in runner.copy_rates:
        return runner.copy_rates[key]
    cp, stream = runner.cp, runner.stream
    chunks = max(moved // 32, 16)  # 16-byte chunks read (and as many written)
    half = 16 * chunks
    pairs = cold_copies(2 * half, runner.l2_bytes) if caches == "cold" else 1
    bufs = [(cp.empty(half, dtype=cp.uint8), cp.empty(half, dtype=cp.uint8))
            for _ in range(pairs)]
    estimate_us = max(1.0, 2 * half / 1e6)  # at ~1 TB/s (bytes / 1e6 = µs): sizes the graph
    k = int(min(MAX_GRAPH_LAUNCHES, max(1, GRAPH_TARGET_S * 1e6 / estimate_us)))
    k = max(pairs, k // pairs * pairs)
    kernel = _own_kernel(runner, _COPY_PTX, "evo_copy")
    grid = (-(-chunks // 256), 1, 1)

    def copies():
        for i in range(k):
            dst, src = bufs[i % pairs]
            kernel(grid, (256, 1, 1), (dst, src, np.uint64(chunks)), stream=stream)

    replay, _ = replayable(runner, copies)
    us = float(np.median([elapsed_us(runner, replay, k) for _ in range(COPY_REPLAYS)]))
    runner.copy_rates[key] = rate = 2 * half / us / 1e3  # bytes/µs / 1e3 = GB/s
    return rate
