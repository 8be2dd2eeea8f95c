"""ptxas options as genes: carried in the PTX as allow-listed comment lines, read by
harness.compile, one line per option."""

from __future__ import annotations

from conftest import needs_ptxas
from genomes.genome import apply_genome, parse_inline
from genomes.ptxas_flags import flags_in
from harness.compile import compile_ptx
from harness.kernels.suite import find_kernel


def test_flags_are_read_from_the_ptx_and_only_allowed_ones():
    text = ("// evo-ptxas: --opt-level=1\n// evo-ptxas: --fmad=false\n"
            "// evo-ptxas: --output-file=/etc/passwd\n// evo-ptxas: --opt-level=9\n.version 8.0\n")
    assert flags_in(text) == ["--opt-level=1", "--fmad=false"]


def test_a_later_gene_of_an_option_replaces_its_line():
    base = find_kernel("gemm_tile_4x4x4").ptx_text()
    applied = apply_genome(base, parse_inline("ptxas_opt(level=1),ptxas_nofmad,ptxas_opt(0)"))
    assert [o.status for o in applied.outcomes] == ["replaced", "applied", "applied"]
    assert flags_in(applied.ptx) == ["--opt-level=0", "--fmad=false"] or \
        flags_in(applied.ptx) == ["--fmad=false", "--opt-level=0"]
    twice = apply_genome(applied.ptx, parse_inline("ptxas_nofmad"))
    assert twice.outcomes[0].status == "no-op" and twice.ptx == applied.ptx


@needs_ptxas
def test_the_options_reach_ptxas():
    base = find_kernel("gemm_tile_8x8x8").ptx_text()
    plain = compile_ptx(base)
    slow = compile_ptx(apply_genome(base, parse_inline("ptxas_opt(level=0)")).ptx)
    assert plain.ok and slow.ok
    assert slow.args[-1] == "--opt-level=0"
    assert slow.registers != plain.registers  # -O0 allocates registers very differently
