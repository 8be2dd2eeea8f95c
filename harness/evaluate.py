"""The evaluation pipeline: genomes in, Measurements out, cheapest gate first.

For one kernel and a batch of genomes, :meth:`Evaluator.evaluate`

1. materializes each genome with ``apply_genome`` (per-gene outcomes go in the returned
   Measurement's ``notes["genes"]``);
2. hashes the PTX and asks the store (PTX level): an identical PTX is never compiled again;
   a variant that writes module memory its baseline never writes (state kept across
   launches: ``harness.hidden_state``) is rejected here, before ptxas and the GPU;
3. compiles the misses with ptxas in parallel (the backend's ``compile_many``: one thread
   per CPU here, or on a cluster's workers); a
   ptxas failure is an invalid result with reason ``"ptxas error: ..."``, stored too.
   For a backend timing with clock64 (the GPU), each variant is assembled together with
   its instrumented twin, one ptxas run for both (``instrument.with_clock_twin``);
4. hashes the code (``cubin_text_hash`` + registers + shared memory) and asks the store
   again (code level): different PTX often assembles to identical code;
5. hands each remaining *unique* code once to the backend (check + time on the GPU, or a
   static estimate), and stores every new result.

Results come back in input order; store answers have ``cached=True``. Duplicates inside a
batch (same PTX, or same code) are measured once and share the result. The kernel's
baseline goes through the same pipeline first, so its cycles are known (for the backend's
>10x review flag and for speedups) and a genome whose PTX equals the baseline's gets the
baseline measurement.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field

from genomes import ptx as ptx_model
from genomes.genome import Applied, Genome, apply_genome
from genomes.variation import changes_kernel
from harness import record
from harness.backends import Backend, Variant
from harness.compile import ptx_hash
from harness.gpu.instrument import clock_entry_name
from harness.record import Measurement
from harness.sass import cubin_text_hash
from harness.apply_pool import apply_from_file, genes_changing, hidden_state_of, with_twin
from harness.kernels.spec_ptx import in_file_lines
from harness.hidden_state import hidden_state
from harness.store import Store, code_hash, ptxas_error_key, static_reject_key
from harness.toolchain import ptxas_version


@dataclass
class EvalStats:
    """Counts over every batch an Evaluator ran (the baseline's own evaluation excluded).

    ``unique_ptx`` counts distinct PTX per batch; ``ptx_hits`` of those were answered by the
    store; ``static_rejects`` failed the static gate (``harness.hidden_state``); ``compiled`` went through ptxas (``ptxas_errors`` of them failed); ``unique_code``
    distinct cubins among the compiled; ``code_hits`` of those the store knew; ``measured``
    went to the backend.
    """

    genomes: int = 0
    unique_ptx: int = 0
    ptx_hits: int = 0
    static_rejects: int = 0
    compiled: int = 0
    ptxas_errors: int = 0
    unique_code: int = 0
    code_hits: int = 0
    measured: int = 0
    apply_seconds: float = 0.0
    compile_seconds: float = 0.0
    measure_seconds: float = 0.0

    def add(self, other: "EvalStats") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["ptx_hit_rate"] = self.ptx_hits / self.unique_ptx if self.unique_ptx else 0.0
        out["code_hit_rate"] = self.code_hits / self.unique_code if self.unique_code else 0.0
        return out


@dataclass
class Batch:
    """A batch between the two stages: prepared (applied, deduplicated, compiled, looked
    up in the store) and waiting for the backend. See ``Evaluator.prepare``/``finish``."""

    spec: object
    variants: list[Variant]
    base: Measurement | None
    stats: EvalStats
    by_ptx: dict[str, Variant] = field(default_factory=dict)
    by_code: dict[str, list[Variant]] = field(default_factory=dict)
    result: dict[str, Measurement] = field(default_factory=dict)  # ptx_hash -> answer
    cached: set[str] = field(default_factory=set)
    to_measure: list[Variant] = field(default_factory=list)
    version: str = ""


class Evaluator:
    """Runs the pipeline of the module docstring for one backend and one store.

    ``evaluate`` is ``finish(prepare(...))``. The two stages may overlap across batches
    (prepare the next batch on the CPUs while the GPU measures this one), which is what
    ``harness.tools.bench_throughput`` does; the store and the backends are thread-safe.
    """

    def __init__(self, backend: Backend, store: Store | None = None, workers: int | None = None,
                 arch: str = "sm_90", apply_workers: int | None = None,
                 apply_pool: concurrent.futures.Executor | None = None):
        self.backend = backend
        self.store = store if store is not None else Store(":memory:")
        self.workers = workers or os.cpu_count() or 1
        # Applying genomes is pure Python (~4 ms each on gemm tiles): on a machine with
        # cores to spare, batches go to a process pool. Results are identical either way.
        self.apply_workers = apply_workers if apply_workers is not None else (
            self.workers if self.workers >= 8 else 0)
        # ``apply_pool``: such a pool shared by several evaluators (``evo bench`` searches
        # kernels at once; a pool each would be one process per core per evaluator). It
        # is used instead of starting one, and left for its owner to shut down.
        self._apply_pool = apply_pool
        self._owns_apply_pool = apply_pool is None
        self.arch = arch
        self.stats = EvalStats()
        # prepare() may run in several threads at once (harness.tools.bench_throughput): each
        # batch counts into its own EvalStats, added to self.stats under this lock.
        self._lock = threading.Lock()
        self._setup_lock = threading.Lock()  # one baseline measurement per kernel
        self._pool_lock = threading.Lock()  # one apply pool (asked for within a baseline's)
        self._texts: dict[str, str] = {}  # baseline PTX text per kernel
        self._baselines: dict[str, tuple[str, str, Measurement]] = {}  # kernel -> ptx/code hash, m
        self._code_keys: dict[tuple[str, str], str | None] = {}  # (kernel, PTX key) -> code_keys

    # ------------------------------------------------------------------ public
    def evaluate(self, spec, genomes: list[Genome]) -> list[Measurement]:
        """One Measurement per genome, in input order (see the module docstring)."""
        return self.finish(self.prepare(spec, genomes))

    def prepare(self, spec, genomes: list[Genome]) -> Batch:
        """Stages 1-4: materialize, PTX lookup, ptxas, code lookup (no GPU work but the
        kernel's baseline, the first time)."""
        base = self.baseline(spec)
        start = time.perf_counter()
        variants = [_variant(spec, g, a, twin) for g, (a, twin)
                    in zip(genomes, self._apply_all(spec, genomes))]
        counts = EvalStats(genomes=len(genomes), apply_seconds=time.perf_counter() - start)
        batch = self._prepare(spec, variants, base, counts)
        with self._lock:
            self.stats.add(counts)
        batch.stats = self.stats
        return batch

    def finish(self, batch: Batch) -> list[Measurement]:
        """Stages 5-6: the backend measures each unique new code once; store; answer."""
        return self._finish(batch)

    def code_keys(self, spec, genomes: list[Genome]) -> list[str | None]:
        """Each genome's machine code, as a key, without measuring it: applied and
        assembled as ``prepare`` does (with its clock64 twin where the backend times
        with one), keyed by its own code, registers, shared memory and launch, as the
        store keys it; None where ptxas refuses it. Two genomes with one key run the same
        kernel, so a search spends a trial on one of them only (``[evolve] novel_code``)."""
        variants = [_variant(spec, g, a, twin) for g, (a, twin)
                    in zip(genomes, self._apply_all(spec, genomes))]
        with self._lock:
            todo = {v.ptx_hash: v for v in variants
                    if (spec.store_name, v.ptx_hash) not in self._code_keys}
        # The text that ``prepare`` will assemble (with its clock64 twin where the backend
        # wants one): a genome measured after this look-up is then a ptxas cache hit, not
        # a second run (gemm_tile_12x12x12: ~0.5 s a run, two a candidate before).
        compiled = self._compile(list(todo.values()))
        twin = (clock_entry_name(spec.entry),)
        with self._lock:
            for (key, v), c in zip(todo.items(), compiled):
                self._code_keys[(spec.store_name, key)] = compiled_key(
                    spec, c, v.launch, exclude=twin if v.twin_ptx else ()) if c.ok else None
            return [self._code_keys[(spec.store_name, v.ptx_hash)] for v in variants]

    def changes_alone(self, spec, genes: list) -> list[bool]:
        """Whether each gene, applied alone, changes the kernel (its PTX or launch): what
        ``genomes.variation.applicable`` asks, in the apply pool where there is one (the
        whole library on a kernel is 0.2-6 s of Python, once per kernel of a run)."""
        pool = self._pool(len(genes))
        if pool is None:
            module = self._module(spec)
            return [changes_kernel(module, g, spec.launch) for g in genes]
        # every process a share, dealt round: the genes whose test evaluates the launch
        # (coarsen_tile's factors, addr_rebase, vec_ld_index: ~1 s each on a Triton
        # kernel of millions of threads) sit side by side in the alphabet
        n = min(self.apply_workers, len(genes))
        chunks = [genes[i::n] for i in range(n)]
        launch = spec.launch.to_json()
        answers = pool.map(genes_changing, [str(spec.ptx_path)] * n, [spec.entry] * n,
                           [[str(g) for g in chunk] for chunk in chunks], [launch] * n)
        changes: list[bool] = [False] * len(genes)
        for i, chunk in enumerate(answers):
            changes[i::n] = chunk
        return changes

    def close(self) -> None:
        if self._apply_pool is not None and self._owns_apply_pool:
            self._apply_pool.shutdown(cancel_futures=True)
        self._apply_pool, self._owns_apply_pool = None, True

    def baseline(self, spec) -> Measurement:
        """The kernel's unmodified PTX, through the same pipeline (memoized per kernel)."""
        with self._setup_lock:
            if spec.store_name not in self._baselines:
                text = spec.ptx_text()
                v = Variant(Genome(), text, ptx_hash(text), is_baseline=True)
                m = self._finish(self._prepare(spec, [v], None, EvalStats()))[0]
                self._baselines[spec.store_name] = (v.ptx_hash, v.code_hash, m)
            return self._baselines[spec.store_name][2]

    # ------------------------------------------------------------------ pipeline
    def _apply_all(self, spec, genomes: list[Genome]) -> list[tuple[Applied, str | None]]:
        """Each genome applied, with the PTX that adds its clock64 twin where the backend
        times with one; in the pool on machines with cores to spare (instrumenting is pure
        Python too: in the pool it costs the GPU stage nothing)."""
        entry = spec.entry if self.backend.wants_clock_ptx and spec.timing == "clock64" else None
        pool = self._pool(len(genomes))
        if pool is None:
            module = self._module(spec)
            return [with_twin(apply_genome(module, g, spec.launch), entry) for g in genomes]
        path = str(spec.ptx_path)
        launch = spec.launch.to_json()
        n = len(genomes)
        return list(pool.map(apply_from_file, [path] * n, [spec.entry] * n,
                             [g.to_json() for g in genomes], [entry] * n, [launch] * n))

    def _pool(self, size: int) -> concurrent.futures.Executor | None:
        """The apply pool for a batch of ``size``; None where this machine has no cores to
        spare, or for a batch of under 4 before any larger one started the pool (one
        ``evo measure`` of a genome need not start processes). Once started, every batch
        goes there: with kernels searched at once the run's own process is the bottleneck
        (one core, Python's lock; a model job on four GPUs spent 46 s of its 53 s there,
        BENCHMARKS.md, session 20)."""
        if self._apply_pool is None and (self.apply_workers < 2 or size < 4):
            return None
        with self._pool_lock:
            if self._apply_pool is None:
                from harness.gpu import spawn

                self._apply_pool = concurrent.futures.ProcessPoolExecutor(
                    self.apply_workers, mp_context=spawn.context())
        return self._apply_pool

    def _hidden_states(self, spec, variants: list[Variant]) -> list[str | None]:
        """``hidden_state`` of each variant against the baseline: in the apply pool where
        there is one (~10 ms of parsing a variant of an Inductor kernel), else here."""
        if not variants:
            return []
        pool, texts = self._pool(len(variants)), [v.ptx for v in variants]
        if pool is None:
            base = self._baseline_text(spec)
            return [hidden_state(t, base) for t in texts]
        n = len(texts)  # the baseline read in each pool process, not sent with every task
        return list(pool.map(hidden_state_of, texts, [str(spec.ptx_path)] * n, [spec.entry] * n))

    def _prepare(self, spec, variants: list[Variant], base: Measurement | None,
                 stats: EvalStats) -> Batch:
        b = Batch(spec, variants, base, stats)
        dev, kernel, store = self.backend.device, spec.store_name, self.store
        known = self._baselines.get(kernel)

        # (2) PTX level: one entry per distinct PTX; the baseline's PTX is its measurement.
        for v in variants:
            b.by_ptx.setdefault(v.ptx_hash, v)
        stats.unique_ptx += len(b.by_ptx)
        for h in b.by_ptx:
            found = known[2] if known and h == known[0] else store.lookup_ptx(dev, kernel, h)
            if found is not None:
                b.result[h] = found
                b.cached.add(h)
        stats.ptx_hits += len(b.cached)

        # (2b) the static gate: a variant that writes module memory its baseline never
        # writes could keep state across launches and skip the work it is timed on.
        todo = [v for h, v in b.by_ptx.items() if h not in b.result and not v.is_baseline]
        for v, reason in zip(todo, self._hidden_states(spec, todo)):
            if reason is None:
                continue
            m = Measurement(kernel=kernel, device=dev, valid=False, backend=self.backend.name,
                            reason=reason, ptx_hash=v.ptx_hash)
            b.result[v.ptx_hash] = m
            stats.static_rejects += 1
            if self.backend.writes_store:
                store.put(dev, kernel, v.ptx_hash, static_reject_key(v.ptx_hash), m, "")

        # (3) compile every PTX the store did not know, in parallel; where the apply pool
        # added the clock64 twin entry, the variant and its twin in one ptxas run (one run
        # per candidate, not two; the twin of a code the store then knows is wasted, ~8 %).
        todo = [v for h, v in b.by_ptx.items() if h not in b.result]
        start = time.perf_counter()
        compiled = self._compile(todo)
        stats.compile_seconds += time.perf_counter() - start
        stats.compiled += len(todo)
        b.version = ptxas_version() if todo else ""
        for v, c in zip(todo, compiled):
            v.compiled = c
            if c.ok:
                twin = ()  # keyed by the variant's own code, not its twin's beside it
                if v.twin_ptx:
                    v.clock_cubin, v.clock_entry = c.cubin, clock_entry_name(spec.entry)
                    twin = (v.clock_entry,)
                v.code_hash = compiled_key(spec, c, v.launch, exclude=twin)
                b.by_code.setdefault(v.code_hash, []).append(v)
                continue
            stats.ptxas_errors += 1
            error = in_file_lines(spec, c.error) if v.is_baseline else c.error
            m = Measurement(kernel=kernel, device=dev, valid=False, backend=self.backend.name,
                            reason=f"{record.PTXAS_ERROR}: {error}", ptx_hash=v.ptx_hash,
                            seconds=c.seconds, notes={"ptxas_log": c.log[-2000:]})
            b.result[v.ptx_hash] = m
            # A timeout or a crash of ptxas says more about the machine than the PTX (a
            # broken EVO_PTXAS, a loaded host): not stored, so the next run tries again.
            if self.backend.writes_store and not c.tool_failed:
                store.put(dev, kernel, v.ptx_hash, ptxas_error_key(v.ptx_hash), m, b.version)

        # (4) code level: identical cubins (from different PTX) are one candidate.
        stats.unique_code += len(b.by_code)
        for h, group in b.by_code.items():
            found = known[2] if known and h == known[1] else store.lookup_code(dev, kernel, h)
            if found is None:
                b.to_measure.append(group[0])
                continue
            stats.code_hits += 1
            for v in group:
                b.result[v.ptx_hash] = found
                b.cached.add(v.ptx_hash)
                if self.backend.writes_store:
                    store.link_ptx(dev, kernel, v.ptx_hash, h)
        # Whatever the backend can do ahead on the CPUs (e.g. instrumented cubins).
        start = time.perf_counter()
        self.backend.prepare(spec, b.to_measure)
        stats.compile_seconds += time.perf_counter() - start
        return b

    def _finish(self, b: Batch) -> list[Measurement]:
        dev, kernel, store, stats = self.backend.device, b.spec.store_name, self.store, b.stats
        writes = self.backend.writes_store
        # (5)+(6) the backend checks and times each unique new code once.
        start = time.perf_counter()
        measured = (self.backend.measure_many(b.spec, b.to_measure, baseline=b.base)
                    if b.to_measure else [])
        with self._lock:
            stats.measure_seconds += time.perf_counter() - start
            stats.measured += len(b.to_measure)
        for rep, m in zip(b.to_measure, measured):
            m = _with_code(m, rep)
            keep = writes and not m.notes.get("transient") and not m.reason.startswith(record.NOT_MEASURED)
            for i, v in enumerate(b.by_code[rep.code_hash]):
                b.result[v.ptx_hash] = m
                if keep:
                    if i == 0:
                        store.put(dev, kernel, v.ptx_hash, v.code_hash, m, b.version)
                    else:
                        store.link_ptx(dev, kernel, v.ptx_hash, v.code_hash)

        for v in b.variants:  # a variant whose PTX was deduplicated has no code hash of its own
            if not v.code_hash:
                v.code_hash = b.by_ptx[v.ptx_hash].code_hash or b.result[v.ptx_hash].sass_hash
        return [_personal(b.result[v.ptx_hash], v, v.ptx_hash in b.cached) for v in b.variants]

    def _compile(self, variants: list[Variant]) -> list:
        """ptxas on each variant, with its clock64 twin in one module where it has one. A
        module whose twin breaks it says nothing about the variant: that is assembled
        alone and loses its twin (the backend then instruments it apart, and reports why)."""
        if not variants:
            return []
        compiled = self.backend.compile_many([v.twin_ptx or v.ptx for v in variants],
                                             self.arch, self.workers)
        alone = [i for i, (v, c) in enumerate(zip(variants, compiled)) if v.twin_ptx and not c.ok]
        if alone:
            for i, c in zip(alone, self.backend.compile_many([variants[i].ptx for i in alone],
                                                             self.arch, self.workers)):
                variants[i].twin_ptx, compiled[i] = None, c
        return compiled

    def _baseline_text(self, spec) -> str:
        """The kernel's unmodified PTX (read once per kernel)."""
        if spec.store_name not in self._texts:
            self._texts[spec.store_name] = spec.ptx_text()
        return self._texts[spec.store_name]

    def _module(self, spec) -> ptx_model.Module:
        """The parsed baseline PTX, parsed once per text (``parse_shared``: read only,
        apply_genome copies it), as ``_baseline_text`` keeps it by the spec's store name."""
        return ptx_model.parse_shared(self._baseline_text(spec), str(spec.ptx_path))


def compiled_key(spec, compiled, launch=None, exclude: tuple[str, ...] = ()) -> str:
    """The store's key of assembled code (``harness.store.code_hash``): the machine code of
    every function the launch can reach (all but ``exclude``: a clock64 twin assembled
    beside the variant), what it addresses, registers and shared memory, plus the launch
    where it is not the spec's. Keyed by the entry alone, two variants differing only in a
    non-inlined ``.func`` shared a key, and the second got the first's verdict."""
    return code_hash(cubin_text_hash(compiled.cubin, exclude=exclude), compiled.registers,
                     compiled.shared_mem) + spec.launch_suffix(launch)


def _variant(spec, genome: Genome, applied: Applied, twin_ptx: str | None = None) -> Variant:
    """A variant keyed by its PTX and, where its genome changed it, its launch."""
    launch = applied.launch if spec.launch_suffix(applied.launch) else None
    return Variant(genome, applied.ptx, ptx_hash(applied.ptx) + spec.launch_suffix(launch),
                   outcomes=list(applied.outcomes), twin_ptx=twin_ptx, launch=launch)


def _with_code(m: Measurement, v: Variant) -> Measurement:
    """The backend's result with the store key and ptxas's figures filled in where missing."""
    c = v.compiled
    return dataclasses.replace(
        m, sass_hash=v.code_hash, ptx_hash=m.ptx_hash or v.ptx_hash,
        registers=m.registers if m.registers is not None else c.registers,
        spill_stores=m.spill_stores if m.spill_stores is not None else c.spill_stores,
        spill_loads=m.spill_loads if m.spill_loads is not None else c.spill_loads,
        shared_mem=m.shared_mem if m.shared_mem is not None else c.shared_mem)


def _personal(m: Measurement, v: Variant, cached: bool) -> Measurement:
    """A copy of a (possibly shared) result, with this variant's PTX hash and gene outcomes."""
    notes = dict(m.notes)
    notes.pop("launch", None)
    if v.launch is not None:
        notes["launch"] = v.launch.to_json()
    if not v.is_baseline:
        notes["genome"] = str(v.genome)
        notes["genes"] = [{"gene": str(o.gene), "status": o.status, "changes": o.changes,
                           **({"detail": o.detail} if o.detail else {})} for o in v.outcomes]
    return dataclasses.replace(m, ptx_hash=v.ptx_hash, notes=notes, flags=list(m.flags), cached=cached)
