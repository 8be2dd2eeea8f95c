"""Genes that change the launch (``block``, ``coarsen``): where they apply, what they make,
that it assembles, and that the launch travels with the variant through the pipeline.

Besides the suite, the kernels of tests/data/unseen (CUDA C written for these tests, PTX
written by nvcc) are kernels the genes were not made for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import Genome, apply_genome, parse_inline
from genomes.launch import Launch
from harness.compile import compile_many
from harness.evaluate import Evaluator
from harness.backends.static import StaticBackend
from harness.kernels.spec import load_spec
from harness.kernels.suite import find_kernel, list_kernels

UNSEEN = Path(__file__).parent / "data" / "unseen"
ELEMENTWISE = ("relu", "gelu", "saxpy", "batchnorm_infer", "embedding_gather")
GENOMES = [f"coarsen(k={k},form={f})" for k in (2, 4, 8) for f in ("contiguous", "strided")] + \
          [f"block(threads={n})" for n in (64, 128, 512, 1024)]


def _apply(spec, genome: str):
    return apply_genome(spec.ptx_text(), parse_inline(genome), spec.launch)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_block_keeps_the_threads_and_the_ptx(name):
    spec = find_kernel(name)
    applied = _apply(spec, "block(threads=512)")
    assert applied.outcomes[0].status == "applied"
    assert applied.ptx == spec.ptx_text()
    assert applied.launch.block == (512, 1, 1)
    assert applied.launch.threads == spec.launch.threads


@pytest.mark.parametrize("name,why", [
    ("softmax", "shfl"), ("reduce_sum", "shared memory"), ("transpose", "one-dimensional"),
    ("triton_add", ".reqntid"), ("gemm_tile_4x4x4", "no global index")])
def test_launch_genes_are_no_ops_with_a_reason_where_threads_cooperate(name, why):
    spec = find_kernel(name)
    for genome in ("block(threads=512)", "coarsen(k=4)"):
        outcome = _apply(spec, genome).outcomes[0]
        assert outcome.status == "no-op" and why in outcome.detail, outcome


def test_without_a_launch_launch_genes_are_no_ops():
    applied = apply_genome(find_kernel("relu").ptx_text(), parse_inline("coarsen(k=4),block(128)"))
    assert [o.status for o in applied.outcomes] == ["no-op", "no-op"]
    assert applied.launch is None


def test_block_needs_a_divisor_and_respects_maxntid():
    spec = find_kernel("relu")
    odd = Launch((3, 1, 1), (256, 1, 1))
    assert "does not divide" in apply_genome(spec.ptx_text(), parse_inline("block(512)"),
                                             odd).outcomes[0].detail
    capped = spec.ptx_text().replace(")\n{", ")\n.maxntid 256, 1, 1\n{", 1)
    assert ".maxntid" in capped
    outcome = apply_genome(capped, parse_inline("block(512)"), spec.launch).outcomes[0]
    assert outcome.status == "no-op" and ".maxntid" in outcome.detail


def test_contiguous_coarsening_makes_wide_accesses_and_a_smaller_grid():
    spec = find_kernel("relu")
    applied = _apply(spec, "coarsen(k=4)")
    assert applied.launch == spec.launch.with_shape((1024, 1, 1), (256, 1, 1))
    ops = [i.opcode for i in ptx.parse(applied.ptx).entry().instructions()]
    assert ops.count("ld.global.v4.f32") == 1 and ops.count("st.global.v4.f32") == 1
    # the slow path (some copy out of bounds) keeps one scalar access per copy
    assert ops.count("ld.global.f32") == 4 and ops.count("st.global.f32") == 4
    eight = ptx.parse(_apply(spec, "coarsen(k=8)").ptx).entry().instructions()
    assert [i.opcode for i in eight].count("ld.global.v4.f32") == 2


def test_strided_coarsening_steps_by_the_whole_launch():
    applied = _apply(find_kernel("gelu"), "coarsen(k=2,form=strided)")
    text = applied.ptx
    assert "%nctaid.x" in text and "ld.global.v" not in text
    assert applied.launch.grid == (2048, 1, 1)


def test_coarsening_a_kernel_without_bounds_check_needs_a_divisor():
    spec = load_spec(UNSEEN / "add_one_unguarded.toml")
    assert _apply(spec, "coarsen(k=8)").outcomes[0].status == "applied"
    odd = Launch((4095, 1, 1), (256, 1, 1), spec.entry)
    outcome = apply_genome(spec.ptx_text(), parse_inline("coarsen(k=8)"), odd).outcomes[0]
    assert outcome.status == "no-op" and "divide" in outcome.detail


def test_unseen_kernels_shapes_the_genes_do_not_reach_are_no_ops():
    module = ptx.parse((UNSEEN / "kernels.ptx").read_text())
    launch = Launch((4096, 1, 1), (256, 1, 1), "grid_stride_copy")
    outcome = apply_genome(module, parse_inline("coarsen(k=4)"), launch).outcomes[0]
    assert outcome.status == "no-op" and "%nctaid" in outcome.detail, outcome


def test_an_if_else_body_is_predicated_then_coarsened():
    # if (v > 0) y[i] = sqrtf(v); else y[i] = 0;  (session 9: "not straight-line")
    module = ptx.parse((UNSEEN / "kernels.ptx").read_text())
    launch = Launch((4096, 1, 1), (256, 1, 1), "sqrt_or_zero")
    applied = apply_genome(module, parse_inline("coarsen(k=4)"), launch)
    assert applied.outcomes[0].status == "applied", applied.outcomes[0]
    entry = applied.ptx[applied.ptx.index(".entry sqrt_or_zero"):]
    assert "ld.global.v4.f32" in entry[:entry.index("\n}")]


def test_a_64_bit_global_index_is_coarsened_in_64_bits():
    module = ptx.parse((UNSEEN / "kernels.ptx").read_text())
    launch = Launch((4096, 1, 1), (256, 1, 1), "scale_size_t")  # size_t i = ...
    # the copies' indices are 64-bit, G*4 + j or G + j*T with T widened: none wraps at 2^32
    for form, index in (("contiguous", "mul.lo.s64 \t%evc_b64_0, %rd1, 4"),
                        ("strided", "mul.wide.u32 \t%evc_b64_4, %evc_b32_0, %evc_b32_1")):
        applied = apply_genome(module, parse_inline(f"coarsen(k=4,form={form})"), launch)
        assert applied.outcomes[0].status == "applied", applied.outcomes[0]
        entry = applied.ptx[applied.ptx.index(".entry scale_size_t"):]
        entry = entry[:entry.index("\n}")]
        assert index in entry and applied.launch.grid == (1024, 1, 1)
        assert ("ld.global.v2.f64" in entry) == (form == "contiguous")


def _cases():
    specs = [s for s in list_kernels() if not s.name.startswith("gemm")]
    specs += [load_spec(p) for p in sorted(UNSEEN.glob("*.toml"))]
    return specs


@needs_ptxas
def test_every_launch_gene_on_every_kernel_is_a_no_op_or_assembles():
    variants, labels = [], []
    for spec in _cases():
        for genome in GENOMES:
            applied = _apply(spec, genome)
            outcome = applied.outcomes[0]
            assert outcome.status in ("applied", "no-op"), (spec.name, genome, outcome)
            if outcome.status == "applied" and applied.ptx != spec.ptx_text():
                variants.append(applied.ptx)
                labels.append(f"{spec.name} {genome}")
    assert len(labels) >= 40  # 5 suite kernels + 4 unseen ones, 6 coarsenings each
    failures = [f"{label}: {r.error}" for label, r in zip(labels, compile_many(variants))
                if not r.ok]
    assert not failures, "\n".join(failures)


@needs_ptxas
def test_coarsened_genomes_stack_with_other_genes():
    spec = find_kernel("saxpy")
    genome = "cache_ld(policy=cs),coarsen(k=4),block(threads=128),st_cache_cs"
    applied = _apply(spec, genome)
    assert [o.status for o in applied.outcomes] == ["applied"] * 4
    assert applied.launch.grid == (2048, 1, 1) and applied.launch.block == (128, 1, 1)
    assert compile_many([applied.ptx])[0].ok


@needs_ptxas
def test_the_launch_is_part_of_the_variant_key_and_its_notes():
    spec = find_kernel("relu")
    evaluator = Evaluator(StaticBackend(), workers=1)
    base, block, again = evaluator.evaluate(
        spec, [Genome(), parse_inline("block(threads=512)"), parse_inline("block(512)")])
    assert block.ptx_hash != base.ptx_hash and block.ptx_hash.endswith(
        "@grid=2048,1,1 block=512,1,1")
    assert block.sass_hash != base.sass_hash  # the same cubin, another launch: another row
    assert block.notes["launch"] == {"grid": [2048, 1, 1], "block": [512, 1, 1], "entry": "relu"}
    assert "launch" not in base.notes
    assert again.ptx_hash == block.ptx_hash


@needs_ptxas
def test_occupancy_states_the_launch_block_and_keeps_the_launch():
    spec = find_kernel("softmax")
    applied = _apply(spec, "occupancy(blocks=4)")
    assert applied.launch == spec.launch
    assert ".maxntid 256, 1, 1\n.minnctapersm 4\n{" in applied.ptx
    assert compile_many([applied.ptx])[0].ok
    # stated once: a second hint is a no-op, and a block gene may not outgrow it
    again = apply_genome(applied.ptx, parse_inline("occupancy(blocks=2),block(512)"), spec.launch)
    assert [o.status for o in again.outcomes] == ["no-op", "no-op"]
    too_many = _apply(find_kernel("relu"), "occupancy(blocks=8)").outcomes[0]
    assert too_many.status == "applied"
    assert "exceed" in apply_genome(spec.ptx_text(), parse_inline("occupancy(8)"), Launch(
        (4, 1, 1), (512, 1, 1))).outcomes[0].detail


def test_max_error_is_over_finite_float_outputs_only():
    import numpy as np

    from harness.gpu.gate import max_error

    spec = find_kernel("relu")
    got = {"y": np.array([1.0, 2.0, np.nan, np.inf], dtype=np.float32)}
    want = {"y": np.array([1.0, 2.5, np.nan, np.inf], dtype=np.float32)}
    assert max_error(got, want, spec) == (0.5, 0.2)
    ints = load_spec(UNSEEN / "clamp_i32.toml")
    assert max_error({"y": np.array([1, 9])}, {"y": np.array([1, 2])}, ints) == (0.0, 0.0)


POINTER_CHASE = """.version 8.0
.target sm_90
.address_size 64

.visible .entry chase(
	.param .u64 chase_param_0,
	.param .u64 chase_param_1,
	.param .u32 chase_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<8>;

	ld.param.u64 	%rd1, [chase_param_0];
	ld.param.u64 	%rd2, [chase_param_1];
	ld.param.u32 	%r2, [chase_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd3, %rd1;
	mul.wide.u32 	%rd4, %r1, 8;
	add.s64 	%rd5, %rd3, %rd4;
	ld.global.u64 	%rd5, [%rd5];
	ld.global.u64 	%rd6, [%rd5];
	cvta.to.global.u64 	%rd7, %rd2;
	add.s64 	%rd7, %rd7, %rd4;
	st.global.u64 	[%rd7], %rd6;
$L__BB0_2:
	ret;
}
"""


@needs_ptxas
def test_coarsened_code_writes_each_register_once_even_where_the_body_reuses_one():
    """chase reloads %rd5 through itself (out[i] = *(*(x + i))): copy j's address is
    copy 0's %rd5 plus 8j, so copy 0 must not overwrite that register in place."""
    launch = Launch((64, 1, 1), (128, 1, 1))
    for genome in ("coarsen(k=4)", "coarsen(k=2,form=strided)"):
        applied = apply_genome(POINTER_CHASE, parse_inline(genome), launch)
        assert applied.outcomes[0].status == "applied"
        fn = ptx.parse(applied.ptx).entry()
        written = [r for ins in fn.instructions() for r in ins.defs()
                   if r.startswith("%evc_")]
        assert len(written) == len(set(written)), genome
        assert compile_many([applied.ptx])[0].ok
    # copy 1's first load was merged with copy 0's: both read the address registers, not
    # a register copy 0's load had already overwritten
    fn = ptx.parse(apply_genome(POINTER_CHASE, parse_inline("coarsen(k=2)"), launch).ptx).entry()
    first = next(i for i in fn.instructions() if i.opcode == "ld.global.v2.u64")
    base = first.address().base
    defining = [i for i in fn.instructions() if base in i.defs()]
    assert [i.opcode for i in defining] == ["add.s64"]


@pytest.mark.parametrize("name", ["softmax", "layernorm", "cross_entropy"])
def test_threads_changes_the_block_and_keeps_the_grid_and_the_ptx(name):
    spec = find_kernel(name)
    applied = _apply(spec, "threads(threads=128)")
    assert applied.outcomes[0].status == "applied"
    assert applied.launch.grid == spec.launch.grid and applied.launch.block == (128, 1, 1)
    assert applied.ptx == spec.ptx_text()


@pytest.mark.parametrize("name,genome,why", [
    ("relu", "threads(threads=128)", "ctaid.x * ntid.x"),  # block(n) is the gene there
    ("scan_inclusive", "threads(threads=128)", "ctaid.x * ntid.x"),
    ("reduce_sum", "threads(threads=128)", "never reads %ntid.x"),
    ("softmax", "threads(threads=512)", "only fewer threads"),  # shared memory
    ("triton_softmax", "threads(threads=64)", "never reads %ntid.x"),
    ("transpose", "threads(threads=64)", "not one-dimensional"),
    ("softmax", "threads(threads=256)", "already has 256")])
def test_threads_is_a_no_op_where_the_split_does_not_follow_the_block(name, genome, why):
    outcome = _apply(find_kernel(name), genome).outcomes[0]
    assert outcome.status == "no-op" and why in outcome.detail, outcome


def test_threads_and_block_are_one_group_the_last_wins():
    spec = find_kernel("softmax")
    applied = _apply(spec, "block(threads=512),threads(threads=64)")
    assert [o.status for o in applied.outcomes] == ["replaced", "applied"]
    assert applied.launch.block == (64, 1, 1)
