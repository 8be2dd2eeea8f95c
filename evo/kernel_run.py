"""One kernel's measuring, as every search does it: ``evo run``, ``evo bench`` and the API.

A search (``evo.search.search_kernel``) asks two things of the world: measure these genomes
(``KernelRun.measure``) and tell me their machine code without measuring
(``KernelRun.code_keys``). ``KernelRun`` answers both, the same way for every caller:

1. stop at once where another kernel's search failed or the user pressed Ctrl-C
   (``stop``; the search raises ``evo.driver.Stopped``);
2. apply and assemble the batch (``Evaluator.prepare``), then check and time it on the GPU
   (``Evaluator.finish``) in the GPUs' shared turn (``evo.driver.GpuTurns``), so that a
   finalist check or a peer's timing never runs beside a measurement; the seconds of
   each go into ``seconds`` ("search: ptxas", "search: GPU": report.md's table; the
   genomes applied and assembled only to know their machine code, and the genes tried
   alone, under "search: look-ups");
3. record what each gene did (``evo.learn.observe.link_results``, under the kernel's store
   name, as its measurements are);
4. show the batch to each observer (``Observer``): a progress bar, bench's curve.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from genomes.genome import Genome
from harness.record import Measurement

from evo.driver import GpuTurns, Stopped
from evo.learn.observe import link_results

PTXAS = "search: ptxas"  # the measured batches: apply, assemble, the static gate
LOOKUPS = "search: look-ups"  # machine code without measuring (novelty), genes alone (alphabet)
GPU = "search: GPU"  # checks and timing, the wait for the GPU's turn included


class Observer:
    """What a caller sees of each measured batch; the default sees nothing."""

    def evaluated(self, genomes: list[Genome], results: list[Measurement],
                  baseline: Measurement) -> None:
        """``results[i]`` is ``genomes[i]``'s; ``baseline`` the kernel's own."""


@dataclass
class KernelRun:
    """The module docstring's measuring for one kernel (``spec``) through ``evaluator``."""

    spec: object
    evaluator: object  # harness.evaluate.Evaluator
    stop: threading.Event = field(default_factory=threading.Event)
    turns: GpuTurns = field(default_factory=GpuTurns)
    observers: list[Observer] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def measure(self, genomes: list[Genome]) -> list[Measurement]:
        if self.stop.is_set():  # another kernel's search failed, or the run was interrupted
            raise Stopped(self.spec.name)
        with self._timed(GPU), self.turns.shared():
            baseline = self.evaluator.baseline(self.spec)  # measured at the first call
        with self._timed(PTXAS):
            batch = self.evaluator.prepare(self.spec, genomes)
        with self._timed(GPU), self.turns.shared():
            results = self.evaluator.finish(batch)
        link_results(self.evaluator, self.spec.store_name, genomes, results)
        for observer in self.observers:
            observer.evaluated(genomes, results, baseline)
        return results

    def code_keys(self, genomes: list[Genome]) -> list[str | None]:
        with self._timed(LOOKUPS):
            return self.evaluator.code_keys(self.spec, genomes)

    def changes_alone(self, genes: list) -> list[bool]:
        with self._timed(LOOKUPS):
            return self.evaluator.changes_alone(self.spec, genes)

    @contextlib.contextmanager
    def _timed(self, step: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - start


def store_path(store) -> str:
    """Where measurements are kept: ``store``, else ``$EVO_STORE``, else runs/store.sqlite."""
    import os

    return str(store if store is not None else os.environ.get("EVO_STORE") or "runs/store.sqlite")


@contextlib.contextmanager
def one_evaluator(backend: str, store, gpu: int = 0, device: str | None = None, seed: int = 0):
    """(Evaluator, backend) over the store at ``store_path(store)`` for measuring a few
    genomes outside a run (``evo measure``, ``evo.measure``); closed on exit. A replay
    needs a store to replay from."""
    from genomes.errors import EvoError
    from harness.backends import make_backend
    from harness.evaluate import Evaluator
    from harness.store import Store

    path = store_path(store)
    if backend == "replay" and path != ":memory:" and not Path(path).is_file():
        raise EvoError(f"no measurement store at {path} to replay from (--store, store= or "
                       "$EVO_STORE)")
    with Store(path) as db, make_backend(backend, store=db, gpus=[gpu], device=device,
                                         seed=seed) as measurer:
        evaluator = Evaluator(measurer, db)
        try:
            yield evaluator, measurer
        finally:
            evaluator.close()
