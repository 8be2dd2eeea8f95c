"""Fast-math, Hopper cache-hint and loop-unrolling genes (genomes/transforms/).

Each gene on small handwritten PTX and on suite kernels: the expected opcodes, a no-op where
it must not apply, and real ptxas (sm_90) accepting every variant. Genes that must not
change results (cache hints, nounroll, unroll) are checked on the GPU too (marked ``gpu``).
"""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import KERNEL_DIR, needs_ptxas
from genomes import ptx
from genomes.genome import apply_genome, parse_inline
from genomes.transforms import registry

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n\n"

MATH = HEAD + """.visible .entry math(.param .u64 math_in, .param .u64 math_out)
{
	.reg .pred 	%p<4>;
	.reg .f32 	%f<40>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<6>;
	ld.param.u64 	%rd1, [math_in];
	ld.param.u64 	%rd2, [math_out];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.f32 	%f1, [%rd3];
	ld.global.f32 	%f2, [%rd3+4];
	div.rn.f32 	%f3, %f1, %f2;
	div.full.f32 	%f4, %f1, %f2;
	div.rn.f32 	%f5, 0f3F800000, %f2;
	rcp.rn.f32 	%f6, %f1;
	sqrt.rn.f32 	%f7, %f1;
	sqrt.rn.f32 	%f8, %f2;
	rcp.rn.f32 	%f9, %f8;
	sqrt.rn.f32 	%f10, %f1;
	div.rn.f32 	%f11, %f2, %f10;
	ex2.approx.f32 	%f12, %f1;
	mul.f32 	%f13, %f1, %f2;
	add.f32 	%f14, %f13, %f3;
	mul.rn.f32 	%f15, %f2, %f2;
	add.rn.f32 	%f16, %f4, %f15;
	mul.f32 	%f17, %f1, %f1;
	sub.f32 	%f18, %f17, 0f3F800000;
	setp.lt.and.f32 	%p1, %f1, %f2, %p2;
	cvt.sat.f32.f32 	%f19, %f18;
	min.f32 	%f20, %f19, %f16;
	selp.f32 	%f21, %f20, %f14, %p1;
	add.f32 	%f22, %f21, %f3;
	add.f32 	%f23, %f22, %f5;
	add.f32 	%f24, %f23, %f6;
	add.f32 	%f25, %f24, %f7;
	add.f32 	%f26, %f25, %f9;
	add.f32 	%f27, %f26, %f11;
	add.f32 	%f28, %f27, %f12;
	st.global.f32 	[%rd4], %f28;
	ret;
}
"""

INTS = HEAD + """.visible .entry ints(.param .u64 ints_out, .param .u32 ints_n)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [ints_out];
	ld.param.u32 	%r1, [ints_n];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r2, %tid.x;
	div.u32 	%r3, %r1, %r2;
	rem.u32 	%r4, %r1, %r2;
	mul.lo.s32 	%r5, %r3, %r4;
	add.s32 	%r6, %r5, %r1;
	setp.lt.s32 	%p1, %r6, 0;
	selp.b32 	%r7, 1, %r6, %p1;
	st.shared.u32 	[%r2], %r7;
	ret;
}
"""

MEMORY = HEAD + """.visible .entry mem(.param .u64 mem_a, .param .u64 mem_b, .param .u64 mem_c)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<8>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<8>;
	.shared .align 4 .b8 scratch[64];
	ld.param.u64 	%rd1, [mem_a];
	ld.param.u64 	%rd2, [mem_b];
	ld.param.u64 	%rd3, [mem_c];
	cvta.to.global.u64 	%rd4, %rd1;
	cvta.to.global.u64 	%rd5, %rd2;
	cvta.to.global.u64 	%rd6, %rd3;
	mov.u32 	%r1, %tid.x;
	setp.eq.u32 	%p1, %r1, 0;
	ld.global.f32 	%f1, [%rd4];
	ld.global.cs.f32 	%f2, [%rd4+4];
	ld.global.nc.f32 	%f3, [%rd5];
	ld.volatile.global.f32 	%f4, [%rd5+4];
	ld.shared.f32 	%f5, [scratch];
	@%p1 ld.global.b32 { %r2 }, [ %rd4 + 8 ];
	add.f32 	%f6, %f1, %f2;
	add.f32 	%f7, %f3, %f4;
	add.f32 	%f6, %f6, %f7;
	add.f32 	%f6, %f6, %f5;
	st.global.f32 	[%rd6], %f6;
	st.global.wt.f32 	[%rd6+4], %f1;
	st.volatile.global.f32 	[%rd6+8], %f2;
	@%p1 st.global.b32 [ %rd6 + 12 ], { %r2 };
	ret;
}
"""

# A grid-stride sum as nvcc writes it: an entry guard, then a do-while loop.
LOOP = HEAD + """.visible .entry gsum(.param .u64 gsum_in, .param .u64 gsum_out, .param .u32 gsum_n)
{
	.reg .pred 	%p<3>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<8>;
	ld.param.u64 	%rd1, [gsum_in];
	ld.param.u64 	%rd2, [gsum_out];
	ld.param.u32 	%r2, [gsum_n];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r1, %tid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %r1;
	mov.f32 	%f1, 0f00000000;
	setp.ge.u32 	%p1, %r4, %r2;
	@%p1 bra 	$L__gsum_done;

$L__gsum_loop:
	mul.wide.u32 	%rd5, %r4, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.f32 	%f2, [%rd6];
	fma.rn.f32 	%f1, %f2, %f2, %f1;
	add.s32 	%r4, %r4, %r3;
	setp.lt.u32 	%p2, %r4, %r2;
	@%p2 bra 	$L__gsum_loop;

$L__gsum_done:
	mul.wide.u32 	%rd5, %r1, 4;
	add.s64 	%rd7, %rd4, %rd5;
	st.global.f32 	[%rd7], %f1;
	ret;
}
"""

# Every thread sums the first 64 floats: ptxas unrolls that loop on its own, unless told not to.
CONST_LOOP = (LOOP.replace("mov.u32 \t%r4, %r1;", "mov.u32 \t%r4, 0;")
              .replace("mov.u32 \t%r3, %ntid.x;", "mov.u32 \t%r3, 1;")
              .replace("setp.lt.u32 \t%p2, %r4, %r2;", "setp.lt.u32 \t%p2, %r4, 64;"))

OWN_GROUP = ("fast_div", "fast_rcp", "fast_sqrt", "fast_rsqrt", "fast_exp", "ftz", "contract",
             "ld_prefetch_size", "l2_policy")
NEW_GENES = {**{name: name for name in OWN_GROUP}, "ld_evict": "ld_cache",
             "st_evict": "st_cache", "nounroll": "unroll", "unroll": "unroll"}


def suite(name: str) -> str:
    return (KERNEL_DIR / f"{name}.ptx").read_text()


def run(text: str, genome: str):
    """(variant PTX, outcomes) of an inline genome on PTX text."""
    applied = apply_genome(ptx.parse(text), parse_inline(genome))
    return applied.ptx, applied.outcomes


def changes(text: str, gene: str) -> int:
    out, outcomes = run(text, gene)
    (o,) = outcomes
    assert o.status in ("applied", "no-op"), o.detail
    assert (o.status == "applied") == (out != text)
    return o.changes


def opcodes(text: str) -> Counter:
    """Opcode counts of every instruction in every function."""
    return Counter(ins.opcode for fn in ptx.parse(text).functions for ins in fn.instructions())


def lines_with(text: str, needle: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if needle in ln]


def assert_assembles(*texts: str) -> None:
    from harness.compile import compile_many

    failed = [r.error for r in compile_many(list(texts)) if not r.ok]
    assert not failed, failed[0]


def test_the_genes_are_registered_in_their_groups():
    table = registry()
    for name, group in NEW_GENES.items():
        assert table[name].group == group, name
        assert table[name].summary and table[name].applies_when


# ------------------------------------------------------------------------- fast math


@needs_ptxas
def test_fast_div_modes():
    out, _ = run(MATH, "fast_div(mode=approx)")
    ops = opcodes(out)
    assert ops["div.approx.f32"] == 4 and not ops["div.rn.f32"] and not ops["div.full.f32"]
    out_full, _ = run(MATH, "fast_div(mode=full)")
    assert opcodes(out_full)["div.full.f32"] == 4
    tri, _ = run(suite("triton_softmax"), "fast_div(mode=approx)")
    assert opcodes(tri)["div.approx.f32"] == 8
    assert changes(suite("triton_softmax"), "fast_div(mode=full)") == 0  # already .full
    assert changes(suite("layernorm"), "fast_div(mode=approx)") == 2
    assert_assembles(out, out_full, tri)


@needs_ptxas
def test_fast_rcp_sqrt_rsqrt():
    rcp, _ = run(MATH, "fast_rcp")
    ops = opcodes(rcp)
    assert ops["rcp.approx.f32"] == 3 and not ops["rcp.rn.f32"]  # two rcp.rn and 1.0/x
    assert "rcp.approx.f32 \t%f5, %f2;" in rcp
    sqrt, _ = run(MATH, "fast_sqrt")
    assert opcodes(sqrt)["sqrt.approx.f32"] == 3
    rsq, _ = run(MATH, "fast_rsqrt")
    assert opcodes(rsq)["rsqrt.approx.f32"] == 2  # 1/sqrt and a/sqrt; %f7 feeds an add
    assert "mov.f32 \t%f9, %f8;" in rsq and "mul.f32 \t%f11, %f2, %f10;" in rsq
    assert "sqrt.rn.f32 \t%f7, %f1;" in rsq
    assert changes(suite("softmax"), "fast_rcp") == 1
    twice = MATH.replace("add.f32 \t%f26, %f25, %f9;", "add.f32 \t%f26, %f25, %f8;")
    assert "sqrt.rn.f32 \t%f8, %f2;" in run(twice, "fast_rsqrt")[0]  # %f8 read twice now
    assert_assembles(rcp, sqrt, rsq)


@needs_ptxas
def test_ftz_scopes():
    approx, _ = run(MATH, "ftz(scope=approx)")
    assert opcodes(approx)["ex2.approx.ftz.f32"] == 1 and opcodes(approx)["div.full.ftz.f32"] == 1
    assert "add.ftz.f32" not in approx
    every, _ = run(MATH, "ftz(scope=all)")
    ops = opcodes(every)
    for op in ("div.rn.ftz.f32", "add.rn.ftz.f32", "setp.lt.and.ftz.f32", "cvt.ftz.sat.f32.f32",
               "min.ftz.f32", "sub.ftz.f32", "mul.ftz.f32", "sqrt.rn.ftz.f32"):
        assert ops[op], op
    assert ops["selp.f32"] == 1  # selp takes no .ftz
    tri, _ = run(suite("triton_softmax"), "ftz(scope=approx)")
    assert opcodes(tri)["ex2.approx.ftz.f32"] == 8 and opcodes(tri)["div.full.ftz.f32"] == 8
    assert_assembles(approx, every, tri)


@needs_ptxas
def test_contract_fuses_single_use_products():
    out, outcomes = run(MATH, "contract(mode=fuse)")
    assert outcomes[0].changes == 3
    assert "fma.rn.f32 \t%f14, %f1, %f2, %f3;" in out
    assert "fma.rn.f32 \t%f16, %f2, %f2, %f4;" in out
    assert "fma.rn.f32 \t%f18, %f1, %f1, 0fBF800000;" in out  # the sub's immediate negated
    assert not lines_with(out, "mul")
    relaxed, _ = run(MATH, "contract(mode=relax)")
    assert "mul.f32 \t%f15, %f2, %f2;" in relaxed and "add.f32 \t%f16, %f4, %f15;" in relaxed
    assert_assembles(out, relaxed)


def test_contract_leaves_shared_products_and_other_blocks_alone():
    shared = MATH.replace("add.f32 \t%f22, %f21, %f3;", "add.f32 \t%f22, %f21, %f13;")
    out, _ = run(shared, "contract(mode=fuse)")
    assert "mul.f32 \t%f13, %f1, %f2;" in out  # %f13 read twice now
    split = MATH.replace("\tadd.f32 \t%f14,", "$L__x:\n\tadd.f32 \t%f14,")
    out, _ = run(split, "contract(mode=fuse)")
    assert "mul.f32 \t%f13, %f1, %f2;" in out  # product and add in different blocks
    moved = MATH.replace("\tadd.f32 \t%f14,", "\tmov.f32 \t%f1, 0f00000000;\n\tadd.f32 \t%f14,")
    out, _ = run(moved, "contract(mode=fuse)")
    assert "mul.f32 \t%f13, %f1, %f2;" in out  # a factor is overwritten in between


@needs_ptxas
def test_fast_exp_replaces_nvcc_expf():
    out, outcomes = run(suite("softmax"), "fast_exp")
    assert outcomes[0].changes == 2
    assert "mul.f32 \t%f55, %f42, 0f3FB8AA3B;" in out
    assert "add.f32 \t%f101, %f57, %f101;" in out  # acc += e * 2^n  ->  acc += e
    assert "mov.f32 \t%f95, %f94;" in out
    for name in ("attention", "cross_entropy"):
        assert changes(suite(name), "fast_exp") == 1
    assert changes(suite("gelu"), "fast_exp") == 0  # tanhf's ex2 is not an expf chain
    assert changes(suite("triton_softmax"), "fast_exp") == 0
    broken = suite("softmax").replace("mov.f32 \t%f54, 0f32A57060;", "mov.f32 \t%f54, 0f32A57061;")
    assert changes(broken, "fast_exp") == 1  # only the second expf still matches
    assert_assembles(out)


@pytest.mark.parametrize("gene", ["fast_div", "fast_div(mode=full)", "fast_rcp", "fast_sqrt",
                                  "fast_rsqrt", "fast_exp", "ftz(scope=approx)", "ftz(scope=all)",
                                  "contract(mode=fuse)", "contract(mode=relax)"])
def test_fast_math_is_a_no_op_on_integer_code(gene):
    assert changes(INTS, gene) == 0
    assert changes(suite("embedding_gather"), gene) == 0  # div.u32 and f32 loads/stores only
    assert changes(suite("gemm_tile_4x4x4"), gene) == 0 or gene.startswith("ftz(scope=all")


# ------------------------------------------------------------------------- cache hints


@needs_ptxas
def test_ld_evict_sets_the_l1_priority():
    out, outcomes = run(MEMORY, "ld_evict(priority=evict_last)")
    assert outcomes[0].changes == 4
    assert "ld.global.L1::evict_last.f32 \t%f1, [%rd4];" in out
    assert "ld.global.L1::evict_last.f32 \t%f2, [%rd4+4];" in out  # .cs replaced
    assert "ld.global.nc.L1::evict_last.f32 \t%f3, [%rd5];" in out  # .nc kept
    assert "@%p1 ld.global.L1::evict_last.b32 \t{ %r2 }, [ %rd4 + 8 ];" in out
    assert "ld.volatile.global.f32 \t%f4, [%rd5+4];" in out
    assert "ld.shared.f32 \t%f5, [scratch];" in out
    assert "st.global.f32 \t[%rd6], %f6;" in out
    assert changes(out, "ld_evict(priority=evict_last)") == 0
    assert_assembles(out)


@needs_ptxas
def test_st_evict_and_prefetch_size():
    st, outcomes = run(MEMORY, "st_evict(priority=no_allocate)")
    assert outcomes[0].changes == 3
    assert "st.global.L1::no_allocate.f32 \t[%rd6+4], %f1;" in st  # .wt replaced
    assert "st.volatile.global.f32 \t[%rd6+8], %f2;" in st
    size, outcomes = run(MEMORY, "ld_prefetch_size(size=256B)")
    assert outcomes[0].changes == 4
    assert "ld.global.cs.L2::256B.f32 \t%f2, [%rd4+4];" in size
    assert "ld.global.nc.L2::256B.f32 \t%f3, [%rd5];" in size
    resized, _ = run(size, "ld_prefetch_size(size=64B)")
    assert "L2::256B" not in resized and len(lines_with(resized, "L2::64B")) == 4
    assert_assembles(st, size, resized)


@needs_ptxas
def test_l2_policy_adds_one_policy_per_function():
    out, outcomes = run(MEMORY, "l2_policy(priority=evict_first,on=all)")
    assert outcomes[0].changes == 7  # 4 weak loads, 3 weak stores
    assert lines_with(out, "createpolicy") == [
        "createpolicy.fractional.L2::evict_first.b64 \t%evo_l2pol, 1.0;"]
    assert ".reg .b64 \t%evo_l2pol;" in out
    assert "ld.global.cs.L2::cache_hint.f32 \t%f2, [%rd4+4], %evo_l2pol;" in out
    assert "st.global.wt.L2::cache_hint.f32 \t[%rd6+4], %f1, %evo_l2pol;" in out
    assert "@%p1 ld.global.L2::cache_hint.b32 \t{ %r2 }, [ %rd4 + 8 ], %evo_l2pol;" in out
    assert "ld.volatile.global.f32 \t%f4, [%rd5+4];" in out
    loads_only, outcomes = run(MEMORY, "l2_policy(on=ld)")
    assert outcomes[0].changes == 4 and "st.global.f32 \t[%rd6], %f6;" in loads_only
    assert changes(INTS, "l2_policy(on=all)") == 0  # no global access: no policy either
    assert_assembles(out, loads_only)


GEMM = "gemm_tile_4x4x4"


@needs_ptxas
@pytest.mark.parametrize("genome, statuses", [
    ("cache_ld(policy=cs),ld_evict(priority=evict_last)", ["replaced", "applied"]),
    ("ld_evict(priority=evict_last),cache_ld(policy=cs)", ["replaced", "applied"]),
    ("cache_st(policy=cs),st_evict(priority=evict_first)", ["replaced", "applied"]),
    ("ld_prefetch_size(size=128B),cache_ld(policy=cs)", ["applied", "no-op"]),
    ("cache_ld(policy=cs),ld_prefetch_size(size=128B)", ["applied", "applied"]),
    ("cache_ld(policy=nc),l2_policy(on=ld),ld_prefetch_size(size=256B)",
     ["applied", "applied", "applied"]),
    ("l2_policy(on=all),vec_ld(width=4),vec_st(width=4)", ["applied", "no-op", "no-op"]),
    ("vec_ld(width=4),vec_st(width=4),l2_policy(on=all),ld_evict(priority=no_allocate),"
     "st_evict(priority=evict_last),ld_prefetch_size(size=64B)", ["applied"] * 6),
    ("l2_policy(on=ld),split_ld,prefetch(level=L2),reorder(strategy=loads_first)",
     ["applied", "no-op", "applied", "applied"]),
])
def test_cache_hints_combine_or_give_way(genome, statuses):
    out, outcomes = run(suite(GEMM), genome)
    assert [o.status for o in outcomes] == statuses, [(str(o.gene), o.status) for o in outcomes]
    assert_assembles(out)


def test_combined_hints_are_in_grammar_order():
    out, _ = run(suite(GEMM), "vec_ld(width=4),cache_ld(policy=nc),l2_policy(on=ld),"
                              "ld_prefetch_size(size=256B)")
    loads = lines_with(out, "ld.global")
    assert loads and all(ln.startswith("ld.global.nc.L2::cache_hint.L2::256B.") for ln in loads)


# ------------------------------------------------------------------------- loops


@needs_ptxas
def test_nounroll_marks_every_loop_header():
    out, outcomes = run(LOOP, "nounroll")
    assert outcomes[0].changes == 1
    assert '$L__gsum_loop:\n\t.pragma "nounroll";\n\tmul.wide.u32' in out
    assert changes(out, "nounroll") == 0  # already marked
    assert changes(suite("softmax"), "nounroll") == 3
    assert changes(suite(GEMM), "nounroll") == 0  # fully unrolled: no loop
    assert_assembles(out)


@needs_ptxas
def test_nounroll_stops_ptxas_unrolling():
    from harness.compile import compile_many
    from harness.sass import disassemble, opcode_histogram

    out, _ = run(CONST_LOOP, "nounroll")
    base, variant = compile_many([CONST_LOOP, out])
    sass = [disassemble(r.cubin) for r in (base, variant)]
    if None in sass:
        pytest.skip("no cuobjdump/nvdisasm to read SASS")
    loads = [opcode_histogram(s)["LDG"] for s in sass]
    assert loads[1] == 1 < loads[0], loads


@needs_ptxas
@pytest.mark.parametrize("factor", [2, 4])
def test_unroll_counted_loop(factor):
    out, outcomes = run(LOOP, f"unroll(factor={factor})")
    assert outcomes[0].changes == 1
    assert len(lines_with(out, "ld.global.f32")) == factor + 1  # factor copies + remainder
    assert len(lines_with(out, "@%p2 bra")) == 2  # the exit tests between copies are gone
    assert len(lines_with(out, "setp.lt.u32 \t%evo_uq0_")) == factor - 1
    assert lines_with(out, "@!%evo_u")[0].endswith("bra \t$L__evo_u0_rem;")
    assert "$L__evo_u0_rem:" in out and "$L__evo_u0_exit:" in out
    assert changes(suite("softmax"), f"unroll(factor={factor})") == 3
    assert_assembles(out)


FMA = "fma.rn.f32 \t%f1, %f2, %f2, %f1;"


@pytest.mark.parametrize("edit", [
    (FMA, FMA + "\n\tbar.sync \t0;"),
    (FMA, FMA + "\n\tadd.s32 \t%r2, %r2, 1;"),
    (FMA, FMA + "\n\tadd.s32 \t%r3, %r3, 1;"),
    ("add.s32 \t%r4, %r4, %r3;\n\tsetp.lt.u32 \t%p2, %r4, %r2;",
     "setp.lt.u32 \t%p2, %r4, %r2;\n\tadd.s32 \t%r4, %r4, %r3;"),
    ("@%p2 bra \t$L__gsum_loop;", "@!%p2 bra \t$L__gsum_loop;"),
    ("$L__gsum_loop:\n", '$L__gsum_loop:\n\t.pragma "nounroll";\n'),
    ("ld.global.f32 \t%f2, [%rd6];", "ld.global.f32 \t%f2, [%rd6];\n$L__inner:"),
], ids=["barrier", "bound-written", "step-written", "test-before-step", "negated-branch",
        "nounroll-pragma", "two-blocks"])
def test_unroll_refuses_loops_it_cannot_prove(edit):
    old, new = edit
    assert old in LOOP
    assert changes(LOOP.replace(old, new), "unroll(factor=2)") == 0


# ------------------------------------------------------------------------- on the GPU


def _gsum(text: str, n: int, threads: int):
    """Run the grid-stride sum ``text`` (LOOP or a variant) on n random floats."""
    import tempfile
    from pathlib import Path

    import cupy

    from harness.compile import compile_ptx

    result = compile_ptx(text)
    assert result.ok, result.error
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "gsum.cubin")
        path.write_bytes(result.cubin)
        kernel = cupy.RawModule(path=str(path)).get_function("gsum")
        data = cupy.random.default_rng(n).standard_normal(max(n, 1), dtype=cupy.float32)
        out = cupy.full(threads, cupy.nan, dtype=cupy.float32)
        kernel((1,), (threads,), (data, out, cupy.uint32(n)))
        return cupy.asnumpy(out)


@pytest.mark.gpu
@pytest.mark.parametrize("factor", [2, 4])
def test_unrolled_loop_gives_bitwise_the_same_sums(factor):
    import numpy as np

    unrolled, _ = run(LOOP, f"unroll(factor={factor})")
    for n in (0, 1, 31, 32, 33, 95, 100, 127, 128, 129, 1000, 4099):
        for threads in (1, 32, 96):
            want, got = _gsum(LOOP, n, threads), _gsum(unrolled, n, threads)
            assert np.array_equal(want, got, equal_nan=True), (n, threads)


@pytest.fixture(scope="module")
def worker():
    from harness.gpu.worker import GpuWorker

    with GpuWorker(0) as w:
        yield w


def _measure(worker, name: str, text: str):
    """The gate's verdict (and timing) on variant ``text`` of suite kernel ``name``."""
    from harness.compile import compile_ptx
    from harness.gpu.instrument import instrument
    from harness.kernels.suite import find_kernel
    from harness.gpu.worker import MeasureRequest

    spec = find_kernel(name)

    def cubin(t: str) -> bytes:
        r = compile_ptx(t)
        assert r.ok, r.error
        return r.cubin

    clock = cubin(instrument(text, spec.entry)) if spec.timing == "clock64" else None
    return worker.measure(MeasureRequest(spec=spec, cubin=cubin(text),
                                         baseline_cubin=cubin(spec.ptx_text()),
                                         clock_cubin=clock, check_seeds=(1, 2, 3, 4, 5),
                                         timing_seed=99, timeout_s=30.0))


# Genes that must not change any result: the gate must accept them wherever they apply.
EXACT_GENES = ["ld_evict(priority=evict_first)", "st_evict(priority=no_allocate)",
               "ld_prefetch_size(size=256B)", "l2_policy(priority=evict_last,on=all)",
               "nounroll", "unroll(factor=2)", "unroll(factor=4)"]


@pytest.mark.gpu
@pytest.mark.parametrize("gene", EXACT_GENES)
@pytest.mark.parametrize("name", ["softmax", "layernorm", "cross_entropy", "triton_softmax",
                                  "saxpy", GEMM])
def test_exact_genes_pass_the_gate_on_the_gpu(worker, name, gene):
    text, outcomes = run(suite(name), gene)
    if outcomes[0].status != "applied":
        pytest.skip(f"{gene} does not apply to {name}")
    m = _measure(worker, name, text)
    assert m.valid, m.reason
