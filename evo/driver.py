"""Searching several kernels at once (``[run] jobs``, ``evo run --jobs``).

Each kernel's search runs in its own thread with its own seeded RNG, so what it finds does
not depend on which kernels run beside it; at most ``jobs`` run at a time. The backend
measures one candidate per GPU (or cluster worker) at a time whoever asks, so searches
running together keep every measuring slot busy while others apply genes and run ptxas.

The run's checkpoint and events.jsonl stay exact (a resumed run holds exactly an
uninterrupted run's rows): each kernel works on its own share of the checkpoint
(``KernelLedger``) and holds its events until its next save, which appends them and writes
the whole checkpoint under one lock, so the file never holds an event whose state the
checkpoint lacks (``events_bytes``).

Timing is not shared: ``GpuTurns`` keeps the steps that run their own processes on a GPU
(the finalist check under compute-sanitizer, a peer's timing) apart from the measurements on
that GPU.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import dataclasses
import json
import queue
import threading
from collections.abc import Callable

from evo.checkpoint import PER_KERNEL



class Stopped(Exception):
    """Raised inside a search when another kernel's failed or the run was interrupted."""


class GpuTurns:
    """Who uses the run's GPUs now.

    Measurements (``shared``) use whichever GPU is free: each GPU's worker takes one
    candidate at a time whoever asks. Finalist checks (``checks``: compute-sanitizer and the
    determinism runs, processes of their own that time nothing) may run beside one another
    but never beside a measurement on their GPU, which they would slow; a peer's timing
    (``alone``) beside nothing on its GPU. Each turn gives the device id to run on, or None
    (the process's default GPU).

    Where the backend lends GPUs one at a time (``lend``, the GPU backend), a check or a
    peer's timing borrows one GPU and the other GPUs go on measuring. Otherwise the turns
    take every GPU by groups: a turn of another group waits until the holders are done and
    holds back everyone who asks after it (first come, first served between groups), so
    measurements asked for all the time never starve a check, nor checks a measurement. On
    the default suite eight kernels' finalist checks took 17 s one after another
    (BENCHMARKS.md, session 16), on resnet50's eighteen 71-98 s."""

    MEASURE, CHECK, ALONE = "measure", "check", None

    def __init__(self, lend: Callable | None = None, book: Callable | None = None):
        self._lend = lend  # lend(share, device) -> a context manager giving a device id
        self._book = book  # book() -> a context manager giving the device a check will use
        self._cond = threading.Condition()
        self._group: str | None = None  # the holders' group (ALONE: one holder)
        self._holders = 0
        self._queue: list[tuple[object, str | None]] = []  # waiting turns, oldest first

    def shared(self):
        """A measurement's turn."""
        return contextlib.nullcontext() if self._lend else self._turn(self.MEASURE)

    def check_gpu(self):
        """The GPU a kernel's finalist checks will run on, chosen before their processes
        start (a context manager giving its device id; None where GPUs are not lent)."""
        return self._book() if self._lend and self._book else contextlib.nullcontext(None)

    def checks(self, device: int | None = None):
        """A finalist check's turn, on ``device`` where ``check_gpu`` gave one."""
        return self._lend(share=True, device=device) if self._lend else self._turn(self.CHECK)

    def alone(self):
        """A turn with a GPU to itself (a peer's timing)."""
        return self._lend(share=False) if self._lend else self._turn(self.ALONE)

    @contextlib.contextmanager
    def _turn(self, group: str | None):
        ticket = (object(), group)
        with self._cond:
            self._queue.append(ticket)
            self._cond.wait_for(lambda: self._may_enter(ticket))
            self._queue.remove(ticket)
            self._group, self._holders = group, self._holders + 1
        try:
            yield None
        finally:
            with self._cond:
                self._holders -= 1
                self._cond.notify_all()

    def _may_enter(self, ticket) -> bool:
        """Everyone asking before ``ticket`` is of its group (they enter together), and the
        GPUs are free or held by its group; alone never shares."""
        group = ticket[1]
        for waiting in self._queue:
            if waiting is ticket:
                break
            if waiting[1] != group or group is self.ALONE:
                return False
        return self._holders == 0 or (group is not self.ALONE and self._group == group)


@dataclasses.dataclass
class MemoryLedger:
    """A kernel's search kept in memory alone (``evo bench``'s searches, tests): what a
    ``KernelLedger`` offers a search, with the events in ``kept`` and ``on_save`` called
    where a run would write the checkpoint."""

    checkpoint: dict
    on_save: Callable[[], None] = lambda: None
    kept: list = dataclasses.field(default_factory=list)

    def events(self, events: list[dict]) -> None:
        self.kept.extend(events)

    def save(self) -> None:
        self.on_save()


class KernelLedger:
    """One kernel's share of the run's checkpoint and its events held until it saves."""

    def __init__(self, name: str, checkpoint: dict, write, lock: threading.Lock,
                 encoded: dict | None = None):
        self.name, self._checkpoint, self._write, self._lock = name, checkpoint, write, lock
        self._encoded = {} if encoded is None else encoded  # the run's, see hand_over
        with lock:  # a copy: no other thread ever changes what this kernel's search reads
            self.checkpoint = {s: ({name: copy.deepcopy(checkpoint[s][name])}
                                   if name in checkpoint.get(s, {}) else {}) for s in PER_KERNEL}
        self._pending: list[dict] = []

    def events(self, events: list[dict]) -> None:
        self._pending.extend(events)

    def save(self) -> None:
        """This kernel's entries into the run's checkpoint, then its events appended and
        the checkpoint written (``write(events)``), all under the run's lock."""
        with self._lock:
            self._write(self.hand_over())

    def hand_over(self) -> list[dict]:
        """This kernel's entries into the run's checkpoint; its held events, for the caller
        to write with it (the caller holds the run's lock). Each entry goes in as its JSON
        text (``encoded``: (section, kernel) -> text, what ``evo.checkpoint.dumps`` writes
        the file from) and as a copy read back from that text (for what reads the run's
        checkpoint, such as report.md at the end): nothing this kernel's search goes on
        changing is shared with another thread, and nobody encodes it again."""
        for section in PER_KERNEL:
            if self.name in self.checkpoint[section]:
                text = json.dumps(self.checkpoint[section][self.name], sort_keys=True)
                self._encoded[(section, self.name)] = text
                self._checkpoint.setdefault(section, {})[self.name] = json.loads(text)
        pending, self._pending = self._pending, []
        return pending


AUTO_JOBS_PER_SLOT = 4
"""``[run] jobs = 0``: kernels searched at once per measuring slot (GPU or cluster worker).
A search's host work (apply, ptxas) outweighs its GPU work, so one GPU feeds several:
``evo run --generations 9 --pop 5`` on the default suite, one H200, took 75 s one kernel
at a time, 55 s two at a time, 44 s four and 50 s eight (BENCHMARKS.md, session 15)."""


def jobs_for(requested: int, offers: dict, kernels: int, alone: bool) -> int:
    """Kernels searched at once: ``requested``, or for 0 (auto) four per candidate the
    backend measures at once (``Backend.offers``), so that every GPU or worker has a batch
    to measure while the next one is applied and compiled; one where a search needs the
    GPU to itself between its measurements (``alone``: the LLM's Nsight Compute passes);
    never more than there are kernels."""
    if requested > 0:
        return requested
    if alone:
        return 1
    return max(1, min(kernels, AUTO_JOBS_PER_SLOT * offers.get("measure_slots", 1)))


def each_kernel(items: list, work, jobs: int, stop: threading.Event, finish=None) -> list:
    """``work(item, slot)`` for every item, ``jobs`` at a time (``slot`` in 0..jobs-1 says
    which of the running ones it is: a progress bar's line), then, where given,
    ``finish(item, work's result)`` without a slot (``jobs`` of them at a time, apart):
    the next item's work starts meanwhile.
    (A kernel's steps after its search mostly wait, on the finalist check's processes and
    on GPU turns; holding a slot through them, a peer's timing of 14 s kept the next
    kernel's search from starting: BENCHMARKS.md, session 22.) Results (``finish``'s, else
    ``work``'s) in item order. The first failure, or Ctrl-C, sets ``stop`` (running
    searches raise ``Stopped`` at their next batch) and is raised once every thread has
    ended."""
    finish = finish or (lambda item, out: out)
    if jobs <= 1:
        return [finish(item, work(item, 0)) for item in items]
    slots: queue.Queue = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)
    pool = concurrent.futures.ThreadPoolExecutor(jobs, thread_name_prefix="kernel")
    # as many finishing at once as searching: each finalist check starts 3-4 processes
    after = concurrent.futures.ThreadPoolExecutor(jobs, thread_name_prefix="kernel-after")

    def run(item):
        slot = slots.get()
        try:
            out = work(item, slot)
        finally:
            slots.put(slot)
        return after.submit(finish, item, out)

    searches = [pool.submit(run, item) for item in items]
    pending = set(searches)
    try:
        while pending:  # a search's end brings its finish; the first failure stops all
            done, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                got = future.result()
                if future in searches:
                    pending.add(got)
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        after.shutdown(wait=True, cancel_futures=True)
    return [f.result().result() for f in searches]
