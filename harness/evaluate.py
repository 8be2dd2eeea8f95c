"""The evaluation pipeline: genomes in, Measurements out, cheapest gate first.

For one kernel and a batch of genomes, :meth:`Evaluator.evaluate`

1. materializes each genome with ``apply_genome`` (per-gene outcomes go in the returned
   Measurement's ``notes["genes"]``);
2. hashes the PTX and asks the store (PTX level): an identical PTX is never compiled again;
3. compiles the misses with ptxas in parallel (``compile_many``, one thread per CPU); a
   ptxas failure is an invalid result with reason ``"ptxas error: ..."``, stored too;
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

import dataclasses
import os
import time
from dataclasses import dataclass

from genomes import ptx as ptx_model
from genomes.genome import Applied, Genome, apply_genome
from harness import record
from harness.backends import Backend, Variant
from harness.compile import compile_many, ptx_hash
from harness.record import Measurement
from harness.sass import cubin_text_hash
from harness.store import Store, code_hash, ptxas_error_key
from harness.toolchain import ptxas_version


@dataclass
class EvalStats:
    """Counts over every batch an Evaluator ran (the baseline's own evaluation excluded).

    ``unique_ptx`` counts distinct PTX per batch; ``ptx_hits`` of those were answered by the
    store; ``compiled`` went through ptxas (``ptxas_errors`` of them failed); ``unique_code``
    distinct cubins among the compiled; ``code_hits`` of those the store knew; ``measured``
    went to the backend.
    """

    genomes: int = 0
    unique_ptx: int = 0
    ptx_hits: int = 0
    compiled: int = 0
    ptxas_errors: int = 0
    unique_code: int = 0
    code_hits: int = 0
    measured: int = 0
    apply_seconds: float = 0.0
    compile_seconds: float = 0.0
    measure_seconds: float = 0.0

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["ptx_hit_rate"] = self.ptx_hits / self.unique_ptx if self.unique_ptx else 0.0
        out["code_hit_rate"] = self.code_hits / self.unique_code if self.unique_code else 0.0
        return out


class Evaluator:
    """Runs the pipeline of the module docstring for one backend and one store."""

    def __init__(self, backend: Backend, store: Store | None = None, workers: int | None = None,
                 arch: str = "sm_90"):
        self.backend = backend
        self.store = store if store is not None else Store(":memory:")
        self.workers = workers or os.cpu_count() or 1
        self.arch = arch
        self.stats = EvalStats()
        self._modules: dict[str, ptx_model.Module] = {}  # parsed baseline PTX per kernel
        self._baselines: dict[str, tuple[str, str, Measurement]] = {}  # kernel -> ptx/code hash, m

    # ------------------------------------------------------------------ public
    def evaluate(self, spec, genomes: list[Genome]) -> list[Measurement]:
        """One Measurement per genome, in input order (see the module docstring)."""
        base = self.baseline(spec)
        start = time.perf_counter()
        module = self._module(spec)
        variants = []
        for genome in genomes:
            applied = apply_genome(module, genome)
            variants.append(_variant(genome, applied))
        self.stats.apply_seconds += time.perf_counter() - start
        self.stats.genomes += len(genomes)
        return self._run(spec, variants, base, self.stats)

    def baseline(self, spec) -> Measurement:
        """The kernel's unmodified PTX, through the same pipeline (memoized per kernel)."""
        if spec.name not in self._baselines:
            text = spec.ptx_text()
            v = Variant(Genome(), text, ptx_hash(text), is_baseline=True)
            m = self._run(spec, [v], None, EvalStats())[0]
            self._baselines[spec.name] = (v.ptx_hash, v.code_hash, m)
        return self._baselines[spec.name][2]

    # ------------------------------------------------------------------ pipeline
    def _run(self, spec, variants: list[Variant], base: Measurement | None,
             stats: EvalStats) -> list[Measurement]:
        dev, kernel, store = self.backend.device, spec.name, self.store
        writes = self.backend.writes_store
        known = self._baselines.get(kernel)

        # (2) PTX level: one entry per distinct PTX; the baseline's PTX is its measurement.
        by_ptx: dict[str, Variant] = {}
        for v in variants:
            by_ptx.setdefault(v.ptx_hash, v)
        stats.unique_ptx += len(by_ptx)
        result: dict[str, Measurement] = {}  # ptx_hash -> answer
        cached: set[str] = set()
        for h in by_ptx:
            found = known[2] if known and h == known[0] else store.lookup_ptx(dev, kernel, h)
            if found is not None:
                result[h] = found
                cached.add(h)
        stats.ptx_hits += len(cached)

        # (3) compile every PTX the store did not know, in parallel.
        todo = [v for h, v in by_ptx.items() if h not in result]
        start = time.perf_counter()
        compiled = compile_many([v.ptx for v in todo], self.arch, workers=self.workers)
        stats.compile_seconds += time.perf_counter() - start
        stats.compiled += len(todo)
        version = ptxas_version() if todo else ""
        by_code: dict[str, list[Variant]] = {}
        for v, c in zip(todo, compiled):
            v.compiled = c
            if c.ok:
                v.code_hash = code_hash(cubin_text_hash(c.cubin), c.registers, c.shared_mem)
                by_code.setdefault(v.code_hash, []).append(v)
                continue
            stats.ptxas_errors += 1
            m = Measurement(kernel=kernel, device=dev, valid=False, backend=self.backend.name,
                            reason=f"{record.PTXAS_ERROR}: {c.error}", ptx_hash=v.ptx_hash,
                            seconds=c.seconds, notes={"ptxas_log": c.log[-2000:]})
            result[v.ptx_hash] = m
            # A timeout says more about the machine's load than the PTX: let it be retried.
            if writes and not (c.error or "").startswith("ptxas timed out"):
                store.put(dev, kernel, v.ptx_hash, ptxas_error_key(v.ptx_hash), m, version)

        # (4) code level: identical cubins (from different PTX) are one candidate.
        stats.unique_code += len(by_code)
        to_measure = []
        for h, group in by_code.items():
            found = known[2] if known and h == known[1] else store.lookup_code(dev, kernel, h)
            if found is None:
                to_measure.append(group[0])
                continue
            stats.code_hits += 1
            for v in group:
                result[v.ptx_hash] = found
                cached.add(v.ptx_hash)
                if writes:
                    store.link_ptx(dev, kernel, v.ptx_hash, h)

        # (5)+(6) the backend checks and times each unique new code once.
        start = time.perf_counter()
        measured = self.backend.measure_many(spec, to_measure, baseline=base) if to_measure else []
        stats.measure_seconds += time.perf_counter() - start
        stats.measured += len(to_measure)
        for rep, m in zip(to_measure, measured):
            m = _with_code(m, rep)
            keep = writes and not m.notes.get("transient") and not m.reason.startswith(record.NOT_MEASURED)
            for i, v in enumerate(by_code[rep.code_hash]):
                result[v.ptx_hash] = m
                if keep:
                    if i == 0:
                        store.put(dev, kernel, v.ptx_hash, v.code_hash, m, version)
                    else:
                        store.link_ptx(dev, kernel, v.ptx_hash, v.code_hash)

        for v in variants:  # a variant whose PTX was deduplicated has no code hash of its own
            if not v.code_hash:
                v.code_hash = by_ptx[v.ptx_hash].code_hash or result[v.ptx_hash].sass_hash
        return [_personal(result[v.ptx_hash], v, v.ptx_hash in cached) for v in variants]

    def _module(self, spec) -> ptx_model.Module:
        """The parsed baseline PTX (parsed once per kernel: apply_genome copies it)."""
        if spec.name not in self._modules:
            self._modules[spec.name] = ptx_model.parse(spec.ptx_text(), str(spec.ptx_path))
        return self._modules[spec.name]


def _variant(genome: Genome, applied: Applied) -> Variant:
    return Variant(genome, applied.ptx, ptx_hash(applied.ptx), outcomes=list(applied.outcomes))


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
    if not v.is_baseline:
        notes["genome"] = str(v.genome)
        notes["genes"] = [{"gene": str(o.gene), "status": o.status, "changes": o.changes,
                           **({"detail": o.detail} if o.detail else {})} for o in v.outcomes]
    return dataclasses.replace(m, ptx_hash=v.ptx_hash, notes=notes, flags=list(m.flags), cached=cached)
