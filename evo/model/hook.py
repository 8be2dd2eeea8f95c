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
"""

from __future__ import annotations


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

            if not hook.hooked:  # unhooked while another hook still calls this one
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


def timing_events(stream):
    """(start, end, torch stream) to time one launch on Inductor's ``stream`` (a raw
    CUDA stream handle) with CUDA events, or None while a graph is being captured. The
    events hold what the GPU spent between them: the kernel, and any wait for the host
    to launch it where the program is host-bound (the same for either code)."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return None
    on = torch.cuda.current_stream()
    if on.cuda_stream != stream:
        on = torch.cuda.ExternalStream(stream)
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), on


def mean_us(pairs) -> float:
    """Mean µs between recorded (start, end) event pairs (synchronises)."""
    import torch

    torch.cuda.synchronize()
    return 1e3 * sum(start.elapsed_time(end) for start, end in pairs) / len(pairs)


def median_us(pairs) -> float:
    """Median µs between recorded (start, end) event pairs (synchronises): for comparing
    two codes from a few launches each, where one launch that waited on the host (the
    GPU idle between the start event and the kernel) would move a mean."""
    import statistics

    import torch

    torch.cuda.synchronize()
    return 1e3 * statistics.median(start.elapsed_time(end) for start, end in pairs)


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
