"""The search loop: every kernel of the suite, one generation at a time, checkpointed.

``run_search`` drives a strategy (``evo.strategies``) over each kernel. A ``KernelSearch``
is what a strategy sees: the seeded RNG, the config, the budget, and ``evaluate`` — which
answers repeated genomes from the run's own memory, sends new ones through the harness
``Evaluator`` (store, ptxas, backend), and logs one event per evaluation.

After every generation the checkpoint (every kernel's strategy state, its RNG state,
evaluation count and evaluated genomes) is written atomically, so ``--resume`` continues
at the next generation and ends exactly where an uninterrupted run would have.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from genomes.genome import Genome
from harness.record import Measurement

from evo import strategies
from evo.checkpoint import CONFIG_HASH, KERNELS, VERSION, KernelEntry, search_entry, section
from evo.config import Config

CHECKPOINT_VERSION = 1


def kernel_seed(seed: int, kernel: str) -> int:
    """A per-kernel seed: kernels do not share random streams, and adding one to the
    suite does not change the others' searches."""
    digest = hashlib.sha256(f"{seed}:{kernel}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass
class KernelSearch:
    """One kernel's search: what a strategy calls back into."""

    kernel: str
    config: Config
    rng: random.Random
    measure: Callable[[list[Genome]], list[Measurement]]  # the harness, for new genomes
    on_events: Callable[[list[dict]], None]
    known: dict[str, dict] = field(default_factory=dict)  # genome key -> result summary
    evals: int = 0
    llm: object | None = None  # an evo.llm.mutation.LlmMutator when --llm-rate > 0
    spec: object | None = None  # the KernelSpec, for the LLM's prompt
    prior: dict | None = None  # evo.learn.priors.prior_for: other kernels' lessons, or None
    # genomes -> their machine code keys, unmeasured (harness Evaluator.code_keys), or None
    code_keys: Callable[[list[Genome]], list[str | None]] | None = None
    # genes -> whether each changes the kernel alone (harness Evaluator.changes_alone), or None
    changes_alone: Callable[[list], list[bool]] | None = None
    deadline: float | None = None  # time.monotonic() past which it ends ([run] budget_minutes)
    _alphabet: list | None = field(default=None, repr=False)  # see alphabet()
    _codes: dict[str, str | None] = field(default_factory=dict, repr=False)  # see same_code

    def alphabet(self) -> list:
        """The genes this kernel's search draws from: those of the library that change the
        kernel when applied alone (``genomes.variation.applicable``: its PTX or launch);
        the whole library where the spec is unknown. A gene that is a no-op here would
        spend a trial on the baseline again (most of the library does nothing to a
        one-thread gemm tile, and coarsening nothing to a softmax)."""
        if self._alphabet is None:
            from genomes.variation import gene_alphabet

            full = gene_alphabet()
            found = applicable_genes(self.spec.ptx_text(), self.spec.launch, self.changes_alone) \
                if self.spec is not None else full
            self._alphabet = list(found) or full
        return self._alphabet

    def draw_from(self) -> list | None:
        """What random genes are drawn from: ``alphabet()`` when the spec is known, else
        None (``genomes.variation.random_gene``'s own draw: a uniform transform, then
        uniform parameters)."""
        return self.alphabet() if self.spec is not None else None

    def budget_left(self) -> int | None:
        """Evaluations left (None: no cap); 0 once past the deadline, where the search has
        measured something (its first generation is always measured)."""
        if self.out_of_time():
            return 0
        cap = self.config.run.max_evals
        return None if cap == 0 else max(0, cap - self.evals)

    def out_of_time(self) -> bool:
        """Past the run's time budget ([run] budget_minutes), with a first generation done."""
        return self.deadline is not None and self.evals > 0 and time.monotonic() >= self.deadline

    def seen(self, genome: Genome) -> bool:
        return _key(genome) in self.known

    def same_code(self, genome: Genome, batch: list[Genome] = ()) -> bool:
        """Whether ``genome`` assembles to the machine code of a genome this search has
        evaluated or of one in ``batch`` (False where the search cannot tell: no
        ``code_keys``, or ptxas refuses it). Such a genome would be answered by the store
        without a measurement: a trial spent on nothing new. The keys are memoized here,
        not checkpointed: a resumed search computes the same ones again."""
        if self.code_keys is None:
            return False
        keys = self._look_up([genome, *batch])
        mine = self._codes[keys[0]]
        return mine is not None and mine in {self._codes[k] for k in keys[1:]
                                             if k != keys[0]}

    def code_key(self, genome: Genome) -> str:
        """What ``genome`` assembles to, as a key (``code_keys``, memoized), or the genome's
        own key where the search cannot tell (no ``code_keys``, or ptxas refuses it)."""
        if self.code_keys is not None:
            code = self._codes.get(self._look_up([genome])[0])
            if code is not None:
                return code
        return "genome " + _key(genome)

    def look_up_codes(self, genomes: list[Genome]) -> None:
        """The machine code keys of ``genomes`` (and of every evaluated genome) in one
        ``code_keys`` call, ahead of the ``same_code`` questions a strategy will ask of
        them one at a time: its ptxas runs go in parallel, not one after another (a
        first generation asking of 12 seeds of gemm_tile_12x12x12 took 26 s on an H200,
        ~0.6 s a run)."""
        if self.code_keys is not None:
            self._look_up(genomes)

    def _look_up(self, genomes) -> list[str]:
        """The search keys of ``genomes``, with the code keys of those and of every
        evaluated genome memoized (one ``code_keys`` call for the missing ones)."""
        keys = [_key(g) for g in genomes] + list(self.known)
        missing = list(dict.fromkeys(k for k in keys if k not in self._codes))
        if missing:
            codes = self.code_keys([Genome.from_json(json.loads(k)) for k in missing])
            self._codes.update(zip(missing, codes))
        return keys

    def evaluate(self, genomes: list[Genome], generation: int) -> list[Measurement]:
        """Measurements for ``genomes`` (in order); new genomes count against the budget.

        Genomes beyond the budget are not measured: they come back invalid with reason
        "over budget" and are not remembered, so they never reach the checkpoint as real.
        """
        keys = [_key(g) for g in genomes]
        new: dict[str, Genome] = {}  # key -> genome, first occurrence, in order
        for k, g in zip(keys, genomes):
            if k not in self.known and k not in new:
                new[k] = g
        todo = list(new.items())
        left = self.budget_left()
        if left is not None:
            todo = todo[:left]
        fresh = dict(zip((k for k, _ in todo), self.measure([g for _, g in todo]))) if todo else {}
        self.evals += len(fresh)
        events = []
        for k, m in fresh.items():
            if self.llm is not None:  # how its patch did, where the LLM wrote this child
                self.llm.measured(self.kernel, k, m)
            self.known[k] = summary(m)
            events.append({"type": "eval", "kernel": self.kernel, "generation": generation,
                           "genome": json.loads(k), **self.known[k]})
        self.on_events(events)
        return [measurement(self.kernel, self.known[k]) if k in self.known
                else Measurement(self.kernel, "", False, "over budget") for k in keys]

    def llm_mutate(self, asks: list[tuple[Genome, str, Genome | None]]) -> list[Genome | None]:
        """For each (genome, mode, other): ``genome`` plus one LLM-written patch gene that
        applies and assembles, or None (``mode`` "explore" asks with little context;
        ``other``: a crossover with it). The asks go to the endpoint together."""
        return self.llm.propose_many(self.spec, [
            (genome, search_view(self.kernel, self.known, genome), mode, other)
            for genome, mode, other in asks])

    # --- checkpoint data ---------------------------------------------------------------
    def to_json(self, state: dict, done: bool) -> dict:
        version, internal, gauss = self.rng.getstate()
        return search_entry(state, done, self.evals, self.known, [version, list(internal), gauss])

    def restore(self, entry: KernelEntry) -> dict:
        version, internal, gauss = entry.rng
        self.rng.setstate((version, tuple(internal), gauss))
        self.evals = entry.evals
        self.known = dict(entry.known)
        return entry.state


_APPLICABLE: dict[tuple, tuple] = {}  # (PTX, launch) -> its applicable genes, see below
_APPLICABLE_LOCK = threading.Lock()  # kernels are searched in threads


def applicable_genes(ptx: str, launch, changes_alone=None) -> tuple:
    """``genomes.variation.applicable`` over the whole library, once per kernel and launch
    in a process: every strategy of ``evo bench`` searches the same kernel, and a large
    gemm tile takes seconds (16x16x16: ~6 s). ``changes_alone(genes) -> [bool]`` answers
    instead where given (the Evaluator's apply pool: off the run's own process, where
    kernels searched at once wait for one another)."""
    from genomes.variation import applicable, gene_alphabet

    key = (ptx, launch)
    if key not in _APPLICABLE:
        alphabet = gene_alphabet()
        found = (applicable(alphabet, ptx, launch) if changes_alone is None else
                 [g for g, changes in zip(alphabet, changes_alone(alphabet)) if changes])
        with _APPLICABLE_LOCK:
            if len(_APPLICABLE) >= 64:  # the oldest kernel's out: a PTX text each
                _APPLICABLE.pop(next(iter(_APPLICABLE)), None)
            _APPLICABLE[key] = tuple(found)
    return _APPLICABLE[key]


def search_view(kernel: str, known: dict, genome: Genome):
    """What an LLM prompt shows of a search (``evo.llm.mutation.SearchView``), from its
    results so far (``known``: effective genome key -> summary) for a child of ``genome``:
    the baseline, ``genome`` itself and the best, where measured, and recent failures."""
    from evo.llm.mutation import SearchView

    def measured(g: Genome) -> Measurement | None:
        found = known.get(_key(g))
        return measurement(kernel, found) if found else None

    view = SearchView(baseline=measured(Genome()), current=measured(genome),
                      recent_failures=[f"{Genome.from_json(json.loads(k))}: {s['reason']}"
                                       for k, s in known.items() if not s["valid"]][-8:],
                      known=known)
    valid = [(s["cycles"], k) for k, s in known.items() if s["valid"] and s["cycles"]]
    if valid:
        best_key = min(valid)[1]
        view.best_genome = Genome.from_json(json.loads(best_key))
        view.best = measurement(kernel, known[best_key])
    return view


def _key(genome: Genome) -> str:
    return genome.effective().dumps()


def valid_cycles(summary: dict | None) -> float | None:
    """A summary's cycles where it is a valid measurement with a figure, else None."""
    ok = summary and summary.get("valid") and summary.get("cycles") is not None
    return summary["cycles"] if ok else None


def summary(m: Measurement) -> dict:
    """What the run remembers of a measurement: plain JSON, the checkpoint's ``known``
    entries and the eval events' fields (``measurement`` reads it back). Strategies, the
    LLM's prompts and the reports read results in this shape."""
    return {"cycles": m.cycles, "valid": m.valid, "reason": m.reason, "timer": m.timer,
            "device": m.device, "backend": m.backend, "registers": m.registers,
            "spill_stores": m.spill_stores, "cached": m.cached, "p10": m.p10, "p90": m.p90,
            "n": m.n, "flags": list(m.flags),
            # a launch other than the spec's (coarsen, block genes): part of the variant
            **({"launch": m.notes["launch"]} if "launch" in m.notes else {}),
            # how far a valid variant's outputs are from the baseline's (fast-math genes)
            **({key: m.notes[key] for key in _ERRORS if key in m.notes}
               if any(m.notes.get(key) for key in _ERRORS) else {}),
            # events timing: time per launch, bytes moved and the copy roofline (report.md)
            **{key: m.notes[key] for key in _MEMORY_NOTES if key in m.notes}}


_MEMORY_NOTES = ("us_per_launch", "bytes_moved", "copy_gbps", "caches")
_ERRORS = ("max_abs_err", "max_rel_err")


def measurement(kernel: str, s: dict) -> Measurement:
    """The Measurement a ``summary`` was made from, its notes as far as the summary keeps
    them (the launch, the largest error, the memory figures)."""
    notes = {key: s[key] for key in ("launch", *_ERRORS, *_MEMORY_NOTES) if key in s}
    return Measurement(kernel=kernel, device=s["device"], valid=s["valid"], reason=s["reason"],
                       cycles=s["cycles"], p10=s["p10"], p90=s["p90"], n=s["n"],
                       timer=s["timer"], backend=s["backend"], registers=s["registers"],
                       spill_stores=s["spill_stores"], flags=list(s["flags"]),
                       cached=s["cached"], notes=notes)


@dataclass
class KernelResult:
    kernel: str
    baseline: dict | None
    best_genome: dict
    best: dict | None
    evals: int
    generations: int
    confirmed: dict | None = None  # evo.run.confirm's fresh figures, where it ran
    out_of_time: bool = False  # its search ended at [run] budget_minutes


def search_kernel(measuring, ledger, config: Config, *, llm=None, prior: dict | None = None,
                  on_generation=None, deadline: float | None = None) -> KernelResult:
    """Run (or resume) one kernel's search to the end, checkpointing each generation.

    ``measuring`` is how the kernel is measured (``evo.kernel_run.KernelRun``: its
    ``name``, ``spec``, ``measure(genomes)`` and ``code_keys(genomes)``, which tells
    genomes that assemble alike apart before a strategy spends trials on them, or None);
    ``ledger`` is where the search is kept (``evo.driver.KernelLedger``, or
    ``MemoryLedger``): its entry in ``ledger.checkpoint`` (``evo.checkpoint``) is read to
    resume and written after every generation, ``ledger.events(...)`` takes the events and
    ``ledger.save()`` persists both. ``prior`` (plain JSON, ``evo.learn``) is what other
    kernels' results suggest; the caller keeps it fixed across a resume. ``llm``: the LLM
    operator, where on; ``on_generation(event)``: progress; ``deadline``: the
    ``time.monotonic()`` past which the search ends after its generation ([run]
    budget_minutes), said in an event of type "out of time".
    """
    kernel, checkpoint, on_events = measuring.name, ledger.checkpoint, ledger.events
    strategy = strategies.get(config.run.strategy)
    search = KernelSearch(kernel, config, random.Random(kernel_seed(config.run.seed, kernel)),
                          measuring.measure, on_events, llm=llm, spec=measuring.spec,
                          prior=prior, code_keys=measuring.code_keys,
                          changes_alone=measuring.changes_alone, deadline=deadline)
    entries = section(checkpoint, KERNELS)
    state = search.restore(KernelEntry(entries[kernel])) if kernel in entries else strategy.start(search)
    while not strategy.finished(state, search):
        state = strategy.step(state, search)
        entries[kernel] = search.to_json(state, done=False)
        events = [_generation_event(kernel, state, search)]
        # The event before the checkpoint, so the checkpoint covers it (``events_bytes``):
        # a kill between the two is undone on resume, which repeats the generation.
        on_events(events)
        ledger.save()
        if on_generation:
            on_generation(events[0])
    entries[kernel] = search.to_json(state, done=True)
    ended = search.out_of_time()  # read once: the event and the result say the same
    if ended:  # resumed with more minutes (or none), it goes on
        on_events([{"type": "out of time", "kernel": kernel,
                    "generation": state.get("generation", 0), "evals": search.evals}])
    ledger.save()
    genome_json, _ = strategy.best(state)
    best_key = Genome.from_json(genome_json).effective().dumps()
    return KernelResult(kernel, search.known.get(Genome().dumps()), genome_json,
                        search.known.get(best_key), search.evals, state.get("generation", 0),
                        out_of_time=ended)


def _generation_event(kernel: str, state: dict, search: KernelSearch) -> dict:
    # Best and median over this generation's population where the strategy has one,
    # else over everything evaluated so far.
    pop = state.get("population")
    if pop:
        fits = sorted(item["fitness"] if item["fitness"] is not None else math.inf
                      for item in pop)
    else:
        fits = sorted(s["cycles"] if s["valid"] and s["cycles"] is not None else math.inf
                      for s in search.known.values())
    best = fits[0] if fits else math.inf
    finite = [f for f in fits if math.isfinite(f)]
    return {"type": "generation", "kernel": kernel, "generation": state.get("generation", 0),
            "best": None if math.isinf(best) else best,
            "median": statistics.median(finite) if finite else None,
            "invalid": len(fits) - len(finite), "evals": search.evals}


def new_checkpoint(config: Config) -> dict:
    return {VERSION: CHECKPOINT_VERSION, CONFIG_HASH: _config_hash(config), KERNELS: {}}


def _config_hash(config: Config) -> str:
    """The config fields that change results (not budgets, which may be extended, nor
    where the store lives or which GPU ids measure)."""
    d = config.to_dict()
    # exact_slack: a choice made after the search, made again where a resume changes it
    for key in ("generations", "max_evals", "budget_evals", "budget_minutes", "store", "gpus",
                "jobs", "exact_slack"):
        d["run"].pop(key, None)
    for name in strategies.NAMES:  # the run's strategy's table, less its budgets
        if name != config.run.strategy:
            d.pop(name, None)  # another strategy's options change nothing here
        for key in strategies.budget_options(name):
            d.get(name, {}).pop(key, None)
    d.pop("cluster", None)  # where candidates are measured, like the GPU ids
    # How the LLM endpoint is reached and how much may be spent, not what it is asked:
    # fixing a dead URL, a short timeout or a token cap the context cannot hold must
    # leave the run resumable.
    for key in ("base_url", "api_key_env", "timeout", "retries", "max_calls", "price_in",
                "price_out", "max_tokens", "max_tokens_field", "concurrency", "max_cost"):
        d["llm"].pop(key, None)
    return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


def check_resumable(checkpoint: dict, config: Config) -> str | None:
    """None when ``config`` may continue this checkpoint, else the reason it may not."""
    if checkpoint.get(VERSION) != CHECKPOINT_VERSION:
        return f"checkpoint version {checkpoint.get(VERSION)} is not {CHECKPOINT_VERSION}"
    if checkpoint.get(CONFIG_HASH) != _config_hash(config):
        return ("the config changed in a way that changes results (on --resume only budgets, "
                "the store, GPUs, jobs, the cluster and how the LLM endpoint is reached "
                "may differ)")
    return None
