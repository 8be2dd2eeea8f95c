"""The evaluation pipeline with real ptxas and a real store: dedup at PTX and code level,
ptxas failures as stored results, `evo measure`, and the throughput benchmark's smoke run."""

from __future__ import annotations

import json
import re

import pytest

from genomes import transforms
from genomes.genome import Genome, parse_inline
from genomes.ptx import Instruction, Line
from genomes.transforms.base import Transform
from harness import record
from harness.backends import Backend
from harness.evaluate import Evaluator
from harness.record import Measurement
from harness.store import Store
from harness.kernels.suite import find_kernel

KERNEL = "gemm_tile_2x2x2"


class CountingBackend(Backend):
    """A GPU stand-in: 'cycles' = number of the variant's code, every call recorded."""

    name, device = "fake", "Fake GPU"

    def __init__(self):
        self.calls: list[list[str]] = []

    def measure_many(self, spec, variants, baseline=None):
        self.calls.append([v.code_hash for v in variants])
        return [Measurement(kernel=spec.name, device=self.device, valid=True, timer="clock64",
                            cycles=100.0 + len(self.calls), n=30, backend=self.name) for v in variants]


def _genomes(*texts: str) -> list[Genome]:
    return [parse_inline(t) for t in texts]


def test_ptx_and_code_level_dedup_is_counted(tmp_path):
    spec, backend = find_kernel(KERNEL), CountingBackend()
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(backend, store)
        # 255 and 254 differ in PTX (the directive) but not in code; one is repeated.
        genomes = _genomes("vec_ld,maxnreg(n=255)", "vec_ld,maxnreg(n=254)", "vec_ld,maxnreg(n=255)")
        first = ev.evaluate(spec, genomes)
        assert len(backend.calls) == 2 and len(backend.calls[1]) == 1  # baseline, then one code
        s = ev.stats
        assert (s.genomes, s.unique_ptx, s.ptx_hits, s.compiled) == (3, 2, 0, 2)
        assert (s.unique_code, s.code_hits, s.measured, s.ptxas_errors) == (1, 0, 1, 0)
        assert len({m.cycles for m in first}) == 1 and not any(m.cached for m in first)
        assert first[0].ptx_hash != first[1].ptx_hash and first[0].sass_hash == first[1].sass_hash
        assert first[1].notes["genes"][1] == {"gene": "maxnreg(n=254)", "status": "applied", "changes": 1}

        # Again, and with a third budget that also gives the same code: nothing is measured.
        again = ev.evaluate(spec, _genomes("vec_ld,maxnreg(n=254)", "vec_ld,maxnreg(n=253)"))
        assert len(backend.calls) == 2 and all(m.cached for m in again)
        assert (s.unique_ptx, s.ptx_hits, s.compiled, s.unique_code, s.code_hits) == (4, 1, 3, 2, 1)
        assert again[1].cycles == first[0].cycles

    # A fresh process (new Evaluator) on the same store: PTX-level hits only, no ptxas at all.
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(CountingBackend(), store)
        ms = ev.evaluate(spec, _genomes("vec_ld,maxnreg(n=253)", ""))
        assert ev.stats.compiled == 0 and ev.stats.ptx_hits == 2 and all(m.cached for m in ms)
        assert ms[1].cycles == ev.baseline(spec).cycles  # a genome equal to the baseline is it
        assert ev.backend.calls == []


def test_baseline_code_counts_as_a_code_hit(tmp_path):
    """maxnreg(n=255) on a small kernel assembles to the baseline's code: not measured again."""
    spec, backend = find_kernel(KERNEL), CountingBackend()
    ev = Evaluator(backend, Store(tmp_path / "s.sqlite"))
    [m] = ev.evaluate(spec, _genomes("maxnreg(n=255)"))
    assert backend.calls == [[ev.baseline(spec).sass_hash]]  # only the baseline was measured
    assert m.cached and m.cycles == ev.baseline(spec).cycles and ev.stats.code_hits == 1


def _break(module) -> int:
    """A test-only transform whose output ptxas rejects: it uses an undeclared register."""
    for fn in module.entries:
        fn.body.insert(0, Line(Instruction("mov.u32", ("%r_evo_undeclared", "0"))))
    return 1


@pytest.fixture
def breaking_gene(monkeypatch):
    monkeypatch.setitem(transforms.registry(), "break_ptx", Transform(
        name="break_ptx", group=None, summary="test only", applies_when="always", params=(), apply=_break))
    return "break_ptx"


def test_ptxas_failure_is_a_stored_result(tmp_path, breaking_gene):
    spec, backend = find_kernel(KERNEL), CountingBackend()
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(backend, store)
        [m, ok] = ev.evaluate(spec, _genomes(breaking_gene, "vec_ld"))
        assert not m.valid and m.reason.startswith(record.PTXAS_ERROR + ": ")
        assert "r_evo_undeclared" in m.reason and m.fitness == float("inf")
        assert ok.valid and ev.stats.ptxas_errors == 1 and ev.stats.measured == 1
        assert store.stats()["rows"] == 3  # baseline, vec_ld, and the failure
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(CountingBackend(), store)
        [again] = ev.evaluate(spec, _genomes(breaking_gene))
        assert again.cached and again.reason == m.reason and ev.stats.compiled == 0


def _memo(module) -> int:
    """A test-only transform that keeps state across launches: the entry stores its first
    param into a module ``.global`` it declares (the result-reuse cheat's channel)."""
    first = next(i for i, part in enumerate(module.parts) if not isinstance(part, str))
    module.parts.insert(first, "\n.global .align 8 .u64 evo_memo;\n")
    for fn in module.entries:
        fn.body.insert(0, Line(Instruction("st.global.u64", ("[evo_memo]", "%rd1"))))
    return 1


def test_a_variant_keeping_module_state_is_rejected_before_ptxas(tmp_path, monkeypatch):
    monkeypatch.setitem(transforms.registry(), "memo", Transform(
        name="memo", group=None, summary="test only", applies_when="always", params=(), apply=_memo))
    spec, backend = find_kernel(KERNEL), CountingBackend()
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(backend, store)
        [m, ok] = ev.evaluate(spec, _genomes("memo", "vec_ld"))
        assert not m.valid and m.reason.startswith(record.HIDDEN_STATE + ": "), m.reason
        assert "evo_memo" in m.reason and m.fitness == float("inf")
        assert ok.valid and ev.stats.static_rejects == 1 and ev.stats.compiled == 1
        assert len(backend.calls) == 2  # the baseline and vec_ld: the memo never measured
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(CountingBackend(), store)
        [again] = ev.evaluate(spec, _genomes("memo"))
        assert again.cached and again.reason == m.reason and ev.stats.static_rejects == 0


def test_code_keys_tell_genomes_apart_by_machine_code_without_measuring(tmp_path,
                                                                       breaking_gene):
    spec, backend = find_kernel(KERNEL), CountingBackend()
    ev = Evaluator(backend, Store(tmp_path / "s.sqlite"))
    genomes = _genomes("", "maxnreg(n=255)", "vec_ld,maxnreg(n=255)", "vec_ld,maxnreg(n=254)",
                       "vec_ld", breaking_gene)
    base, budget, vec255, vec254, vec, broken = ev.code_keys(spec, genomes)
    assert base == budget  # a register budget the kernel never reaches: the same code
    assert vec == vec255 == vec254 != base  # the directives differ in PTX, not in code
    assert broken is None  # ptxas refuses it
    assert ev.code_keys(spec, genomes[:2]) == [base, budget]  # memoized: the same answer
    # Another block size is another kernel launch, though ptxas makes the same code.
    relu = find_kernel("relu")
    same, other = ev.code_keys(relu, _genomes("", "block(threads=64)"))
    assert other.startswith(same) and other != same
    assert backend.calls == [] and ev.stats.genomes == 0  # nothing measured, nothing counted


def test_replay_through_the_pipeline_never_writes(tmp_path):
    from harness.backends.replay import ReplayBackend

    spec = find_kernel(KERNEL)
    with Store(tmp_path / "s.sqlite") as store:
        Evaluator(CountingBackend(), store).evaluate(spec, _genomes("vec_ld"))
        rows = store.stats()["rows"]
        ev = Evaluator(ReplayBackend(store), store)
        hit, miss = ev.evaluate(spec, _genomes("vec_ld", "vec_st"))
        assert hit.valid and hit.cached and hit.device == "Fake GPU"
        assert miss.reason == record.NOT_MEASURED and ev.backend.misses == 1
        assert store.stats()["rows"] == rows


# ------------------------------------------------------------------ CLI and benchmark (static)
def test_evo_measure_static_labels_every_estimate(tmp_path, capsys):
    from evo.cli import main

    store = tmp_path / "s.sqlite"
    assert main(["measure", "gemm_tile_2x2x2", "--genome", "vec_ld,vec_st", "--backend", "static",
                 "--store", str(store)]) == 0
    out = capsys.readouterr().out
    for key in ("kernel:", "device:", "timer:", "cycles:", "registers:", "spills:", "valid:",
                "baseline:", "speedup:"):
        assert key in out, key
    estimates = [line for line in out.splitlines()
                 if line.startswith(("cycles:", "baseline:", "speedup:"))]
    assert len(estimates) == 3 and all("static estimate, not measured" in line
                                       for line in estimates), out
    exact = [line for line in out.splitlines() if line.startswith(("registers:", "spills:"))]
    assert exact and not any("estimate" in line for line in exact), out  # ptxas: exact figures
    assert "timer:      static" in out and "valid:      not checked: no GPU" in out


def test_bench_throughput_smoke_on_static(tmp_path, capsys):
    from harness.tools.bench_throughput import main

    out_file = tmp_path / "bench.json"
    assert main(["--seconds", "0.5", "--backend", "static", "--batch", "3", "--kernels", KERNEL,
                 "--out", str(out_file)]) == 0
    text = capsys.readouterr().out
    summary = json.loads(out_file.read_text())
    assert summary["static"] and summary["device"] == "static" and summary["batches"] >= 1
    assert summary["pipeline"]["genomes"] == 3 * summary["batches"]
    assert summary["valid"] + summary["invalid"] == summary["pipeline"]["genomes"]
    assert summary["compile_pool"] >= 1 and "unique_candidates_per_s" in summary
    assert summary["in_flight"] == 1
    assert all("static estimate, not measured" in line for line in text.splitlines()
               if re.search(r"\d", line) and not line.startswith("wrote"))


def test_bench_throughput_says_what_the_runs_process_adds_to_the_workers_time():
    """The round trip (request sent to answer read) and the measure stage per candidate
    beside the worker's own phases: what lies between them is the run's process's."""
    from harness.tools.bench_throughput import format_summary

    pipeline = {k: 0 for k in ("genomes", "unique_ptx", "ptx_hits", "compiled", "ptxas_errors",
                               "unique_code", "code_hits", "measured")}
    pipeline.update(ptx_hit_rate=0.0, code_hit_rate=0.0, apply_seconds=1.0, compile_seconds=1.0,
                    measure_seconds=2.0)
    summary = {"backend": "gpu", "device": "NVIDIA H200", "chosen_because": "", "seconds": 12.0,
               "batches": 1, "batch_size": 16, "kernels": 1, "compile_pool": 16, "ahead": 2,
               "unique_candidates_per_s": 1.0, "measured_per_s": 1.0, "genomes_per_s": 1.0,
               "pipeline": pipeline, "valid": 1, "invalid": 0, "by_reason": {"ok": 1},
               "static": False, "phases": {"timing": 0.002, "check": 0.003},
               "round_trip_seconds": 0.0081, "measure_stage_seconds": 0.0166}
    text = format_summary(summary)
    assert "worker time per measured candidate: 5.0 ms" in text
    assert "in the run's process: 8.1 ms from request to answer, 16.6 ms of the measure stage" in text


@pytest.mark.gpu
def test_evo_measure_gpu_vectorized_beats_baseline(tmp_path, capsys):
    from evo.cli import main

    rc = main(["measure", "gemm_tile_4x6x8", "--genome", "vec_ld,vec_st,maxnreg(n=128)",
               "--backend", "gpu", "--store", str(tmp_path / "s.sqlite")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "valid:      yes (ok)" in out and "timer:      clock64" in out and "static" not in out
    speedup = float(re.search(r"speedup:\s+([\d.]+)x", out).group(1))
    assert speedup > 1.0, out


def test_parallel_apply_gives_the_same_variants_as_serial():
    import random

    from genomes.variation import random_genome
    from harness.evaluate import Evaluator
    from harness.kernels.suite import find_kernel

    spec = find_kernel("gemm_tile_2x4x4")
    rng = random.Random(3)
    genomes = [random_genome(rng, 1, 5) for _ in range(6)]

    class Nothing:  # prepare() only needs a device name and a no-op prepare hook
        device, name, writes_store, wants_clock_ptx = "none", "none", False, True

        def prepare(self, spec, variants):
            pass

    serial = Evaluator(Nothing(), apply_workers=0)._apply_all(spec, genomes)
    pooled_eval = Evaluator(Nothing(), apply_workers=2)
    try:
        pooled = pooled_eval._apply_all(spec, genomes)
    finally:
        pooled_eval.close()
    assert [a.ptx for a, _ in pooled] == [a.ptx for a, _ in serial]
    assert [a.outcomes for a, _ in pooled] == [a.outcomes for a, _ in serial]
    # The pool also adds the clock64 twin entry to each variant.
    from harness.gpu.instrument import with_clock_twin

    assert [t for _, t in pooled] == [with_clock_twin(a.ptx, spec.entry) for a, _ in serial]


def test_the_apply_pool_answers_as_this_process_does():
    """What the run's process hands the apply pool (a CI machine has too few cores to
    start one): which genes change a kernel alone, and the static gate's verdicts."""
    from types import SimpleNamespace

    from genomes import ptx
    from genomes.variation import applicable, gene_alphabet

    spec = find_kernel("softmax")
    genes = gene_alphabet()
    memo = ptx.parse(spec.ptx_text())
    _memo(memo)
    texts = [memo.render(), spec.ptx_text(), memo.render(), spec.ptx_text()]
    variants = [SimpleNamespace(ptx=t) for t in texts]
    here = Evaluator(CountingBackend(), apply_workers=0)
    pooled = Evaluator(CountingBackend(), apply_workers=2)
    try:
        changes = pooled.changes_alone(spec, genes)
        assert pooled._apply_pool is not None  # the pool answered
        assert changes == here.changes_alone(spec, genes)
        assert [g for g, c in zip(genes, changes) if c] == applicable(genes, spec.ptx_text(), spec.launch)
        assert 0 < sum(changes) < len(genes)
        verdicts = pooled._hidden_states(spec, variants)
        assert verdicts == here._hidden_states(spec, variants)
        assert [v is not None and v.startswith(record.HIDDEN_STATE) for v in verdicts] == [True, False] * 2
    finally:
        pooled.close()


class ClockBackend(CountingBackend):
    """A stand-in for the gpu backend: wants clock64 twins, records what it was handed."""

    wants_clock_ptx = True

    def __init__(self):
        super().__init__()
        self.prepared: list[int] = []
        self.variants: list = []

    def prepare(self, spec, variants):
        self.prepared.append(sum(v.clock_cubin is None for v in variants))

    def measure_many(self, spec, variants, baseline=None):
        self.variants += [v for v in variants if not v.is_baseline]
        return super().measure_many(spec, variants, baseline)


def test_clock64_twins_assemble_with_their_variants(tmp_path):
    """With the apply pool, each variant and its instrumented twin are one module, one ptxas
    run: the backend gets the twin ready, as another entry of the variant's own cubin, and
    the store key is the variant's code alone (the same as assembled without the twin)."""
    from harness.gpu.instrument import clock_entry_name
    from harness.sass import _elf_text_sections

    spec, backend = find_kernel(KERNEL), ClockBackend()
    assert spec.timing == "clock64"
    genomes = _genomes("vec_ld", "vec_st", "vec_ld,vec_st", "cache_ld(policy=cg)")
    ev = Evaluator(backend, Store(tmp_path / "s.sqlite"), apply_workers=2)
    try:
        twinned = ev.evaluate(spec, genomes)
    finally:
        ev.close()
    assert backend.prepared[-1] == 0  # every variant to measure already had its twin
    assert ev.stats.compiled == 4 and len(backend.variants) == 4
    for v in backend.variants:
        assert v.clock_cubin is v.compiled.cubin and v.clock_entry == clock_entry_name(spec.entry)
        sections = {name for name, _ in _elf_text_sections(v.clock_cubin)}
        assert sections == {f".text.{spec.entry}", f".text.{v.clock_entry}"}
    plain = Evaluator(CountingBackend(), Store(tmp_path / "plain.sqlite")).evaluate(spec, genomes)
    assert [m.sass_hash for m in twinned] == [m.sass_hash for m in plain]
    assert [m.registers for m in twinned] == [m.registers for m in plain]


def test_code_keys_assemble_what_the_measurement_will(tmp_path):
    """The novelty look-up assembles each genome as ``prepare`` then does (with its clock64
    twin on a backend that times with one, pool or not): the measurement's ptxas runs are
    answered by the tool cache, and the keys are the store's code keys."""
    spec = find_kernel(KERNEL)
    genomes = _genomes("vec_ld", "vec_st", "cache_ld(policy=cg)")

    class Recording(ClockBackend):
        def __init__(self):
            super().__init__()
            self.texts: list[list[str]] = []

        def compile_many(self, ptx_list, arch, workers):
            self.texts.append(list(ptx_list))
            return super().compile_many(ptx_list, arch, workers)

    backend = Recording()
    ev = Evaluator(backend, Store(tmp_path / "s.sqlite"), apply_workers=0)
    keys = ev.code_keys(spec, genomes)
    looked_up = backend.texts[-1]
    assert len(looked_up) == 3 and all("__evo_clock" in t for t in looked_up)
    measured = ev.evaluate(spec, genomes)
    assert backend.texts[-1] == looked_up  # the same texts: ptxas cache hits
    assert [m.sass_hash for m in measured] == keys
    assert backend.prepared[-1] == 0  # the twins came with the variants


def test_a_spec_of_the_same_name_and_ptx_at_another_size_is_measured_not_answered(tmp_path):
    """A kernel compiled for dynamic shapes keeps one PTX at every size (a captured
    model at another batch, an evo.kernel of another count): the store must not answer
    for one size with what was checked and timed at another. A suite name and a suite
    kernel at another size (relu@64K) keep their plain names."""
    import dataclasses

    relu = find_kernel("relu")
    small = dataclasses.replace(find_kernel("relu@64K"), name="relu_dyn", spec_path=None)
    big = dataclasses.replace(find_kernel("relu@1M"), name="relu_dyn", spec_path=None)
    assert small.ptx_text() == big.ptx_text() and small.store_name != big.store_name
    assert relu.store_name == "relu" and find_kernel("relu@64K").store_name == "relu@64K"
    assert dataclasses.replace(relu, spec_path=None).store_name == "relu"  # the same spec
    backend = CountingBackend()
    with Store(tmp_path / "s.sqlite") as store:
        ev = Evaluator(backend, store)
        ev.evaluate(small, _genomes("cache_ld(policy=cg)"))
        calls = len(backend.calls)
        ev.evaluate(big, _genomes("cache_ld(policy=cg)"))
        assert len(backend.calls) > calls  # measured at its own size
    third = dataclasses.replace(find_kernel("relu@128K"), name="relu_dyn", spec_path=None)
    with Store(tmp_path / "s.sqlite") as store:  # a later process: each size its own
        ev = Evaluator(CountingBackend(), store)
        assert all(m.cached for m in ev.evaluate(big, _genomes("cache_ld(policy=cg)", "")))
        assert ev.backend.calls == []
        [m] = ev.evaluate(third, _genomes("cache_ld(policy=cg)"))
        assert not m.cached and len(ev.backend.calls) == 2  # its baseline, then the variant


def test_bench_apply_gives_the_same_ptx_digest_every_round(capsys):
    """harness.tools.bench_apply: a digest of what the genomes gave, so a change to the
    transforms' code can be timed and shown to give the same PTX."""
    from harness.tools import bench_apply

    bench_apply.main(["gemm_tile_2x2x2", "--genomes", "4"])
    bench_apply.main(["gemm_tile_2x2x2", "--genomes", "4"])
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("gemm_tile_2x2x2: ") and "ms a genome (PTX digest " in first
    assert first.split("digest ")[1] == second.split("digest ")[1]
