"""evo.model.hook without a GPU: the one wrapper of Inductor's launch that capture, install
and verify share, and the CUDA-graph watch, on stand-in classes with the same methods
(``run(*args, stream=)``; ``capture_begin``/``capture_end``/``replay``)."""

from __future__ import annotations

import pytest

from evo.model.hook import GraphWatch, LaunchHook


class Autotuner:
    """Inductor's CachingAutotuner as far as the hook sees it."""

    log: list = []

    def __init__(self, name: str):
        self.name = name

    def run(self, *args, stream, **kwargs):
        Autotuner.log.append((self.name, args, stream, kwargs))
        return f"{self.name}{args}"


class Twice(LaunchHook):
    """A hook that launches twice and notes every launch it sees."""

    def __init__(self):
        super().__init__(target=Autotuner)
        self.seen = []

    def launch(self, autotuner, args, stream, run):
        self.seen.append((autotuner.name, args, stream))
        run()
        return run()


@pytest.fixture(autouse=True)
def _clean():
    original = Autotuner.run
    Autotuner.log = []
    yield
    Autotuner.run = original


def test_a_hook_sees_each_launch_may_run_it_twice_and_is_gone_after():
    original = Autotuner.run
    with Twice() as hook:
        assert Autotuner("k").run(1, 2, stream=7, extra=3) == "k(1, 2)"
    assert hook.seen == [("k", (1, 2), 7)]
    assert Autotuner.log == [("k", (1, 2), 7, {"extra": 3})] * 2
    assert Autotuner.run is original
    Autotuner("k").run(5, stream=0)
    assert hook.seen == [("k", (1, 2), 7)]  # unhooked: not seen


def test_autotunings_benchmark_launches_pass_the_hook_untouched():
    """max-autotune times candidate templates through the same run (benchmark_run=True):
    not the program's launches, so a hook neither sees nor repeats them."""
    with Twice() as hook:
        assert Autotuner("bench").run(1, stream=3, benchmark_run=True) == "bench(1,)"
        Autotuner("k").run(2, stream=3, benchmark_run=False)
    assert hook.seen == [("k", (2,), 3)]
    assert Autotuner.log == [("bench", (1,), 3, {"benchmark_run": True})] + \
        [("k", (2,), 3, {"benchmark_run": False})] * 2


def test_launches_from_inductors_compile_time_modules_pass_the_hook_untouched():
    """The scheduler weighs a fusion by launching the fused kernel (named "triton_") from
    torch/_inductor/scheduler.py while it compiles: not one of the program's launches."""
    code = compile("result = Autotuner('triton_').run(4, stream=0)",
                   "/venv/lib/torch/_inductor/scheduler.py", "exec")
    scope = {"Autotuner": Autotuner}
    with Twice() as hook:
        exec(code, scope)
        Autotuner("k").run(5, stream=0)
    assert scope["result"] == "triton_(4,)"
    assert hook.seen == [("k", (5,), 0)]


def test_unhooking_early_leaves_inductors_own_launch():
    original = Autotuner.run
    hook = Twice()
    hook.hook()
    Autotuner("a").run(stream=0)
    hook.unhook()
    assert Autotuner.run is original and not hook.hooked
    Autotuner("a").run(stream=0)
    assert len(hook.seen) == 1 and len(Autotuner.log) == 3
    hook.unhook()  # twice is harmless
    assert Autotuner.run is original


def test_hooks_unhooked_out_of_order_pass_launches_through():
    original = Autotuner.run
    outer, inner = Twice(), Twice()
    outer.hook()
    inner.hook()  # wraps the outer's wrapper
    Autotuner("x").run(stream=0)
    assert len(outer.seen) == 2 and len(inner.seen) == 1  # inner runs outer twice
    outer.unhook()  # still called by inner's wrapper: it must only pass through now
    Autotuner.log = []
    Autotuner("x").run(stream=0)
    assert len(outer.seen) == 2 and len(inner.seen) == 2 and len(Autotuner.log) == 2
    inner.unhook()
    assert Autotuner.run is not original  # outer's pass-through wrapper stays in the chain
    Autotuner.log = []
    Autotuner("x").run(stream=0)
    assert len(Autotuner.log) == 1 and len(outer.seen) == 2 and len(inner.seen) == 2


def test_an_error_in_the_program_still_unhooks():
    original = Autotuner.run
    with pytest.raises(RuntimeError), Twice():
        Autotuner("k").run(stream=0)
        raise RuntimeError("the program failed")
    assert Autotuner.run is original


class Graph:
    """torch.cuda.CUDAGraph as far as the watch sees it."""

    def capture_begin(self, pool=None):
        self.began = pool

    def capture_end(self):
        self.ended = True

    def replay(self):
        return "replayed"


class Inherits(Graph):
    pass


def test_the_graph_watch_knows_the_graph_being_captured_and_each_replay():
    replays = []
    watch = GraphWatch(replays.append, target=Graph)
    g, h = Graph(), Graph()
    with watch:
        assert watch.capturing is None
        g.capture_begin(pool=3)
        assert watch.capturing is g and g.began == 3
        g.capture_end()
        assert watch.capturing is None and g.ended
        assert g.replay() == "replayed" and h.replay() == "replayed" and g.replay()
    assert replays == [g, h, g]
    g.replay()
    assert len(replays) == 3  # gone after


def test_the_graph_watch_puts_back_inherited_methods_as_inherited():
    with GraphWatch(lambda graph: None, target=Inherits):
        assert "replay" in Inherits.__dict__
    assert not {"replay", "capture_begin", "capture_end"} & set(Inherits.__dict__)
    assert Inherits().replay() == "replayed"


def test_the_launch_timer_keeps_a_launch_only_where_the_spin_covered_it(monkeypatch):
    """LaunchTimer on a stand-in torch: a spin goes on the stream before the start event;
    a launch whose start event the GPU had already passed when it returned (the host was
    slower than the spin) is not kept and the spin doubles; one queued in time is kept;
    nothing is timed while a graph is captured."""
    import sys
    import types

    from evo.model.hook import LaunchTimer

    calls = []

    class Event:
        passed = False  # what query() says: the GPU has passed this event

        def __init__(self, enable_timing):
            assert enable_timing

        def record(self, stream):
            calls.append(("record", stream))

        def query(self):
            return Event.passed

    class Stream:
        cuda_stream = 7

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    stream = Stream()
    cuda = types.SimpleNamespace(
        Event=Event, is_current_stream_capturing=lambda: capturing[0],
        current_stream=lambda: stream, stream=lambda s: s,
        _sleep=lambda cycles: calls.append(("sleep", cycles)))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    capturing = [False]
    timer = LaunchTimer()
    result, events = timer.time(7, lambda: "launched")
    assert result == "launched" and events is not None
    assert calls[0] == ("sleep", LaunchTimer.SPIN_CYCLES) and calls[1] == ("record", stream)
    Event.passed = True  # the GPU got to the start event before the launch was queued
    assert timer.time(7, lambda: "again") == ("again", None)
    assert timer.uncovered == 1 and timer.spin == 2 * LaunchTimer.SPIN_CYCLES
    capturing[0] = True
    calls.clear()
    assert timer.time(7, lambda: "in a graph") == ("in a graph", None) and calls == []
