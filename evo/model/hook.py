"""One wrapper around Inductor's launch, for all that evo does inside a running
``torch.compile``d program.

Inductor launches every Triton kernel through ``CachingAutotuner.run(*args, stream=...)``
(torch 2.8-2.11, ``torch/_inductor/runtime/triton_heuristics.py``; its static launcher
bypasses Triton's own launch hooks). Capturing records those launches, installing swaps
evolved code into their launchers, verifying runs them twice: each is a ``LaunchHook``
whose ``launch`` method sees every launch while the hook is in place, and calls
``run()`` (Inductor's own launch, which it may call more than once, or not at all).

CUDA graphs: a launch made while a graph is being captured is recorded into the graph;
its replays never pass Inductor's launcher again. ``GraphWatch`` tells which
``torch.cuda.CUDAGraph`` is being captured and calls back on each replay, so that a
recorder can count a graph's kernels once per replay.

Autotuning: while ``max-autotune`` compiles, Inductor times candidate templates and fused
epilogues by launching them through the same ``run`` with ``benchmark_run=True``; those
launches pass every hook untouched; so do the fused kernels its scheduler weighs while it
compiles (``benchmark_fused_nodes``: a kernel named just ``triton_``), launched from its
compile-time modules (``compiling``). A capture once counted such a benchmarked epilogue's
99-107 launches as the program's largest kernel.
"""

from __future__ import annotations

import sys

# Inductor's modules that launch kernels only to time them while it compiles
COMPILE_TIME = tuple(f"/_inductor/{name}" for name in (
    "scheduler.py", "select_algorithm.py", "autotune_process.py"))


def compiling() -> bool:
    """Whether this launch comes from Inductor timing a candidate while it compiles (one
    of ``COMPILE_TIME`` on the stack), not from the program's compiled code."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(COMPILE_TIME):
            return True
        frame = frame.f_back
    return False

def _inductor_launch_class():
    from torch._inductor.runtime import triton_heuristics

    return triton_heuristics.CachingAutotuner


class LaunchHook:
    """While hooked (a context manager, or ``hook``/``unhook``), every launch of ``target``
    (Inductor's ``CachingAutotuner`` unless given) goes through ``self.launch``."""

    def __init__(self, target=None):
        self._target = target
        self._class = self._original = self._wrapper = None
        self.hooked = False

    def __enter__(self):
        self.hook()
        return self

    def __exit__(self, *exc):
        self.unhook()
        return False

    def launch(self, autotuner, args, stream, run):
        """One launch: ``run()`` launches as Inductor would. Subclasses say what else."""
        return run()

    def hook(self) -> None:
        if self.hooked:
            return
        cls = self._target or _inductor_launch_class()
        original, hook = cls.run, self

        def run(autotuner, *args, stream, **kwargs):
            def inductors():
                return original(autotuner, *args, stream=stream, **kwargs)

            # unhooked while another hook still calls this one; or Inductor's autotuning
            # timing a candidate config or template while it compiles (``benchmark_run``):
            # not the program's work, and never to be recorded, swapped or checked
            if not hook.hooked or kwargs.get("benchmark_run") or compiling():
                return inductors()
            return hook.launch(autotuner, args, stream, inductors)

        self._class, self._original, self._wrapper = cls, original, run
        cls.run = run
        self.hooked = True

    def unhook(self) -> None:
        """Launches no longer pass ``launch``, and cost nothing more than Inductor's own
        where this hook was the last one put in (one put in after it calls through)."""
        if self._class is not None and self._class.run is self._wrapper:
            self._class.run = self._original
        self._class = None
        self.hooked = False


class LaunchTimer:
    """Times single launches on the program's own stream with CUDA events, by the GPU's
    time alone.

    An event records when the GPU reaches it. In a host-bound program (small kernels,
    the GPU waiting for Python) the GPU reaches the start event at once and then waits
    for the launch: a mobilenet_v3 kernel of 2 us read 30 us that way (H200,
    BENCHMARKS.md session 18), and a launcher slower in Python read as a slower kernel.
    So the stream is first given a spin (``torch.cuda._sleep``) that outlasts the host's
    work from the start event to the launch: the kernel is queued behind the start
    event before the GPU reaches it. Whether it was is checked on every launch (the
    start event still pending once the launch has returned); a launch the spin did not
    cover is not kept, and the spin doubles. The spin touches no memory: the kernel
    meets the caches the program's previous kernel left."""

    SPIN_CYCLES = 100_000  # ~50 us at 2 GHz: Inductor's launch and this hook's own work
    MAX_SPIN_CYCLES = 20_000_000

    def __init__(self):
        self.spin = self.SPIN_CYCLES
        self.uncovered = 0  # launches not kept: the GPU reached the start event first

    def time(self, stream, run):
        """(run()'s result, the (start, end) events around it, or None where the launch
        was not timed: a graph is being captured, or the spin did not cover it)."""
        import torch

        if torch.cuda.is_current_stream_capturing():
            return run(), None
        on = torch.cuda.current_stream()
        if on.cuda_stream != stream:
            on = torch.cuda.ExternalStream(stream)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep = getattr(torch.cuda, "_sleep", None)  # private: a torch without it times as events do
        if sleep is not None:
            with torch.cuda.stream(on):
                sleep(self.spin)
        start.record(on)
        result = run()
        covered = sleep is None or not start.query()
        end.record(on)
        if not covered:
            self.uncovered += 1
            self.spin = min(2 * self.spin, self.MAX_SPIN_CYCLES)
            return result, None
        return result, (start, end)


def elapsed_us(pairs, statistic) -> float:
    """``statistic`` (``statistics.mean``, ``statistics.median``) of the µs between
    recorded (start, end) event pairs (synchronises)."""
    import torch

    torch.cuda.synchronize()
    return 1e3 * statistic([start.elapsed_time(end) for start, end in pairs])


class GraphWatch:
    """While active: ``capturing`` is the CUDA graph being captured (None when none is),
    and ``on_replay(graph)`` is called before each replay of any graph (``target``: the
    graph class, ``torch.cuda.CUDAGraph`` unless given)."""

    def __init__(self, on_replay, target=None):
        self.on_replay = on_replay
        self.capturing = None
        self._target = target
        self._saved: dict = {}

    def __enter__(self):
        if self._target is None:
            import torch

            self._target = torch.cuda.CUDAGraph
        cls, watch = self._target, self
        self._saved = {name: cls.__dict__.get(name) for name in ("capture_begin", "capture_end", "replay")}
        begin, end, replay = cls.capture_begin, cls.capture_end, cls.replay

        def capture_begin(graph, *args, **kwargs):
            watch.capturing = graph
            return begin(graph, *args, **kwargs)

        def capture_end(graph, *args, **kwargs):
            try:
                return end(graph, *args, **kwargs)
            finally:
                watch.capturing = None

        def replay_(graph, *args, **kwargs):
            watch.on_replay(graph)
            return replay(graph, *args, **kwargs)

        cls.capture_begin, cls.capture_end, cls.replay = capture_begin, capture_end, replay_
        return self

    def __exit__(self, *exc):
        for name, method in self._saved.items():
            if method is None:
                delattr(self._target, name)  # it was inherited: inherit it again
            else:
                setattr(self._target, name, method)
        return False
