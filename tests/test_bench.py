"""`evo bench`: strategies side by side, budgets, resume across calls, summary lines."""

from __future__ import annotations

import json

from conftest import needs_ptxas
from evo import bench
from evo.config import Config
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
    first = bench.run_bench(kernels[:1], ["greedy", "evolve_matched", "evolve_ls", "evolve45"], base,
                            tmp_path, backend=CodeSizeBackend(), progress=lines.append,
                            keep_stores=True)
    assert (tmp_path / "stores" / "gemm_tile_2x2x2-greedy.sqlite").is_file()
    k = first["kernels"]["gemm_tile_2x2x2"]
    assert k["evolve_matched"]["evals"] <= k["greedy"]["evals"]
    assert k["evolve_ls"]["evals"] <= k["greedy"]["evals"]
    assert k["evolve45"]["evals"] <= 45
    assert len(lines) == 4
    # A second call continues: the finished kernel is not run again.
    second = bench.run_bench(kernels, ["greedy", "evolve_matched", "evolve_ls", "evolve45"],
                             base, tmp_path, backend=CodeSizeBackend(), progress=lines.append)
    assert len(lines) == 8 and set(second["kernels"]) == set(kernels)
    assert json.loads((tmp_path / "results.json").read_text()) == second
    md = (tmp_path / "bench.md").read_text()
    assert "evolve_matched vs greedy:" in md and "cycle reduction mean" in md
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
    lines = bench.summary_lines(results, ["greedy", "evolve45"])
    assert "- evolve45 vs greedy: 1 wins, 1 ties (within 0.5%), 1 losses" in lines
    assert lines[0].startswith("- greedy: cycle reduction mean 26.7 %")


def test_oracle_space_and_share_lines():
    from genomes.variation import gene_alphabet, group_combinations

    alphabet = [g for g in gene_alphabet() if g.group in ("ld_width", "st_width")]
    combos = list(group_combinations(alphabet))
    assert len(combos) == 4 * 3 and len(set(combos)) == 12
    assert all(len({g.group for g in c.genes}) == len(c.genes) for c in combos)
    results = {"kernels": {"a": {
        "greedy": {"baseline": 100, "best": 80, "evals": 10, "seconds": 1},
        "oracle": {"baseline": 100, "best": 60, "evals": 99, "seconds": 1}}}}
    lines = bench.summary_lines(results, ["greedy", "oracle"])
    assert "- greedy reaches 50 % of the oracle's cycle reduction (mean over 1 kernels)" in lines


@needs_ptxas
def test_oracle_runs_only_on_its_kernels(tmp_path, monkeypatch):
    from evo.strategies import oracle
    from genomes import variation

    small = [g for g in variation.gene_alphabet() if g.group in ("ld_width", "st_width")]
    monkeypatch.setattr(oracle, "group_combinations", lambda: variation.group_combinations(small))
    res = bench.run_bench(["gemm_tile_2x2x2", "gemm_tile_2x2x4"], ["oracle"],
                          Config(), tmp_path, backend=CodeSizeBackend(), progress=lambda s: None,
                          oracle_kernels={"gemm_tile_2x2x2"})
    assert "oracle" in res["kernels"]["gemm_tile_2x2x2"]
    assert "oracle" not in res["kernels"]["gemm_tile_2x2x4"]
    assert res["kernels"]["gemm_tile_2x2x2"]["oracle"]["evals"] == 12
    assert not (tmp_path / "stores").exists()  # kept only when asked for
