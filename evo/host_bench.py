"""How much of one core an evo command takes in evo's own process: its wall time and its
main process's CPU seconds, optionally with GPU workers that answer at once.

    python -m evo.host_bench [--fake-gpu] [--profile FILE] -- run --model DIR --gpus 0,1 ...

Kernels searched at once run as threads of one process, so that process's CPU (one core,
Python's lock) bounds a run on many GPUs: a model job on four H200s spent 46 s of its 53 s
there (BENCHMARKS.md, session 20). ``--fake-gpu`` replaces each GPU worker by one that
answers every candidate at once (valid, cycles from the cubin's hash), so that what is left
is the host side alone, on a machine without a GPU; its figures are not measurements of any
kernel. ``--profile FILE`` writes cProfile's statistics of the main thread and every thread
the command starts (wall-clock time: threads waiting for the lock count too; use
``--jobs 1`` to read CPU). On Python 3.12 and later a process has one profiler, the main
thread's, and it sees every thread: there each thread's own profiler is refused, and the
thread runs without it (before, every search thread died there and the run hung until
its timeout: resnet50's model job on two H200s, BENCHMARKS.md session 21).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import resource
import sys
import threading
import time


class InstantWorker:
    """A GPU worker that measures nothing: every candidate valid, its cycles from the hash
    of its cubin, answered at once."""

    def __init__(self, device_id: int = 0, **_):
        self.device_id = device_id

    def device_name(self) -> str:
        return "instant worker (no GPU)"

    def measure(self, request):
        from harness.record import Measurement

        digest = int(hashlib.sha1(request.cubin).hexdigest()[:6], 16)
        return Measurement(kernel=request.kernel_name or request.spec.name,
                           device=self.device_name(), valid=True, timer=request.spec.timing,
                           cycles=1000.0 + digest % 300, n=30, backend="gpu",
                           notes={"us_per_launch": 10.0})

    def close(self) -> None:
        pass


def _fake_gpu() -> None:
    """GPU workers that answer at once, an apply pool as on a machine of 8+ cores."""
    import harness.backends as backends
    import harness.evaluate as evaluate
    import harness.gpu.worker as worker

    worker.GpuWorker = InstantWorker
    backends.gpu_visible = lambda: (True, "--fake-gpu")
    init = evaluate.Evaluator.__init__

    def with_pool(self, *args, **kwargs):
        kwargs.setdefault("apply_workers", 8)
        init(self, *args, **kwargs)

    evaluate.Evaluator.__init__ = with_pool


def _profile_threads(profiles: list) -> None:
    """Every thread started from here on runs under a profiler of its own."""
    run = threading.Thread.run

    def profiled(self):
        profile = cProfile.Profile()
        try:
            profile.enable()
        except ValueError:  # Python 3.12+: one profiler a process, and the main one sees
            return run(self)  # every thread (sys.monitoring); this thread runs unprofiled
        profiles.append(profile)
        try:
            run(self)
        finally:
            profile.disable()

    threading.Thread.run = profiled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evo.host_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fake-gpu", action="store_true",
                        help="GPU workers that answer at once (no GPU needed; nothing measured)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile statistics of every thread")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then evo's arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give evo's arguments after --, e.g. -- run --model DIR")
    if args.fake_gpu:
        _fake_gpu()
    profiles: list = []
    main_profile = cProfile.Profile()
    if args.profile:
        _profile_threads(profiles)
        main_profile.enable()
    from evo.cli import main as evo_main

    start = time.perf_counter()
    try:
        code = evo_main(command)
    except SystemExit as done:
        code = done.code
    wall = time.perf_counter() - start
    if args.profile:
        import pstats

        main_profile.disable()
        stats = pstats.Stats(main_profile)
        for profile in profiles:
            try:
                stats.add(profile)
            except TypeError:  # a thread that ran no Python
                pass
        stats.dump_stats(args.profile)
    used = resource.getrusage(resource.RUSAGE_SELF)
    print(f"host_bench: exit {code}, wall {wall:.1f} s, main process CPU "
          f"{used.ru_utime + used.ru_stime:.1f} s{' (--fake-gpu: nothing measured)' if args.fake_gpu else ''}",
          file=sys.stderr)
    return code if isinstance(code, int) else 1


if __name__ == "__main__":
    sys.exit(main())
