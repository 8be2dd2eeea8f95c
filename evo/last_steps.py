"""A kernel's best, reduced and measured again: the last steps of ``evo run`` per kernel,
begun beside its finalist check.

The finalist check (``evo.finalists.check_best``) runs processes of its own that spend
seconds on the host (Python, CuPy, compute-sanitizer) and hold a GPU for a fraction of
that; measuring the best again and reducing its genome are GPU measurements. One after
the other they made each kernel's path to its end: on resnet50's model job on four GPUs,
after the last searches, finalist check 2.4-11.4 s, reduce up to 4.0 s, measured again up
to 5.2 s a kernel while the GPUs had nothing else to measure (BENCHMARKS.md, session 23).
So ``begin`` measures and reduces the best in a thread while the check runs; where the
check keeps that best (almost always) ``reduce`` and ``confirm`` store what was found,
else they do it again for the genome it kept. Nothing is stored from the thread: the
kernel's own thread stores what it uses, so the checkpoint is written by one thread.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

from genomes.genome import Genome
from harness.kernels.spec import KernelSpec

from evo.checkpoint import REDUCED, KernelEntry, section


def begin(backend, spec: KernelSpec, best, checkpoint: dict, saved: KernelEntry, code_keys,
          measure, turn) -> concurrent.futures.Future:
    """In a thread begun now: the best genome ``best`` measured again (``measure_again``,
    inside ``turn()``) and reduced (``evo.reduce.reduced_entry`` with ``measure``), each
    unless the checkpoint already holds it for this best (a resume). The future's value:
    {"genome": best, "confirmed": dict or None, "reduced": dict or None, "seconds":
    {step: wall seconds}}, for ``confirm`` and ``reduce``."""
    from evo.reduce import reduced_entry

    genome = Genome.from_json(best)
    done_reduced = section(checkpoint, REDUCED).get(spec.name)  # read here, before the thread
    done_confirmed = saved.confirmed
    future: concurrent.futures.Future = concurrent.futures.Future()

    def work() -> None:
        try:
            got = {"genome": best, "confirmed": None, "reduced": None, "seconds": {}}
            start = time.perf_counter()
            if not (done_confirmed and done_confirmed.get("genome") == best):
                with turn():
                    got["confirmed"] = measure_again(backend, spec, best)
                got["seconds"]["measured again"] = time.perf_counter() - start
            start = time.perf_counter()
            if genome.genes and not (done_reduced and Genome.from_json(done_reduced["from"]) == genome):
                got["reduced"] = reduced_entry(genome, code_keys, measure)
                got["seconds"]["reduce"] = time.perf_counter() - start
            future.set_result(got)
        except BaseException as err:  # the kernel's thread raises it at result()
            future.set_exception(err)

    threading.Thread(target=work, name=f"last-steps-{spec.name}", daemon=True).start()
    return future


def reduce(spec: KernelSpec, result, checkpoint: dict, code_keys, measure=None,
           ahead: dict | None = None) -> bool:
    """The best genome without the genes its machine code does not need, and (``measure``:
    a GPU) those whose removal costs no more than the noise (``evo.reduce``), into the
    checkpoint's ``reduced`` section; False where already there for this best. ``ahead``:
    ``begin``'s value, used where it reduced this very best."""
    from evo.reduce import reduced_entry

    best = Genome.from_json(result.best_genome)
    reduced = section(checkpoint, REDUCED)
    done = reduced.get(spec.name)
    if not best.genes or (done and Genome.from_json(done["from"]) == best):
        return False
    if ahead and ahead["reduced"] and ahead["genome"] == result.best_genome:
        reduced[spec.name] = ahead["reduced"]
    else:
        reduced[spec.name] = reduced_entry(best, code_keys, measure)
    return True


def confirm(backend, spec: KernelSpec, result, saved: KernelEntry,
            ahead: dict | None = None) -> dict:
    """The kernel's baseline and best measured again, back to back (``measure_again``),
    kept in the kernel's checkpoint entry (``saved``), so a resumed run does not measure a
    confirmed best twice. ``ahead``: ``begin``'s value, used where it measured this very
    best.

    Why: the search compares figures taken at different moments (minutes apart in a long
    run), and a GPU's state can move them (H200s read the same cubin ~0.3 % apart from one
    measurement to the next before the timer's settle launch: BENCHMARKS.md, Precision).
    Measured at one moment, the two figures give the speedup to quote, and the gap to the
    search's own figures shows the drift."""
    done = saved.confirmed
    if done and done.get("genome") == result.best_genome:
        return done
    if ahead and ahead["confirmed"] and ahead["genome"] == result.best_genome:
        saved.confirmed = ahead["confirmed"]
    else:
        saved.confirmed = measure_again(backend, spec, result.best_genome)
    return saved.confirmed


def measure_again(backend, spec: KernelSpec, best) -> dict:
    """The baseline and the genome ``best`` measured back to back (in one worker where the
    run has one GPU; with several, each goes to the first idle one), with a store of their
    own so nothing is answered from earlier figures: ``confirm``'s entry."""
    from harness.evaluate import Evaluator
    from harness.store import Store

    genome = Genome.from_json(best)
    with Store(":memory:") as store:
        fresh = Evaluator(backend, store)
        try:
            base = fresh.baseline(spec)
            measured = fresh.evaluate(spec, [genome])[0] if genome.genes else base
        finally:
            fresh.close()
    return {"genome": best,
            "baseline": base.cycles if base.valid else None,
            "best": measured.cycles if measured.valid else None,
            "reason": "" if measured.valid and base.valid else
            (measured.reason if base.valid else base.reason)}
