"""`evo bench`: strategies side by side, budgets, resume across calls, summary lines."""

from __future__ import annotations

import json
import re

from conftest import needs_ptxas
from evo import bench, bench_report
from evo.config import Config
from evo.search import KernelSearch
from harness.backends import Backend
from harness.record import Measurement


class CodeSizeBackend(Backend):
    """A deterministic stand-in for a GPU: 'cycles' from the cubin's size and registers."""

    name, device = "fake", "Fake GPU"

    def measure_many(self, spec, variants, baseline=None):
        return [Measurement(kernel=spec.name, device=self.device, valid=True, timer="clock64",
                            cycles=float(len(v.compiled.cubin) // 16 + 2 * v.compiled.registers),
                            n=1, backend=self.name) for v in variants]


def test_suites_name_the_right_kernels():
    assert len(bench.suite_kernels("gemm64")) == 64
    assert bench.suite_kernels("gemm_large") == [f"gemm_tile_{n}x{n}x{n}" for n in (10, 12, 14, 16)]
    many = bench.suite_kernels("many")
    assert "softmax" in many and not any(k.startswith("gemm_tile") for k in many)
    assert bench.suite_kernels("a, b") == ["a", "b"]


@needs_ptxas
def test_bench_runs_strategies_with_matched_budget_and_resumes(tmp_path):
    kernels = ["gemm_tile_2x2x2", "gemm_tile_2x4x2"]
    lines = []
    base = Config().override("run", seed=3)
    strategies = ["greedy", "evolve_matched", "evolve_ls", "evolve_sweep", "evolve45"]
    first = bench.run_bench(kernels[:1], strategies, base,
                            tmp_path, backend=CodeSizeBackend(), progress=lines.append,
                            keep_stores=True)
    assert (tmp_path / "stores" / "gemm_tile_2x2x2-greedy.sqlite").is_file()
    k = first["kernels"]["gemm_tile_2x2x2"]
    assert k["evolve_matched"]["evals"] <= k["greedy"]["evals"]
    assert k["evolve_ls"]["evals"] <= k["greedy"]["evals"]
    assert k["evolve_sweep"]["evals"] <= k["greedy"]["evals"]
    assert k["evolve45"]["evals"] <= 45
    assert len(lines) == 5
    # A second call continues: the finished kernel is not run again.
    second = bench.run_bench(kernels, strategies,
                             base, tmp_path, backend=CodeSizeBackend(), progress=lines.append)
    assert len(lines) == 10 and set(second["kernels"]) == set(kernels)
    assert json.loads((tmp_path / "results.json").read_text()) == second
    md = (tmp_path / "bench.md").read_text()
    assert "evolve_matched vs greedy:" in md and "cycle reduction mean" in md
    assert "evolve_sweep vs greedy:" in md
    dedup = re.search(r"- greedy: store dedup (\d+) % \((\d+) of (\d+) evaluations", md)
    greedy_evals = sum(second["kernels"][k]["greedy"]["evals"] for k in kernels)
    assert dedup and int(dedup.group(3)) == greedy_evals
    assert int(dedup.group(2)) == greedy_evals - sum(second["kernels"][k]["greedy"]["measured"]
                                                     for k in kernels) > 0
    for name in kernels:
        assert name in md


def test_win_tie_loss_counting():
    results = {"kernels": {
        "a": {"greedy": {"baseline": 100, "best": 80, "evals": 10, "seconds": 1},
              "evolve45": {"baseline": 100, "best": 70, "evals": 10, "seconds": 1}},
        "b": {"greedy": {"baseline": 100, "best": 80, "evals": 10, "seconds": 1},
              "evolve45": {"baseline": 100, "best": 80.2, "evals": 10, "seconds": 1}},
        "c": {"greedy": {"baseline": 100, "best": 60, "evals": 10, "seconds": 1},
              "evolve45": {"baseline": 100, "best": 90, "evals": 10, "seconds": 1}}}}
    lines = bench_report.summary_lines(results, ["greedy", "evolve45"])
    assert "- evolve45 vs greedy: 1 wins, 1 ties (within 0.5%), 1 losses" in lines
    assert lines[0].startswith("- greedy: cycle reduction mean 26.7 %")


def test_below_ninety_percent_of_greedy_both_readings():
    def entry(best):
        return {"baseline": 100, "best": best, "evals": 10, "seconds": 1}
    results = {"kernels": {
        "a": {"greedy": entry(80), "mcgs45": entry(97)},   # 1.03x against 1.25x
        "b": {"greedy": entry(96), "mcgs45": entry(97)},   # 1.03x against 1.04x
        "c": {"greedy": entry(90), "mcgs45": entry(85)}}}  # better than greedy
    lines = bench_report.summary_lines(results, ["greedy", "mcgs45"])
    assert ("- mcgs45 below 90% of greedy: by speedup on 1 of 3 kernels (a); "
            "by cycle reduction on 2") in lines
    assert not any("greedy below" in line for line in lines)


def test_oracle_space_and_share_lines():
    from genomes.variation import gene_alphabet, group_combinations

    alphabet = [g for g in gene_alphabet() if g.group in ("ld_width", "st_width")]
    combos = list(group_combinations(alphabet))
    assert len(combos) == 4 * 3 and len(set(combos)) == 12
    assert all(len({g.group for g in c.genes}) == len(c.genes) for c in combos)
    results = {"kernels": {"a": {
        "greedy": {"baseline": 100, "best": 80, "evals": 10, "seconds": 1},
        "oracle": {"baseline": 100, "best": 60, "evals": 99, "seconds": 1}}}}
    lines = bench_report.summary_lines(results, ["greedy", "oracle"])
    assert "- greedy reaches 50 % of the oracle's cycle reduction (mean over 1 kernels)" in lines


@needs_ptxas
def test_oracle_runs_only_on_its_kernels(tmp_path, monkeypatch):
    from evo.strategies import oracle
    from genomes import variation

    small = [g for g in variation.gene_alphabet() if g.group in ("ld_width", "st_width")]
    monkeypatch.setattr(oracle, "group_combinations", lambda alphabet=None: variation.group_combinations(small))
    res = bench.run_bench(["gemm_tile_2x2x2", "gemm_tile_2x2x4"], ["oracle"],
                          Config(), tmp_path, backend=CodeSizeBackend(), progress=lambda s: None,
                          oracle_kernels={"gemm_tile_2x2x2"})
    assert "oracle" in res["kernels"]["gemm_tile_2x2x2"]
    assert "oracle" not in res["kernels"]["gemm_tile_2x2x4"]
    assert res["kernels"]["gemm_tile_2x2x2"]["oracle"]["evals"] == 12
    assert not (tmp_path / "stores").exists()  # kept only when asked for


@needs_ptxas
def test_jobs_do_not_change_results(tmp_path, monkeypatch):
    """Kernels searched at once evaluate the same genomes as one after another: each search
    seeds its own RNG per kernel and has its own store; only the order of finishing differs."""
    from genomes import variation
    from harness.backends.static import StaticBackend

    # Two genes: a greedy of 5 evaluations, so evolve_matched's budget is 5 too (the static
    # backend runs cuobjdump, ~0.5 s, per new code). The concurrent run goes first, so it
    # is the one that fills the shared backend's SASS cache, from 3 threads at once.
    small = [g for g in variation.gene_alphabet() if str(g) in ("vec_ld(width=4)", "vec_st(width=4)")]
    monkeypatch.setattr(KernelSearch, "alphabet", lambda self: small)
    kernels = ["gemm_tile_2x2x2", "gemm_tile_2x2x4", "gemm_tile_2x4x2"]
    base = Config().override("run", seed=5)
    backend = StaticBackend()  # shared, as in a bench; spares the 2nd run cuobjdump
    runs, tables = [], []
    for jobs in (3, 1):
        out, lines = tmp_path / f"jobs{jobs}", []
        res = bench.run_bench(kernels, ["greedy", "evolve_matched"], base, out, backend=backend,
                              progress=lines.append, jobs=jobs)
        assert len(lines) == 6 and res["wall_seconds"] > 0
        assert json.loads((out / "results.json").read_text()) == res
        runs.append({k: {s: {f: e[f] for f in ("baseline", "best", "evals", "genome")}
                         for s, e in v.items()} for k, v in res["kernels"].items()})
        md = (out / "bench.md").read_text()
        assert "evaluations/s overall" in md
        tables.append([row for row in md.splitlines() if row.startswith("|")])
    assert runs[0] == runs[1] and set(runs[0]) == set(kernels)
    assert tables[0] == tables[1]
    assert [row.split(" | ")[0] for row in tables[0][2:]] == [f"| {k}" for k in kernels]


@needs_ptxas
def test_a_failing_search_stops_the_bench_and_the_next_call_resumes(tmp_path, monkeypatch):
    import pytest

    from genomes import variation
    from genomes.errors import EvoError

    small = [g for g in variation.gene_alphabet() if str(g) in ("vec_ld(width=4)", "vec_st(width=4)")]
    monkeypatch.setattr(KernelSearch, "alphabet", lambda self: small)

    class Broken(CodeSizeBackend):
        def measure_many(self, spec, variants, baseline=None):
            if spec.name == "gemm_tile_2x2x4":
                raise EvoError("the GPU fell off the bus")
            return super().measure_many(spec, variants, baseline)

    kernels = ["gemm_tile_2x2x4", "gemm_tile_2x2x2", "gemm_tile_2x4x2"]
    with pytest.raises(EvoError, match="fell off"):
        bench.run_bench(kernels, ["greedy"], Config(), tmp_path, backend=Broken(),
                        progress=lambda s: None, jobs=2)
    path = tmp_path / "results.json"
    saved = json.loads(path.read_text())["kernels"] if path.exists() else {}
    assert not saved.get("gemm_tile_2x2x4")  # only what finished is saved
    lines = []
    res = bench.run_bench(kernels, ["greedy"], Config(), tmp_path, backend=CodeSizeBackend(),
                          progress=lines.append, jobs=2)
    assert all("greedy" in res["kernels"][k] for k in kernels)
    assert len(lines) == 3 - sum(len(k) for k in saved.values())


@needs_ptxas
def test_evaluators_share_one_apply_pool():
    """The bench hands one apply pool to all its Evaluators: they use it, and leave it open."""
    import concurrent.futures
    import random

    from genomes.variation import random_genome
    from harness.evaluate import Evaluator
    from harness.kernels.suite import find_kernel

    spec = find_kernel("gemm_tile_2x2x2")
    genomes = [random_genome(random.Random(i), 1, 3) for i in range(4)]
    alone = Evaluator(CodeSizeBackend(), apply_workers=0).evaluate(spec, genomes)

    class Counting(concurrent.futures.ThreadPoolExecutor):
        calls = 0

        def submit(self, fn, /, *args, **kwargs):
            self.calls += fn.__name__ == "apply_from_file"  # the static gate goes there too
            return super().submit(fn, *args, **kwargs)

    with Counting(2) as pool:
        for _ in range(2):
            evaluator = Evaluator(CodeSizeBackend(), apply_workers=0, apply_pool=pool)
            shared = evaluator.evaluate(spec, genomes)
            evaluator.close()
            assert [m.cycles for m in shared] == [m.cycles for m in alone]
        assert pool.calls == 8  # every genome went through the pool, which is still open


@needs_ptxas
def test_replayed_bench_reproduces_greedy_from_its_kept_store(tmp_path, capsys):
    """Kept stores, merged, answer a second bench offline: greedy (deterministic) ends on
    the same genome and cycles with no miss, and bench.md says it was replayed."""
    from evo.cli import main

    kernel = "gemm_tile_2x2x2"
    first = bench.run_bench([kernel], ["greedy"], Config().override("run", seed=3),
                            tmp_path / "gpu", backend=CodeSizeBackend(), progress=lambda _: None,
                            keep_stores=True, jobs=1)
    merged = tmp_path / "merged.sqlite"
    assert main(["store", "merge", str(merged), *map(str, (tmp_path / "gpu" / "stores").iterdir())]) == 0
    assert main(["bench", "--suite", kernel, "--strategies", "greedy", "--backend", "replay",
                 "--store", str(merged), "--seed", "3", "--jobs", "1",
                 "--out", str(tmp_path / "replay")]) == 0
    replayed = json.loads((tmp_path / "replay" / "results.json").read_text())
    was, now = first["kernels"][kernel]["greedy"], replayed["kernels"][kernel]["greedy"]
    assert (now["genome"], now["best"], now["evals"]) == (was["genome"], was["best"], was["evals"])
    assert now["misses"] == 0
    assert "**Replayed** with replay on Fake GPU" in capsys.readouterr().out


def test_replay_bench_needs_a_store(tmp_path, capsys):
    from evo.cli import main

    assert main(["bench", "--suite", "gemm_tile_2x2x2", "--backend", "replay",
                 "--out", str(tmp_path)]) == 2
    assert "needs --store PATH" in capsys.readouterr().err


@needs_ptxas
def test_bench_curves_and_plots(tmp_path, capsys):
    """Each search keeps its best-so-far curve (ending at its evaluation count, never
    rising); `evo plot` on the bench folder draws them and the reduction summary."""
    from evo.cli import main

    kernel = "gemm_tile_2x2x2"
    results = bench.run_bench([kernel], ["greedy", "evolve_sweep"], Config().override("run", seed=3),
                              tmp_path, backend=CodeSizeBackend(), progress=lambda _: None, jobs=1)
    for entry in results["kernels"][kernel].values():
        xs, ys = zip(*entry["curve"])
        assert xs[-1] == entry["evals"] and ys[-1] == entry["best"]
        assert list(xs) == sorted(xs) and list(ys) == sorted(ys, reverse=True)
    assert main(["plot", str(tmp_path)]) == 0
    for name in (kernel, "reduction"):
        assert (tmp_path / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "reduction.png" in capsys.readouterr().out


@needs_ptxas
def test_bench_md_follows_every_search(tmp_path, monkeypatch):
    """A bench cut off at a time limit still leaves its table: bench.md is rewritten after
    each (kernel, strategy), before the progress line says it finished."""
    from genomes import variation

    small = [g for g in variation.gene_alphabet() if str(g) in ("vec_ld(width=4)", "vec_st(width=4)")]
    monkeypatch.setattr(KernelSearch, "alphabet", lambda self: small)
    tables = []
    bench.run_bench(["gemm_tile_2x2x2", "gemm_tile_2x2x4"], ["greedy"], Config(), tmp_path,
                    backend=CodeSizeBackend(), jobs=1,
                    progress=lambda line: tables.append((tmp_path / "bench.md").read_text()))
    assert len(tables) == 2
    assert "| gemm_tile_2x2x2 |" in tables[0] and "gemm_tile_2x2x4" not in tables[0]
    assert "| gemm_tile_2x2x4 |" in tables[1]


def test_evaluations_to_reach_95_percent_of_greedys_reduction():
    # greedy: 100 -> 80 (20 %); 95 % of that is 19 %, i.e. best/baseline <= 0.81
    results = {"kernels": {
        "a": {"greedy": {"baseline": 100, "best": 80, "evals": 60, "seconds": 1,
                         "curve": [[20, 90], [50, 81], [60, 80]]},
              "evolve45_priors": {"baseline": 100, "best": 80.5, "evals": 45, "seconds": 1,
                                  "curve": [[5, 85], [15, 80.5], [45, 80.5]]}},
        "b": {"greedy": {"baseline": 200, "best": 100, "evals": 40, "seconds": 1,
                         "curve": [[40, 100]]},
              "evolve45_priors": {"baseline": 200, "best": 150, "evals": 45, "seconds": 1,
                                  "curve": [[45, 150]]}}}}
    line = bench_report.to_greedy_line(results["kernels"], "evolve45_priors")
    assert line == ("- evolve45_priors reaches 95% of greedy's cycle reduction on 1 of 2 "
                    "kernels, after a median 15 evaluations there (greedy 50); its evaluations "
                    "over greedy's, median over all 2 (never = infinite): infx")
    assert line in bench_report.summary_lines(results, ["greedy", "evolve45_priors"])
    results["kernels"]["c"] = results["kernels"]["a"]
    assert bench_report.to_greedy_line(results["kernels"], "evolve45_priors").endswith(
        "median over all 3 (never = infinite): 0.30x")


def test_the_memory_table_gives_roofline_shares_and_the_peer():
    entry = {"baseline": 6600, "best": 4450, "evals": 45, "seconds": 1, "baseline_us": 3.32,
             "best_us": 2.26, "bytes": 8_388_608, "copy_gbps": 3460.0, "caches": "warm (x)"}
    worse = dict(entry, best_us=2.5)
    results = {"kernels": {"relu": {"greedy": worse, "evolve45": entry},
                           "gemm_tile_2x2x2": {"greedy": {"baseline": 450, "best": 400}}},
               "peers": {"relu": {"peer": "harness.kernels.peers:relu", "peer_us": 2.34}}}
    lines = bench_report.memory_table(results, ["greedy", "evolve45"])
    assert "caches: warm (x)" in lines[0]
    assert lines[4:] == ["| relu | 8.4 | 3460 | 3.32 µs (2527 GB/s, 73 %) | "
                         "2.26 µs (3712 GB/s, 107 %) | 2.34 µs | 1.04x |", ""]


@needs_ptxas
def test_kept_stores_of_a_users_kernel_can_be_learned_from(tmp_path):
    """A kernel outside the suite (a user's spec: stored as name#digest, no spec evo can
    find again) is learned from the bench's kept stores: its features lie beside them
    (features.json, as evo run keeps them), so a knowledge base built from those stores
    holds it instead of leaving it out."""
    from evo.learn import priors as P
    from evo.learn.source import feature_cache_path, read_cache
    from test_hardening import copy_kernel

    spec = str(copy_kernel(tmp_path / "mine", "my_tile"))
    bench.run_bench([spec, "gemm_tile_2x2x2"], ["evolve45"], Config().override("run", seed=3),
                    tmp_path / "out", backend=CodeSizeBackend(), progress=lambda line: None,
                    keep_stores=True, jobs=1)
    assert not list((tmp_path / "mine").glob("*.sqlite"))  # nothing beside the user's spec
    store = bench.store_file(tmp_path / "out" / "stores", spec, "evolve45")
    assert store.parent == tmp_path / "out" / "stores" and store.is_file()
    cache = read_cache(feature_cache_path(store))
    assert any(key.startswith("my_tile#") for key in cache)
    left_out: list = []
    kb = P.build_kb([store], feature_cache=cache, probe=False, left_out=left_out)
    assert [e["kernel"].split("#")[0] for e in kb["kernels"]] == ["my_tile"] and not left_out
