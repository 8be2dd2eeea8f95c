"""Genes, genomes, JSON, inline syntax, conflict groups, and applying to PTX."""

from __future__ import annotations

import json

import pytest

from conftest import KERNEL_DIR
from genomes import ptx
from genomes.errors import GenomeFormatError, UnknownTransformError
from genomes.genome import Gene, Genome, apply_genome, load_genome, parse_inline

GEMM = (KERNEL_DIR / "gemm_tile_4x6x8.ptx").read_text()


def test_inline_and_json_round_trip(tmp_path):
    g = parse_inline("vec_ld(width=2), cache_cs ,maxnreg(96),reorder(strategy=loads_first)")
    assert [str(x) for x in g.genes] == ["vec_ld(width=2)", "cache_ld(policy=cs)",
                                         "maxnreg(n=96)", "reorder(strategy=loads_first)"]
    assert Genome.from_json(json.loads(g.dumps())) == g
    path = tmp_path / "g.json"
    path.write_text(g.dumps())
    assert load_genome(str(path)) == g
    assert load_genome(g.dumps()) == g
    assert load_genome("[]") == Genome()


def test_defaults_fill_in_so_equal_genes_compare_equal():
    assert Gene.make("maxnreg") == Gene.make("maxnreg", n="128")
    assert Gene.make("cache_cs") == Gene.make("cache_ld", policy="cs")


@pytest.mark.parametrize("text,needle", [
    ("vec_lld", "unknown transform 'vec_lld' (did you mean 'vec_ld'?)"),
    ("maxnreg(n=7)", "n must be in 16..255"),
    ("maxnreg(n=abc)", "must be an integer"),
    ("cache_ld(policy=zz)", "policy must be one of"),
    ("maxnreg(q=1)", "no parameter 'q'"),
])
def test_bad_genes_are_one_line_errors(text, needle):
    with pytest.raises((GenomeFormatError, UnknownTransformError)) as err:
        parse_inline(text)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bad_genome_files(tmp_path):
    with pytest.raises(GenomeFormatError, match="not found"):
        load_genome(str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(GenomeFormatError, match="not JSON"):
        load_genome(str(bad))
    with pytest.raises(GenomeFormatError):
        Genome.from_json({"genes": [42]})


def test_conflict_group_last_gene_wins():
    g = parse_inline("maxnreg(n=64),cache_cg,maxnreg(n=128),cache_cs")
    assert [str(x) for x in g.effective().genes] == ["maxnreg(n=128)", "cache_ld(policy=cs)"]
    applied = apply_genome(GEMM, g)
    assert [o.status for o in applied.outcomes] == ["replaced", "replaced", "applied", "applied"]
    fn = ptx.parse(applied.ptx).entry()
    assert fn.maxnreg == 128
    loads = [i for i in fn.instructions() if i.op == "ld" and i.space == "global"]
    assert loads and all(i.opcode.startswith("ld.global.cs.") for i in loads)


def test_empty_genome_is_the_baseline_byte_for_byte():
    assert apply_genome(GEMM, Genome()).ptx == GEMM


def test_no_change_is_recorded_as_no_op():
    once = apply_genome(GEMM, parse_inline("maxnreg(n=100)")).ptx
    again = apply_genome(once, parse_inline("maxnreg(n=100)"))
    assert again.outcomes[0].status == "no-op" and again.ptx == once


def test_maxnreg_appears_as_directive_and_replaces_existing():
    out = apply_genome(GEMM, parse_inline("maxnreg(n=40)")).ptx
    out = apply_genome(out, parse_inline("maxnreg(n=200)")).ptx
    assert out.count(".maxnreg") == 1 and ".maxnreg 200" in out
    assert ptx.parse(out).entry().maxnreg == 200


def test_store_policy_changes_only_global_stores():
    out = apply_genome(GEMM, parse_inline("st_cache_wt")).ptx
    stores = [i for i in ptx.parse(out).entry().instructions() if i.op == "st"]
    assert stores and all(i.opcode == "st.global.wt.f32" for i in stores)
