"""evo.reduce: a best genome without the genes its machine code does not need, through real
ptxas (a gene that does nothing to relu is dropped, the one that changes its code stays) and
at the end of a run (report.md and evo show --json give it)."""

from __future__ import annotations

import json

from conftest import needs_ptxas
from evo.cli import main
from evo.reduce import reduce_genome, reduced_entry
from genomes.genome import Genome, parse_inline
from harness.backends import make_backend
from harness.evaluate import Evaluator
from harness.suite import find_kernel


def test_genes_go_while_the_code_stays_the_same_last_first():
    # a stand-in for ptxas: a genome's "code" is the set of its transforms that matter
    matter = {"vec_ld", "maxnreg"}

    def keys(genomes):
        return [",".join(sorted({g.transform for g in gm.genes} & matter)) for gm in genomes]

    genome = parse_inline("cache_st(policy=wb),vec_ld(width=4),fast_exp,maxnreg(n=96)")
    reduced, dropped = reduce_genome(genome, keys)
    assert str(reduced) == "vec_ld(width=4),maxnreg(n=96)"
    assert [g.transform for g in dropped] == ["fast_exp", "cache_st"]  # the last one first
    assert reduce_genome(Genome(), keys) == (Genome(), [])
    refused = reduce_genome(genome, lambda gs: [None] * len(gs))  # ptxas refuses: kept whole
    assert refused[0] == genome.effective() and refused[1] == []


@needs_ptxas
def test_a_gene_that_changes_nothing_in_relu_is_dropped_through_ptxas(tmp_path):
    spec = find_kernel("relu")
    with make_backend("static") as backend:
        evaluator = Evaluator(backend)
        entry = reduced_entry(parse_inline("fast_exp,coarsen(k=4),maxnreg(n=255)"),
                              lambda genomes: evaluator.code_keys(spec, genomes))
        evaluator.close()
    assert entry["text"].startswith("coarsen(") and "fast_exp" not in entry["text"]
    assert any(d.startswith("fast_exp") for d in entry["dropped"])


@needs_ptxas
def test_a_run_reports_the_reduced_best(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--backend", "static", "--kernel", "gemm_tile_4x6x8", "--generations",
                 "3", "--pop", "6", "--seed", "1", "--store", str(tmp_path / "s.sqlite"),
                 "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    checkpoint = json.loads((out / "checkpoint.json").read_text())
    entry = checkpoint["reduced"]["gemm_tile_4x6x8"]
    best = json.loads((out / "best" / "gemm_tile_4x6x8.genome.json").read_text())
    assert Genome.from_json(entry["from"]) == Genome.from_json(best)  # made from the best
    report = (out / "report.md").read_text()
    assert "The genes that matter" in report and "- gemm_tile_4x6x8: " in report
    assert main(["show", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernels"][0]["reduced_genome_text"] == entry["text"]


@needs_ptxas
def test_evo_diff_shows_what_the_best_changed_in_ptx_and_sass(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--backend", "static", "--kernel", "gemm_tile_4x6x8", "--kernel",
                 "relu", "--generations", "3", "--pop", "6", "--seed", "1",
                 "--store", str(tmp_path / "s.sqlite"), "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    best = Genome.from_json(json.loads((out / "best" / "gemm_tile_4x6x8.genome.json").read_text()))
    assert best.genes  # the search found a variant: there is something to show
    assert main(["diff", str(out), "gemm_tile_4x6x8"]) == 0
    text = capsys.readouterr().out
    assert f"best genome: {best}" in text
    assert "--- gemm_tile_4x6x8 baseline PTX" in text and "+++ gemm_tile_4x6x8 best PTX" in text
    assert "--- gemm_tile_4x6x8 baseline SASS" in text  # cuobjdump is installed with ptxas
    sass = text.split("baseline SASS", 1)[1]
    assert any(line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
               for line in sass.splitlines())  # the machine code changed, and it shows
    assert main(["diff", str(out), "gemm_tile_4x6x8", "--no-sass"]) == 0
    assert "SASS" not in capsys.readouterr().out
    assert main(["diff", str(out), "no_such_kernel"]) == 2
    assert "no best genome for no_such_kernel" in capsys.readouterr().err
