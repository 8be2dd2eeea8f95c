"""Processes that get ready before they hold a GPU, then run together in one turn.

A finalist check runs three or four processes of its own (compute-sanitizer's tools and
the determinism runs, ``harness.gpu.finalist``). Each spends about a second starting
Python, importing NumPy and CuPy, and more under compute-sanitizer, before it touches the
GPU, and a GPU lent to a check measures nothing meanwhile (``evo.driver.GpuTurns``): on
issue 27's ten-kernel mix on one GPU each kernel's check held it 1.4-4.2 s of a 74-78 s run
(BENCHMARKS.md, session 21); started first, 0.01-1.5 s (session 22).

So the processes start first, without the GPU: each prints ``READY`` once its host work is
done and waits on its stdin. Only when every one is ready (or has already ended) does the
caller take its turn (``turn()``: a context manager giving the device ordinal, or None for
the default device), write that ordinal to each, and wait inside the turn until each
has printed ``GPU_DONE`` (its outputs are on the host) or ended: what it does after (save
its outputs, the sanitizer's report, the exit) happens with the turn given back.
``wait_for_turn`` and ``done_with_gpu`` are the process's side.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: processes start here


def checkout_env() -> dict:
    """A started process's environment: this checkout importable, the GPUs this process
    sees (the ordinal of the turn's GPU is given on its stdin)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))


def visible_as(device: int) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows a started process this process's GPU
    ``device`` and no other (there it is ordinal 0), or None where this process's own
    value does not name it. A process that sees one GPU starts CUDA on that one alone,
    with no driver state on the others. What it saves is small: sixteen finalist checks
    at once on two H200s took 12.6 and 10.8 s seeing both GPUs, 10.6 and 10.3 s seeing
    one; their time goes to thirty-two CUDA contexts made at once, however many GPUs
    each sees (BENCHMARKS.md, session 28)."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if seen is None:
        return str(device) if device >= 0 else None
    entries = [e.strip() for e in seen.split(",")]
    return entries[device] if 0 <= device < len(entries) and entries[device] else None


READY = "evo-ready-for-a-gpu"
"""The line a process prints when all it does before touching the GPU is done."""
GPU_DONE = "evo-done-with-the-gpu"
"""The line a process prints when it will run nothing more on the GPU."""


def wait_for_turn() -> int | None:
    """The process's side: say ``READY``, then block until the caller writes the device
    ordinal to use (an empty line: the default device). Raises EOFError when the caller
    closed stdin without a turn (it gave up or was interrupted)."""
    print(READY, flush=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError("the caller ended without giving a GPU turn")
    return int(line) if line.strip() else None


def done_with_gpu() -> None:
    """The process's side: nothing more will run on the GPU (the caller may give its
    turn back)."""
    print(GPU_DONE, flush=True)


class _Started:
    """One process: its output read in a thread (so a full pipe never stalls it), the
    ``READY`` and ``GPU_DONE`` lines taken out and signalled."""

    def __init__(self, cmd: list[str], cwd, env: dict):
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines: list[str] = []
        self.ready = threading.Event()  # set at READY, or when the output ends
        self.released = threading.Event()  # set at GPU_DONE, or when the output ends
        self.said_ready = False  # it printed READY (not only ended)
        self.ended = threading.Event()  # its output ended (it exited, or closed it)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # a marker is found inside a line too: the sanitizer
            # writes to the same pipe, and a write of its own may share the marker's line
            marked = False
            for marker, event in ((READY, self.ready), (GPU_DONE, self.released)):
                if marker in line:
                    self.said_ready = self.said_ready or marker == READY
                    event.set()
                    line, marked = line.replace(marker, ""), True
            if not marked or line.strip():
                self.lines.append(line)
        self.ended.set()  # before ready: a caller woken by it sees the end
        self.ready.set()
        self.released.set()

    def go(self, gpu: int | None) -> None:
        with contextlib.suppress(OSError):  # it already ended: its output says why
            self.proc.stdin.write("\n" if gpu is None else f"{gpu}\n")
            self.proc.stdin.close()

    def finish(self, wait_s: float, timeout_s: float) -> tuple[int | None, str, float]:
        """(exit code, output, seconds since start) once it ends within ``wait_s``; else
        killed, None, and the output says it ran past ``timeout_s``."""
        note = ""
        try:
            code = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code, note = None, f"\ntimed out after {timeout_s:g} s"
            self.proc.wait()
        self._reader.join()
        return code, "".join(self.lines) + note, time.perf_counter() - self.start

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_when_ready(commands: dict[str, list[str]], timeout_s: float, cwd, env: dict,
                   turn: Callable[[], contextlib.AbstractContextManager]) -> tuple[dict, float]:
    """Start every command (each calls ``wait_for_turn`` before its GPU work), wait until
    all are ready or ended (``timeout_s``), then inside ``turn()`` let them go on the
    turn's device and wait until each is done with it (no turn at all where every one
    ended without getting ready); then wait for them to end (within
    ``timeout_s`` of the go). Returns ({name: (exit code or None when timed out, stdout
    and stderr together without the ``READY`` and ``GPU_DONE`` lines, seconds since
    start)}, the seconds the turn was held)."""
    started: dict[str, _Started] = {}
    try:
        for name, cmd in commands.items():
            started[name] = _Started(cmd, cwd, env)
        deadline = time.perf_counter() + timeout_s
        for run in started.values():
            run.ready.wait(max(0.0, deadline - time.perf_counter()))
        if all(run.ended.is_set() and not run.said_ready for run in started.values()):
            # every one ended before it was ready (torch sees no GPU, a setup error): a
            # turn would hold a GPU for nothing
            held, deadline = 0.0, time.perf_counter() + timeout_s
        else:
            with turn() as gpu:
                held = time.perf_counter()
                deadline = held + timeout_s
                for run in started.values():
                    run.go(gpu)
                for run in started.values():
                    run.released.wait(max(0.0, deadline - time.perf_counter()))
                held = time.perf_counter() - held
        done = {name: run.finish(max(0.0, deadline - time.perf_counter()), timeout_s)
                for name, run in started.items()}
        return done, held
    finally:  # an interrupt, or an exception above: no process outlives the check
        for run in started.values():
            run.kill()
