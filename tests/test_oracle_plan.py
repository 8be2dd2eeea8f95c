"""evo.oracle_plan: the oracle's space grouped by machine code on the CPU, and the oracle
measuring one genome per group finds the best the whole space finds."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import needs_ptxas
from evo import bench
from evo.config import Config
from evo.oracle_plan import load_plan, main, plan_kernel
from genomes.errors import EvoError
from test_bench import CodeSizeBackend

KERNEL = "gemm_tile_2x2x2"


@pytest.fixture
def small_space(monkeypatch):
    """The oracle's space cut to three groups (4 x 3 x 9 = 108 genomes), wherever it is
    enumerated."""
    from evo.strategies import oracle
    from genomes import variation

    full = variation.group_combinations
    small = [g for g in variation.gene_alphabet()
             if g.group in ("ld_width", "st_width", "regs")]
    monkeypatch.setattr(variation, "group_combinations", lambda alphabet=None: full(small))
    monkeypatch.setattr(oracle, "group_combinations", lambda alphabet=None: full(small))
    return len(list(full(small)))


@needs_ptxas
def test_one_genome_per_machine_code_finds_the_whole_spaces_best(tmp_path, small_space):
    entry = plan_kernel(KERNEL, workers=2, progress=lambda line: None)
    assert entry["genomes"] == small_space == 108
    assert entry["representatives"][0] == ""  # the baseline comes first, in the oracle's order
    assert len(set(entry["representatives"])) == entry["distinct_code"]
    assert entry["distinct_code"] < entry["distinct_ptx"] <= entry["genomes"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kernels": {KERNEL: entry}}))

    def oracle(config, out):
        return bench.run_bench([KERNEL], ["oracle"], config, out, backend=CodeSizeBackend(),
                               progress=lambda s: None, oracle_kernels={KERNEL}
                               )["kernels"][KERNEL]["oracle"]

    whole = oracle(Config(), tmp_path / "whole")
    planned = oracle(Config().override("oracle", genomes=str(plan)), tmp_path / "planned")
    said = "one genome per distinct machine code"
    assert said in (tmp_path / "planned" / "bench.md").read_text()
    assert "distinct machine code" not in (tmp_path / "whole" / "bench.md").read_text()
    assert planned["best"] == whole["best"] and planned["genome"] == whole["genome"]
    assert planned["evals"] == entry["distinct_code"] < whole["evals"] == 108


@needs_ptxas
def test_the_cli_writes_a_gzip_plan_and_goes_on_where_it_stopped(tmp_path, small_space, capsys):
    out = tmp_path / "plan.json.gz"
    assert main(["--kernels", KERNEL, "--workers", "2", "-o", str(out)]) == 0
    plan = json.loads(gzip.decompress(out.read_bytes()))
    assert plan["kernels"][KERNEL]["genomes"] == 108 and plan["ptxas"]
    assert load_plan(out) == plan
    assert main(["--kernels", KERNEL, "-o", str(out)]) == 0  # already there: kept
    assert "already" in capsys.readouterr().out


def test_a_file_that_is_no_plan_says_so(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    with pytest.raises(EvoError, match="not an oracle plan"):
        load_plan(bad)
    with pytest.raises(EvoError, match="cannot read"):
        load_plan(tmp_path / "missing.json")


def test_bench_refuses_a_plan_without_its_oracle_kernels(tmp_path, capsys):
    from evo.cli import main as evo

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kernels": {}}))
    assert evo(["bench", "--suite", KERNEL, "--strategies", "oracle", "--oracle-kernels",
                KERNEL, "--oracle-genomes", str(plan), "--backend", "static",
                "--out", str(tmp_path / "b")]) != 0
    assert "no entry for gemm_tile_2x2x2" in capsys.readouterr().err
