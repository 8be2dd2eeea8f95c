"""A user's whole program under evo: ``evo capture -- python app.py ARGS`` records the Triton
kernels it launches into a capture folder (``evo.capture`` does the same for one step).

The program runs in this process as ``python app.py ARGS`` (or ``python -m pkg ARGS``)
would run it (``runpy``; ``sys.argv`` and ``sys.path[0]`` set as Python sets them), so that
every launch it makes through Inductor's ``CachingAutotuner.run`` passes evo's wrapper.

What a whole program costs to watch, and how it is kept small (``ProgramRecorder``):
- a launch is known by its kernel and its arguments' dtypes, shapes, strides and scalar
  values; only the first launch of each is recorded in full (its PTX, grid and every
  argument's value range, which reads the tensors); later ones are counted;
- the GPU time of a kernel is the mean of up to ``TIMED`` launches timed with CUDA
  events on the launch's stream behind a GPU spin that hides the host's launch work
  (``hook.LaunchTimer``; no synchronisation until the program ends), times its
  count; the first launch of each kernel is not timed (it compiles and autotunes);
- a launch recorded while a CUDA graph is being captured (``torch.compile(mode=
  "reduce-overhead")``, ``torch.cuda.graph``) runs on each replay of that graph, which
  bypasses Inductor's launcher: it counts once per replay (``hook.GraphWatch``), the
  manifest lists it under ``graphed``, and from the first replay on ``torch.profiler``
  records the GPU's kernels, graph nodes included (CUPTI), so that a kernel that ran
  only inside graphs is timed by the mean of its replayed runs under its name.
Shares are of the Triton kernels' GPU time (the program's other GPU work is not timed),
which is what ``evo run --budget-evals`` splits evaluations by.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import traceback
from pathlib import Path

from genomes.errors import EvoError, RuntimeFailure

from evo.model.hook import GraphWatch, LaunchHook, LaunchTimer, elapsed_us

TIMED = 20  # launches timed per kernel and arguments; the rest count at their mean
USAGE = "evo capture --out DIR -- python app.py [ARGS]"
LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "mpirun", "srun")  # start many processes


def program_argv(command: list[str]) -> tuple[str, str, list[str]]:
    """(kind, target, argv) of ``python app.py ARGS``, ``app.py ARGS`` or ``python -m pkg
    ARGS``: kind "path" or "module", the script or module, and ``sys.argv`` for it."""
    cmd = list(command)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if cmd and re.fullmatch(r"python[\d.]*", Path(cmd[0]).name):  # python3, /venv/bin/python3.12
        cmd = cmd[1:]
    if not cmd:
        raise EvoError(f"no program given: {USAGE}")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise EvoError(f"python -m needs a module name: {USAGE}")
        return "module", cmd[1], cmd[1:]
    if cmd[0].startswith("-"):
        raise EvoError(f"python option {cmd[0]} is not supported here: the program runs in "
                       "evo's own Python (set PYTHON* environment variables instead)")
    if Path(cmd[0]).name in LAUNCHERS and not Path(cmd[0]).is_file():
        raise EvoError(f"{cmd[0]} starts several processes; evo runs one, in its own Python: "
                       "give one rank as python app.py ARGS (with the environment it needs, "
                       "e.g. RANK=0 WORLD_SIZE=1 MASTER_ADDR=localhost MASTER_PORT=29500). "
                       "To put evolved kernels into every worker, evo install without a "
                       "program prints the environment that does")
    if not Path(cmd[0]).is_file():
        raise EvoError(f"{cmd[0]}: no such script (the command is {' '.join(command)})")
    return "path", cmd[0], cmd


def need_torch(what: str):
    """torch, with Inductor and a CUDA device, or a RuntimeFailure saying which is missing."""
    try:
        import torch
        import torch._inductor.runtime.triton_heuristics  # noqa: F401  (what evo wraps)
    except ImportError as err:
        raise RuntimeFailure(f"{what} needs PyTorch with Inductor and Triton in this Python "
                             f"({err}): pip install torch") from None
    if not torch.cuda.is_available():
        raise RuntimeFailure(f"{what}: PyTorch sees no CUDA device")
    return torch


def run_program(command: list[str]) -> int:
    """Run the program in this process; its exit status (an exception it raises is
    printed as Python would, status 1). ``sys.argv`` and ``sys.path`` are restored."""
    kind, target, argv = program_argv(command)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    sys.path.insert(0, str(Path(target).resolve().parent) if kind == "path" else os.getcwd())
    try:
        if kind == "path":
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except Exception:  # the program's own error: its traceback, as Python prints it
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _launch_key(autotuner, args) -> tuple:
    """One kernel with one set of argument shapes: dtypes, shapes and strides of tensors,
    values of everything else (sizes decide the grid)."""
    parts = []
    for value in args:
        if hasattr(value, "data_ptr") and hasattr(value, "stride"):
            parts.append((str(value.dtype), tuple(value.shape), tuple(value.stride())))
        elif isinstance(value, (int, float, bool, str, type(None))):
            parts.append(value)
        else:
            parts.append(type(value).__name__)
    return (id(autotuner), autotuner.fn.__name__, tuple(parts))


class ProgramRecorder(LaunchHook):
    """While active, Inductor's launches are recorded as the module docstring says."""

    def __init__(self, timed: int = TIMED):
        super().__init__()
        self.timed = timed
        self.first: dict[tuple, object] = {}  # key -> capture.Launch, the first launch in full
        self.counts: dict[tuple, int] = {}  # key -> launches run (graph replays included)
        self.timings: dict[tuple, list] = {}  # key -> [(start event, end event)]
        self.graphed: set[str] = set()
        self._launched: set[int] = set()  # id() of autotuners past their first launch
        self._in_graph: dict[int, dict[tuple, int]] = {}  # id(graph) -> key -> launches in it
        self._graphs = GraphWatch(self._replayed)
        self.timer = LaunchTimer()
        self._profiler = None  # torch.profiler from the first replay on; False: it failed
        self.replayed_us: dict[str, tuple[float, int]] = {}  # name -> (µs, runs) profiled

    def __enter__(self):
        self._graphs.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._end_profile()
        return self._graphs.__exit__(*exc)

    def _profile_replays(self) -> None:
        """Start ``torch.profiler`` (GPU activity only) before the first replay: events
        cannot time what a graph runs, CUPTI's kernel records can."""
        if self._profiler is not None:
            return
        try:
            from torch.profiler import ProfilerActivity, profile

            try:  # acc_events: keep every event (and no warning that a cycle clears them)
                self._profiler = profile(activities=[ProfilerActivity.CUDA], acc_events=True)
            except TypeError:  # a torch before acc_events
                self._profiler = profile(activities=[ProfilerActivity.CUDA])
            self._profiler.start()
        except Exception as err:  # noqa: BLE001 (the program's own profiler, no CUPTI): untimed
            print(f"evo capture: kernels inside CUDA graphs are not timed ({err})", file=sys.stderr)
            self._profiler = False

    def _end_profile(self) -> None:
        if not self._profiler:
            return
        import torch

        from evo.model.step_time import profiled_kernels

        torch.cuda.synchronize()
        self._profiler.stop()
        self.replayed_us = {name: (us, runs) for name, (us, runs) in
                            profiled_kernels(self._profiler).items() if runs}
        self._profiler = False

    def launch(self, autotuner, args, stream, run):
        from evo.model.capture import arguments_of, launch_of

        key = _launch_key(autotuner, args)
        graph = self._graphs.capturing
        before = arguments_of(autotuner, args) if key not in self.first else None
        if self._timing(autotuner, key, graph):
            result, events = self.timer.time(stream, run)
            if events is not None:
                self.timings.setdefault(key, []).append(events)
        else:
            result = run()
        if before is not None:
            self.first[key] = launch_of(autotuner, args, before)
        if graph is not None:  # recorded, not run: it runs on each replay
            self.graphed.add(autotuner.fn.__name__)
            in_graph = self._in_graph.setdefault(id(graph), {})
            in_graph[key] = in_graph.get(key, 0) + 1
        else:
            self.counts[key] = self.counts.get(key, 0) + 1
        self._launched.add(id(autotuner))
        return result

    def _replayed(self, graph) -> None:
        self._profile_replays()
        for key, n in self._in_graph.get(id(graph), {}).items():
            self.counts[key] = self.counts.get(key, 0) + n

    def _timing(self, autotuner, key: tuple, graph) -> bool:
        """Whether to time this launch: not a kernel's first launch (it compiles and
        tunes), not one a graph records, not once enough are timed."""
        return (graph is None and id(autotuner) in self._launched
                and len(self.timings.get(key, ())) < self.timed)

    def kernel_times(self) -> dict[str, float]:
        """µs of GPU time per kernel name over the program: each key's timed mean times
        its count; a key launched only inside graphs, its name's mean over the profiled
        replays times its count (keys never timed add nothing)."""
        import statistics

        times: dict[str, float] = {}
        for key, pairs in self.timings.items():
            us = elapsed_us(pairs, statistics.mean)
            times[key[1]] = times.get(key[1], 0.0) + us * self.counts.get(key, 0)
        for key in self.first.keys() - self.timings.keys():
            total, runs = self.replayed_us.get(key[1], (0.0, 0))
            if runs:
                times[key[1]] = times.get(key[1], 0.0) + total / runs * self.counts.get(key, 0)
        return times

    def launches(self) -> list:
        """Every launch, as ``capture.write`` counts them (the first one's record, repeated;
        a launch recorded into a CUDA graph that was never replayed counts once)."""
        return [launch for key, launch in self.first.items()
                for _ in range(max(1, self.counts.get(key, 0)))]


def capture_program(command: list[str], out, timed: int = TIMED) -> tuple[dict | None, int]:
    """Run the program under a ``ProgramRecorder`` and write the capture folder ``out``:
    (the manifest, or None where it launched no Inductor kernel; its exit status). What
    was recorded is written even where the program failed."""
    from evo.model.capture import write

    program_argv(command)  # a bad command line fails before torch is imported
    torch = need_torch("evo capture")
    with ProgramRecorder(timed) as recorder:
        status = run_program(command)
    if not recorder.first:
        return None, status
    times = recorder.kernel_times()
    manifest = write(recorder.launches(), out, times, sum(times.values()), step_timed=False,
                     source={"command": " ".join(command), "exit_status": status,
                             "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                             "timed_per_kernel": timed, "graphed": sorted(recorder.graphed)})
    return manifest, status


def cmd_capture(args) -> int:
    """``evo capture``: the program's status where it failed, else 0 (1 where it launched
    no Inductor kernel)."""
    from evo.model.capture import MANIFEST

    manifest, status = capture_program(args.program, args.out, args.timed)
    if manifest is None:
        print(f"evo capture: the program launched no Inductor Triton kernel (is it "
              f"torch.compile'd and on a CUDA device?); exit status {status}", file=sys.stderr)
        return status or 1
    kernels, skipped = manifest["kernels"], manifest["skipped"]
    print(f"captured {len(kernels)} kernel(s) into {args.out}/{MANIFEST}"
          + (f"; {len(skipped)} could not be specs" if skipped else ""))
    for k in kernels:
        share = f"{100 * k['share']:5.1f} %" if k.get("share") else "    - "
        print(f"  {share}  {k['name']}  ({k['launches']} launches)")
    for s in skipped:
        print(f"  skipped {s['kernel']}: {s['reason']}")
    dynamic = [k["name"] for k in kernels if k.get("reads_sizes")]
    if dynamic:
        print(f"  {len(dynamic)} kernel(s) compiled for dynamic shapes read their sizes at run "
              "time (one code for every size: evo run --model evolves each once and checks its "
              "best at every size captured here; one captured at a single size is left out): "
              + ", ".join(dynamic))
    if manifest["source"].get("graphed"):
        print("  launched inside CUDA graphs (counted per replay, timed on the replays by "
              "torch.profiler): " + ", ".join(manifest["source"]["graphed"]))
    if status:
        print(f"evo capture: the program exited with status {status}; what it launched "
              "before is captured", file=sys.stderr)
    print(f"next: evo run --model {args.out} --budget-evals N")
    return status
