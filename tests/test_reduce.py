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
from harness.kernels.suite import find_kernel


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


def _costs(costs: dict[str, float], invalid=()):
    """A stand-in measure: 1000 cycles less each transform's worth; some genomes invalid."""
    from harness.record import Measurement

    def measure(genomes):
        return [Measurement("k", "Fake GPU", str(g) not in invalid,
                            cycles=1000.0 - sum(costs.get(x.transform, 0.0) for x in g.genes),
                            timer="fake", n=1, backend="fake") for g in genomes]
    return measure


def test_genes_whose_removal_costs_no_more_than_the_noise_go_measured_against_the_best():
    from evo.reduce import reduce_by_time

    measure = _costs({"vec_ld": 50, "coarsen": 30, "maxnreg": 3, "cache_st": 3})
    genome = parse_inline("vec_ld(width=4),maxnreg(n=96),coarsen(k=2),ftz,cache_st(policy=wb)")
    reduced, dropped, cycles = reduce_by_time(genome, measure, noise=0.005)
    # best 914, limit 918.57: ftz costs nothing, then one of the two 3-cycle genes, not both
    assert [g.transform for g in dropped][0] == "ftz" and len(dropped) == 2
    assert {g.transform for g in reduced.genes} in ({"vec_ld", "coarsen", "cache_st"},
                                                    {"vec_ld", "coarsen", "maxnreg"})
    assert cycles == {"best": 914.0, "reduced": 917.0}
    wide = reduce_by_time(genome, measure, noise=0.01)[0]  # 1 %: both go, the worth stays
    assert [g.transform for g in wide.genes] == ["vec_ld", "coarsen"]
    # a shorter genome that fails the gate is never the reduced one
    bad = reduce_by_time(genome, _costs({"vec_ld": 50}, invalid={"vec_ld(width=4)"}), 0.005)[0]
    assert "vec_ld" in str(bad) and "coarsen" not in str(bad)
    assert reduce_by_time(genome, _costs({}, invalid={str(genome)}))[0] == genome  # unmeasurable


@needs_ptxas
def test_a_gpu_run_reduces_its_best_by_time_and_says_so(tmp_path, monkeypatch, capsys):
    """On a backend that measures (a stand-in GPU where any gene that changes the code is
    worth 4 %, and only once), the reduced best keeps one gene; the riders are named."""
    import harness.backends
    from harness.backends import Backend
    from harness.record import Measurement

    class OneGeneWorth(Backend):
        name, device, remeasures = "onegene", "Fake GPU", True

        def measure_many(self, spec, variants, baseline=None):
            return [Measurement(spec.name, self.device, True, timer="fake", n=1, backend=self.name,
                                cycles=1000.0 - 40 * any(o.status == "applied" for o in v.outcomes)
                                - 0.1 * len(v.genome.genes))  # riders: within the noise
                    for v in variants]

    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: OneGeneWorth())
    out = tmp_path / "run"
    assert main(["run", "--kernel", "gemm_tile_4x6x8", "--generations", "4", "--pop", "6",
                 "--seed", "2", "--store", str(tmp_path / "s.sqlite"), "--out", str(out), "-q",
                 "--config", str(_no_confirm(tmp_path))]) == 0
    capsys.readouterr()
    checkpoint = json.loads((out / "checkpoint.json").read_text())
    best = Genome.from_json(checkpoint["reduced"]["gemm_tile_4x6x8"]["from"])
    entry = checkpoint["reduced"]["gemm_tile_4x6x8"]
    assert len(best.genes) >= 2 and entry["noise"] == 0.005
    assert len(Genome.from_json(entry["genome"]).genes) == 1, entry  # one gene is the worth
    assert entry["within_noise"] and set(entry["within_noise"]) <= set(entry["dropped"])
    assert "of the best's time without them" in (out / "report.md").read_text()


def _no_confirm(tmp_path):
    config = tmp_path / "evo.toml"
    config.write_text("[run]\nconfirm = false\n")
    return config
