"""``evo run``: resolve the suite, open the run folder, search every kernel, write results.

This module wires the parts together; the search itself is ``evo.search``, the run folder
``evo.rundir``, measuring ``harness.evaluate``, and the report ``evo.report``.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import signal
import sys
import threading
import time
import tomllib
from contextlib import contextmanager
from pathlib import Path

from genomes.errors import EvoError
from genomes.genome import Genome, apply_genome
from harness.kernels import peer_process
from harness.kernels.spec import KernelSpec, with_caches

from evo import config as config_mod
from evo import report, runmeta, strategies
from evo.checkpoint import BACKEND, EVENTS_BYTES, LLM, PRIORS, REDUCED, SECONDS, KernelEntry, section
from evo.checkpoint import kernel as kernel_entry
from evo.config import Config
from evo.driver import AUTO_JOBS_PER_SLOT, GpuTurns, KernelLedger, each_kernel, jobs_for
from evo.exact import prefer_exact
from evo.finalists import check_best
from evo.kernel_run import KernelRun, Observer
from evo.learn import source as learn_source
from evo.model.capture import other_sizes
from evo.progress import Progress
from evo.run_kernels import resolve_suite
from evo.rundir import RunDir, RunDirError, default_name
from evo.search import check_resumable, new_checkpoint, search_kernel


def start_run(config: Config, out: Path | None) -> RunDir:
    return RunDir.create(out or Path("runs") / default_name(), config_mod.dumps(config))


def resume_run(path: Path, overrides: dict, from_previous: bool = False
               ) -> tuple[RunDir, Config, dict]:
    """Open a run to continue: its saved config with budget overrides, and its checkpoint."""
    run = RunDir.open(path)
    run.check_writable()
    try:
        data = tomllib.loads(run.config_text())
    except tomllib.TOMLDecodeError as err:
        raise RunDirError(f"cannot resume {path}: its config.toml is not valid TOML ({err}); "
                          f"fix it by hand") from None
    saved = config_mod.from_dict(data, str(run.path / "config.toml"))
    config = saved.override("run", **overrides) if overrides else saved
    if run.has_checkpoint():
        checkpoint = run.read_checkpoint(use_previous=from_previous)
        covered = checkpoint.get(EVENTS_BYTES)  # None: written before evo recorded it
    else:
        checkpoint, covered = new_checkpoint(config), 0  # starts over: every row comes again
    problem = check_resumable(checkpoint, config)
    if problem:
        raise RunDirError(f"cannot resume {path}: {problem}")
    # The resumed run repeats whatever came after the checkpoint (an interrupted
    # generation's evaluations): their rows go, so none is in events.jsonl twice.
    run.rewind_events(covered)
    run.write_config(config_mod.dumps(config))
    return run, config, checkpoint


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM behaves like Ctrl-C: the loop stops at once, the checkpoint stays valid."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def start_and_execute(config: Config, out: Path | None, verbosity: int, argv: list[str] | None
                      ) -> tuple[RunDir, list]:
    """A new run of ``config`` from start to end (``evo run`` and ``evo.api.run``): its
    folder, meta.json around the work, and the folder removed again when the run fails
    before its first evaluation (a Ctrl-C keeps it: ``--resume`` continues)."""
    from evo import runmeta

    run = start_run(config, out)
    try:
        with runmeta.recorded(run, argv, False):
            return run, execute(run, config, new_checkpoint(config), verbosity)
    except KeyboardInterrupt:
        raise
    except BaseException:
        run.discard()  # failed before its first evaluation: no folder of config.toml alone
        raise


def _begun(work, *args) -> concurrent.futures.Future:
    """``work(*args)`` begun in a thread of its own; its result (or error) from the future."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(work, *args)
    finally:
        pool.shutdown(wait=False)


def execute(run: RunDir, config: Config, checkpoint: dict, verbosity: int = 1) -> list:
    """Search every kernel; write best kernels, report; return the per-kernel results."""
    started = (time.perf_counter(), time.process_time())  # report.md: how busy evo itself was
    # [run] budget_minutes, from this start (or resume): each search ends after its generation
    deadline = (time.monotonic() + 60 * config.run.budget_minutes
                if config.run.budget_minutes else None)
    from harness.backends import make_backend
    from harness.evaluate import Evaluator
    from harness.store import Store

    kernels = [with_caches(spec, config.run.caches) for spec in resolve_suite(config.run.suite)]
    store = Store(config.run.store)
    priors = (learn_source.open_source(config.run.priors, store, config.run.store)
              if config.run.strategy == "evolve" else None)  # only evolve uses priors
    # The features of the kernels that get a prior (ptxas, cuobjdump: seconds for a
    # model's kernels) are computed while the backend starts its GPU workers (seconds too)
    warmed = _begun(priors.warm, [s for s in kernels if s.name not in checkpoint.get(
        PRIORS, {})]) if priors is not None else None
    backend = make_backend(config.run.backend, store=store, gpus=config.run.gpus,
                           cluster=config.cluster.address,
                           cluster_compile=config.cluster.compile,
                           device=config.run.device or None, seed=config.run.seed,
                           timing=config.to_dict()["timing"])
    checkpoint.setdefault(BACKEND, backend.describe())
    evaluator = Evaluator(backend, store)
    progress = Progress(len(kernels), verbosity)
    progress.note(f"run folder {run.path}; measuring with {backend.describe()}")
    llm = _llm_mutator(config, run, store, checkpoint)
    runmeta.record_backend(run, backend)
    if run.fresh:  # set up without error: the run has started, and is the newest
        run.link_latest()
    lock, stop, turns = threading.Lock(), threading.Event(), GpuTurns(backend.lend, backend.book)
    jobs = jobs_for(config.run.jobs, backend.offers(), len(kernels),
                    llm is not None and bool(config.llm.ncu_every))
    if config.run.jobs == 0:
        progress.note(f"searching {jobs} kernel(s) at once ([run] jobs = 0: "
                      f"{AUTO_JOBS_PER_SLOT} per measuring slot)")
    if jobs > 1 and llm is not None and config.llm.ncu_every:
        raise EvoError("[llm] ncu_every profiles a kernel with Nsight Compute, which needs the "
                       "GPU to itself: set [run] jobs = 1 or [llm] ncu_every = 0")

    encoded: dict = {}  # (section, kernel) -> the JSON text of its entry, see KernelLedger

    def write(events: list[dict]) -> None:  # under the lock (KernelLedger.save)
        run.append_events(events)  # before the checkpoint, so it covers them (events_bytes)
        if llm is not None:
            checkpoint[LLM] = llm.stats()
        run.write_checkpoint(checkpoint, encoded)

    # Every kernel's prior from the store as it stands before this run's searches, saved at
    # once: what a kernel finds then depends neither on which kernels ran before or beside
    # it nor, after a resume, on what the store learned in the meantime.
    ledgers = {spec.name: KernelLedger(spec.name, checkpoint, write, lock, encoded)
               for spec in kernels}
    if warmed is not None:
        warmed.result()  # its error, if any, is raised here
    for spec in kernels:
        ledger = ledgers[spec.name]
        learn_source.run_prior(priors, ledger.checkpoint, spec, backend.device, ledger.events)
    if priors is not None:  # one checkpoint for all of them
        with lock:
            write([e for ledger in ledgers.values() for e in ledger.hand_over()])

    budgets = {}
    if config.run.budget_evals:  # a model's evaluations where its time is (evo.model.budget)
        from evo.model import budget

        budgets = budget.split_evals(config.run.budget_evals, [s.name for s in kernels],
                                     budget.shares(config.run.suite), config.run.pop)
        progress.note("evaluations per kernel (share of the step): " + ", ".join(
            f"{name} {n}" for name, n in budgets.items()))

    peers = {}  # kernel -> its peer's timing, begun with its search (peer_process.begin)

    def one_kernel(spec: KernelSpec, slot: int):
        ledger = ledgers[spec.name]
        entry = kernel_entry(ledger.checkpoint, spec.name)
        if backend.remeasures and spec.peer and (entry is None or entry.peer is None):
            # in a process of its own: torch's import, its CUDA contexts and the inputs
            # while the search runs, then the GPU alone (no turn where torch cannot time
            # it here)
            peers[spec.name] = peer_process.begin(spec, turns.alone, tuple(config.run.gpus))
        config_k = config.override("run", max_evals=budgets[spec.name]) if budgets else config
        bar = progress.start_kernel(spec.name, _total_generations(config), slot)
        prior = ledger.checkpoint[PRIORS].get(spec.name)
        start = time.perf_counter()
        measuring = KernelRun(spec, evaluator, stop, turns, [_BarObserver(bar)])
        result = search_kernel(measuring, ledger, config_k, llm=llm, prior=prior,
                               on_generation=bar.generation, deadline=deadline)
        if result.out_of_time:
            progress.note(f"{spec.name}: --budget-minutes {config.run.budget_minutes:g} ran "
                          f"out: its search ended after generation {result.generations} "
                          f"({result.evals} evaluations); --resume with more minutes goes on")
        spent = _Seconds(ledger.checkpoint, spec.name, lock)
        spent.add("search", start)
        spent.add_parts(measuring.seconds)
        bar.searched()
        return result, measuring, bar

    def after_search(spec: KernelSpec, searched):
        """The steps after a kernel's search, its slot given to the next search."""
        result, measuring, bar = searched
        ledger = ledgers[spec.name]
        saved = kernel_entry(ledger.checkpoint, spec.name)
        spent = _Seconds(ledger.checkpoint, spec.name, lock)
        if backend.remeasures and config.run.exact_slack >= 0:  # outputs checked on a GPU
            start = time.perf_counter()
            if prefer_exact(result, saved, measuring.measure, config.run.exact_slack, ledger.events):
                spent.add("exact", start)
        # a code one launcher runs at several captured sizes: its best checked at each
        others = [with_caches(s, config.run.caches) for s in other_sizes(spec)] \
            if backend.remeasures else []
        if others:
            start = time.perf_counter()
            with turns.shared():
                _check_other_sizes(spec, result, saved, evaluator, others, ledger.events)
            spent.add("other sizes", start)
            progress.note(f"{spec.name}: at its other captured sizes: {_sizes_said(saved.sizes)}")
            ledger.save()
        if config.run.confirm and backend.remeasures:  # a GPU: finalists checked
            # Its GPU is chosen first, its processes make their CUDA context there, and the
            # GPU is taken once they are ready, beside other kernels' checks, never beside
            # a timing (where GPUs are not lent, contexts first only on a run of one GPU).
            start = time.perf_counter()
            with turns.check_gpu() as gpu:
                devices = (gpu,) if gpu is not None else (
                    tuple(config.run.gpus) if len(config.run.gpus) == 1 else ())
                held = check_best(spec, result, saved, ledger.events,
                                  turn=functools.partial(turns.checks, gpu), devices=devices)
            spent.add("finalist check", start)
            if held:  # its processes ran on a GPU (not: resumed, or no sanitizer here)
                spent.add_parts({report.FINALIST_GPU: held})
            if others:  # a runner-up the finalist check kept: checked at the sizes too
                with turns.shared():
                    _check_other_sizes(spec, result, saved, evaluator, others, ledger.events, tries=1)
            ledger.save()
        start = time.perf_counter()
        if _reduce(spec, result, ledger.checkpoint, functools.partial(evaluator.code_keys, spec),
                   measuring.measure if backend.remeasures else None):
            spent.add("reduce", start)
        _write_best(run, spec, result)
        if config.run.confirm and backend.remeasures:
            start, before = time.perf_counter(), saved.confirmed
            with turns.shared():
                result.confirmed = confirm(backend, spec, result, saved)
            spent.add("measured again", start)
            if result.confirmed is not before:  # not the checkpoint's (resumed) one
                ledger.events([{"type": "confirm", "kernel": spec.name, **result.confirmed}])
            ledger.save()
        peer = peers.pop(spec.name, None)
        if peer is not None:
            if not peer.done():
                progress.note(f"{spec.name}: waiting for its peer {spec.peer}'s timing")
            start = time.perf_counter()
            saved.peer, held = peer.result()
            if held:
                spent.add_parts({report.PEER_GPU: held})
            spent.add("peer", start)
        ledger.save()  # the steps' seconds, the peer
        bar.end(result)
        return result

    try:
        with _sigterm_as_interrupt(), backend:
            results = each_kernel(kernels, one_kernel, jobs, stop, after_search)
    except KeyboardInterrupt:
        progress.close()
        print(f"evo: interrupted; the last finished generation is saved. Continue with:\n"
              f"  evo run --resume {run.path}", file=sys.stderr)
        raise
    finally:
        evaluator.close()
        store.close()
    progress.close()
    host = {"wall": time.perf_counter() - started[0], "cpu": time.process_time() - started[1],
            "jobs": jobs}
    run.write_text("report.md", report.render_report(run, results, backend.describe(),
                                                     checkpoint.get(LLM), host)
                   + "".join(f"{line}\n" for line in learn_source.report_lines(checkpoint)))
    return results


def _reduce(spec: KernelSpec, result, checkpoint: dict, code_keys, measure=None) -> bool:
    """The best genome without the genes its machine code does not need, and (``measure``:
    a GPU) those whose removal costs no more than the noise (``evo.reduce``), into the
    checkpoint's ``reduced`` section; False where already there for this best."""
    from evo.reduce import reduced_entry

    best = Genome.from_json(result.best_genome)
    reduced = section(checkpoint, REDUCED)
    done = reduced.get(spec.name)
    if not best.genes or (done and Genome.from_json(done["from"]) == best):
        return False
    reduced[spec.name] = reduced_entry(best, code_keys, measure)
    return True


class _Seconds:
    """Wall seconds of a kernel's steps (search, finalist check, measured again, peer), kept
    in the checkpoint's ``seconds`` section (apart from the kernel's entry, which a resumed
    run must rebuild identically): report.md's table of where the run's time went. Steps
    run again on a resume add to them; a search cut midway counts from the resume."""

    def __init__(self, checkpoint: dict, kernel: str, lock: threading.Lock):
        self.lock = lock  # other kernels' threads write the checkpoint meanwhile
        with lock:
            self.seconds = section(checkpoint, SECONDS).setdefault(kernel, {})

    def add(self, step: str, start: float) -> None:
        self.add_parts({step: time.perf_counter() - start})

    def add_parts(self, parts: dict[str, float]) -> None:
        with self.lock:
            for step, seconds in parts.items():
                self.seconds[step] = round(self.seconds.get(step, 0.0) + seconds, 3)


def confirm(backend, spec: KernelSpec, result, saved: KernelEntry) -> dict:
    """The kernel's baseline and best measured again, back to back (in one worker where the
    run has one GPU; with several, each goes to the first idle one), with a store of their
    own so nothing is answered from earlier figures; kept in the kernel's checkpoint entry
    (``saved``), so a resumed run does not measure a confirmed best twice.

    Why: the search compares figures taken at different moments (minutes apart in a long
    run), and a GPU's state can move them (H200s read the same cubin ~0.3 % apart from one
    measurement to the next before the timer's settle launch: BENCHMARKS.md, Precision).
    Measured at one moment, the two figures give the speedup to quote, and the gap to the
    search's own figures shows the drift."""
    from harness.evaluate import Evaluator
    from harness.store import Store

    done = saved.confirmed
    if done and done.get("genome") == result.best_genome:
        return done
    genome = Genome.from_json(result.best_genome)
    with Store(":memory:") as store:
        fresh = Evaluator(backend, store)
        try:
            base = fresh.baseline(spec)
            best = fresh.evaluate(spec, [genome])[0] if genome.genes else base
        finally:
            fresh.close()
    saved.confirmed = {
        "genome": result.best_genome,
        "baseline": base.cycles if base.valid else None,
        "best": best.cycles if best.valid else None,
        "reason": "" if best.valid and base.valid else (best.reason if base.valid else base.reason)}
    return saved.confirmed


SIZES_TRIES = 3  # the best and at most two runners-up checked at a code's other sizes


def _check_other_sizes(spec: KernelSpec, result, saved: KernelEntry, evaluator, others,
                       on_events, tries: int = SIZES_TRIES) -> None:
    """A code one launcher runs at several captured sizes (``evo.model.capture.same_code``)
    is installed for all of them: its best goes through the gate, and is timed, at each
    other size (``at_other_sizes``). Where it fails at one, the next best valid genome is
    tried, and so on (at most ``tries``; the baseline needs no check), as the finalist
    check demotes; none passing keeps the baseline. The outcome is kept in the kernel's
    checkpoint entry (``sizes``: the genome it started from, the one kept, each size's
    verdict on it, those demoted) for ``evo.model.install_plan.plan``."""
    first = Genome.from_json(result.best_genome).effective().dumps()
    done = saved.sizes
    if done is None or first not in (done.get("from"), done.get("kept")):
        ranked = sorted(((s["cycles"], key) for key, s in saved.known.items()
                         if s.get("valid") and s.get("cycles") is not None), key=lambda t: t[0])
        order = [first] + [key for _, key in ranked if key != first]
        done = {"from": first, "kept": Genome().dumps(), "at": {}, "demoted": []}
        for key in order[:tries]:
            genome = Genome.from_json(json.loads(key))
            at = at_other_sizes(evaluator, genome, others)
            if not genome.genes or all(s["valid"] for s in at.values()):
                done.update(kept=key, at=at)
                break
            done["demoted"].append({"genome": str(genome), "failed": {
                n: s["reason"] for n, s in at.items() if not s["valid"]}})
        saved.sizes = done
        on_events([{"type": "sizes", "kernel": spec.name, **done}])
    if done["kept"] != first:
        result.best_genome = json.loads(done["kept"])
        result.best = saved.known.get(done["kept"], result.best)


def _sizes_said(done: dict) -> str:
    """One line of what ``_check_other_sizes`` decided."""
    kept = str(Genome.from_json(json.loads(done["kept"])))
    demoted = "; ".join(f"{d['genome']} failed at {', '.join(d['failed'])}" for d in done["demoted"])
    return (f"{demoted}; kept {kept}" if demoted else f"{kept} passes at each")


def at_other_sizes(evaluator, genome: Genome, others: list[KernelSpec]) -> dict:
    """``genome`` through the gate and timed at each of ``others`` (the other captured
    sizes of one code), as at its own size (the finalist's compute-sanitizer runs at its
    own size only): {name: {"valid", "reason", "baseline", "best"}}."""
    out: dict = {}
    for other in others:
        base = evaluator.baseline(other)
        best = evaluator.evaluate(other, [genome])[0] if genome.genes else base
        out[other.name] = {"valid": bool(base.valid and best.valid),
                           "reason": base.reason if not base.valid else "" if best.valid else best.reason,
                           "baseline": base.cycles if base.valid else None,
                           "best": best.cycles if best.valid else None}
    return out


def _llm_mutator(config: Config, run: RunDir, store, checkpoint: dict):
    """The LLM mutation operator when ``[llm] rate`` > 0 (checked before any work)."""
    if config.llm.rate <= 0:
        return None
    from evo.llm.mutation import LlmMutator

    mutator = LlmMutator(config.llm, run.path / "llm", store)
    mutator.check()
    if LLM in checkpoint:
        mutator.restore(checkpoint[LLM])
    return mutator


def _total_generations(config: Config) -> int:
    return strategies.generations(config.run.strategy, config)


class _BarObserver(Observer):
    """A kernel's progress bar, moved on by each measured batch."""

    def __init__(self, bar):
        self.bar = bar

    def evaluated(self, genomes, results, baseline) -> None:
        self.bar.evaluated(results, baseline.cycles if baseline.valid else None)


def _write_best(run: RunDir, spec: KernelSpec, result) -> None:
    genome = Genome.from_json(result.best_genome)
    applied = apply_genome(spec.ptx_text(), genome, spec.launch)
    run.write_best(spec.name, applied.ptx, genome.to_json(), applied.launch.to_json())
