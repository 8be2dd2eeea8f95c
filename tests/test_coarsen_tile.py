"""coarsen_tile (each thread does k neighbouring threads' work, for Triton's tiles) and the
store merge it relies on (vec_st_index), on PTX that Triton wrote (the Llama rotary
kernels under tests/data/captured) and on small kernels written here; and how a search
reaches a gene that only applies after another (``enabled_by``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_ptxas
from genomes import lane_eval, ptx
from genomes.genome import Gene, Genome, apply_genome, parse_inline
from genomes.launch import Launch
from genomes.variation import changes_kernel, one_per_group, seed_order
from harness.kernels.suite import find_kernel

CAPTURED = Path(__file__).parent / "data" / "captured"
ROTARY = find_kernel(CAPTURED / "rotary_llama.toml")  # 8 elements a thread
ROTARY_2 = find_kernel(CAPTURED / "rotary_llama_x2.toml")  # 2 elements a thread

# Triton's shape, one f32 a thread: x = ctaid * 128 | tid, y[x] = 2 * x[x] (.reqntid 128)
_TILE = """.version 8.0
.target sm_90
.address_size 64
.visible .entry t(.param .u64 t_x, .param .u64 t_y)
.reqntid 128
{{
\t.reg .pred %p<4>;
\t.reg .b32 %r<16>;
\t.reg .f32 %f<4>;
\t.reg .b64 %rd<8>;
\tld.param.u64 %rd1, [t_x];
\tld.param.u64 %rd2, [t_y];
\tmov.u32 %r1, %ctaid.x;
\tshl.b32 %r2, %r1, 7;
\tmov.u32 %r3, %tid.x;
\tor.b32 %r4, %r2, %r3;
\tmul.wide.s32 %rd3, %r4, 4;
\tadd.s64 %rd4, %rd1, %rd3;
\tld.global.b32 %r5, [%rd4];
\tmov.b32 %f1, %r5;
\tadd.f32 %f2, %f1, %f1;
{extra}
\tadd.s64 %rd5, %rd2, %rd3;
\tst.global.f32 [%rd5], %f2;
\tret;
}}
"""
LAUNCH = Launch((64, 1, 1), (128, 1, 1))


def _accesses(text: str) -> list[ptx.Instruction]:
    fn = ptx.parse(text).entries[0]
    return [i for i in fn.instructions() if i.op in ("ld", "st") and i.space == "global"]


def _assemble(text: str, tmp_path) -> None:
    out = tmp_path / "v.ptx"
    out.write_text(text)
    subprocess.run(["ptxas", "-arch=sm_90a", str(out), "-o", str(tmp_path / "v.cubin")],
                   check=True)


@needs_ptxas
@pytest.mark.parametrize("k", [2, 4])
def test_a_tile_of_one_element_a_thread_becomes_k_with_vector_accesses(k, tmp_path):
    applied = apply_genome(_TILE.format(extra=""), parse_inline(f"coarsen_tile(k={k})"), LAUNCH)
    assert applied.outcomes[0].status == "applied", applied.outcomes[0].detail
    assert applied.launch == Launch((64 // k, 1, 1), (128, 1, 1))
    assert [i.opcode for i in _accesses(applied.ptx)] == [f"ld.global.v{k}.b32",
                                                          f"st.global.v{k}.f32"]
    _assemble(applied.ptx, tmp_path)


def test_the_copies_run_every_thread_of_the_old_launch_once():
    """Evaluated over the new launch: (ctaid_j, tid_j) of all threads and copies are the
    old launch's threads, each once, and copy j of thread g is old thread k*g + j."""
    k = 4
    applied = apply_genome(_TILE.format(extra=""), parse_inline(f"coarsen_tile(k={k})"), LAUNCH)
    fn = ptx.parse(applied.ptx).entries[0]
    pairs = [i.operands[0] for i in fn.instructions() if i.opcode in ("shr.u32", "and.b32")
             and i.operands[0].startswith("%evc_")]
    ctaids, tids = pairs[0::2], pairs[1::2]
    assert len(ctaids) == len(tids) == k
    (chunk,) = lane_eval.evaluate(fn, ctaids + tids, applied.launch.grid, applied.launch.block)
    old = np.stack([chunk[c].astype(np.int64) * 128 + chunk[t] for c, t in zip(ctaids, tids)])
    g = np.arange(old.shape[1])
    assert all(np.array_equal(old[j], k * g + j) for j in range(k))
    assert np.array_equal(np.sort(old.ravel()), np.arange(64 * 128))


@pytest.mark.parametrize("extra, why", [
    ("\tbar.sync 0;", "uses bar"),
    ("\tmov.u32 %r6, %laneid;", "reads %laneid"),
    ("\tst.local.f32 [%rd3], %f2;", "not a global access"),
    ("\tsetp.eq.s32 %p1, %r3, 0;\n\t@%p1 bra $L_skip;\n$L_loop:\n\tadd.f32 %f2, %f2, %f1;"
     "\n\tbra $L_loop;\n$L_skip:", "before the end"),
])
def test_what_threads_might_share_or_branch_on_is_refused(extra, why):
    applied = apply_genome(_TILE.format(extra=extra), parse_inline("coarsen_tile(k=2)"), LAUNCH)
    assert applied.outcomes[0].status == "no-op"
    assert why in applied.outcomes[0].detail


def test_a_grid_k_does_not_divide_is_refused():
    applied = apply_genome(_TILE.format(extra=""), parse_inline("coarsen_tile(k=8)"),
                           Launch((12, 1, 1), (128, 1, 1)))
    assert "8 does not divide the grid of 12" in applied.outcomes[0].detail


def test_the_coarsened_launch_is_kept_by_later_genes(widen_gene):
    text = _TILE.format(extra="")
    both = apply_genome(text, parse_inline("coarsen_tile(k=2),widen"), LAUNCH)
    assert [o.status for o in both.outcomes] == ["applied", "no-op"]
    assert "keeps the launch coarsen_tile was applied for" in both.outcomes[1].detail
    assert both.launch.grid == (32, 1, 1)
    assert apply_genome(text, parse_inline("widen"), LAUNCH).launch.grid == (32, 1, 1)
    first = apply_genome(text, parse_inline("widen,coarsen_tile(k=2)"), LAUNCH)
    assert first.launch.grid == (16, 1, 1)  # before it, a launch change is coarsened too


_PAIR = """.version 8.0
.target sm_90
.address_size 64
.visible .entry p(.param .u64 p_x, .param .u64 p_y)
{{
\t.reg .b32 %r<8>;
\t.reg .f32 %f<4>;
\t.reg .b64 %rd<8>;
\tld.param.u64 %rd1, [p_x];
\tld.param.u64 %rd2, [p_y];
\tld.global.f32 %f1, [%rd1];
\tadd.f32 %f2, %f1, %f1;
\tmov.u32 %r1, %ctaid.x;
\tshl.b32 %r2, %r1, 7;
\tmov.u32 %r3, %tid.x;
\tor.b32 %r4, %r2, %r3;
\tshl.b32 %r5, %r4, 1;
\tmul.wide.s32 %rd3, %r5, 4;
\tadd.s64 %rd4, %rd2, %rd3;
\tor.b32 %r6, %r5, 1;
\tmul.wide.s32 %rd5, %r6, 4;
\tadd.s64 %rd6, %rd2, %rd5;
\tst.global.f32 [%rd4], %f1;
{between}\tst.global.f32 [%rd6], %f2;
\tret;
}}
"""


@pytest.mark.parametrize("between, merged", [
    ("", True),
    ("\tld.global.f32 %f3, [%rd1+4];\n", False),  # might read what the first one wrote
    ("\tst.global.f32 [%rd1], %f1;\n", False),
    ("\tadd.f32 %f3, %f1, %f2;\n", True),  # no memory access
])
def test_a_store_sinks_to_its_pair_past_no_memory_access(between, merged):
    """y[2x] and y[2x+1], addresses computed on their own: one v2 store where nothing
    between them touches memory."""
    applied = apply_genome(_PAIR.format(between=between), parse_inline("vec_st_index"), LAUNCH)
    stores = [i.opcode for i in _accesses(applied.ptx) if i.op == "st"
              and i.address().base != "%rd1"]
    assert stores == (["st.global.v2.f32"] if merged else ["st.global.f32"] * 2)


@needs_ptxas
def test_the_rotary_kernel_of_two_elements_a_thread_coarsened_after_fast_sincos(tmp_path):
    """Triton's 2-elements-a-thread config of Llama's rotary kernel: 4-byte loads of two
    bf16 a thread; coarsened by 4 (after fast_sincos took libdevice's branches and local
    memory out), its input loads and its stores are 16 bytes again, its angles are read
    from copy 0's address, and alone it does not apply."""
    alone = apply_genome(ROTARY_2.ptx_text(), parse_inline("coarsen_tile(k=4)"), ROTARY_2.launch)
    assert alone.outcomes[0].status == "no-op"
    assert changes_kernel(ptx.parse(ROTARY_2.ptx_text()), Gene.make("coarsen_tile", k=4),
                          ROTARY_2.launch)
    applied = apply_genome(ROTARY_2.ptx_text(), parse_inline("fast_sincos,coarsen_tile(k=4)"),
                           ROTARY_2.launch)
    assert [o.status for o in applied.outcomes] == ["applied", "applied"]
    assert applied.launch.grid[0] == ROTARY_2.launch.grid[0] // 4
    ops = [i.opcode for i in _accesses(applied.ptx)]
    assert ops.count("ld.global.v4.b32") == 1 and ops.count("st.global.v4.b32") == 1
    angles = [i.address() for i in _accesses(applied.ptx) if "L1::evict_last" in i.opcode
              and "v4" not in i.opcode]
    assert len(angles) == 8 and len({a.base for a in angles}) == 1
    assert sorted(a.offset for a in angles) == [2048 * j for j in range(8)]
    _assemble(applied.ptx, tmp_path)


def test_a_seed_puts_enablers_and_launch_changes_first_and_one_gene_a_group():
    genes = parse_inline("reorder(strategy=interleave),addr_rebase,coarsen_tile(k=2),"
                         "coarsen_tile(k=4),coarsen_tile(k=8),fast_sincos").genes
    one = one_per_group(genes)
    assert [str(g) for g in one] == ["reorder(strategy=interleave)", "addr_rebase",
                                     "coarsen_tile(k=4)", "fast_sincos"]  # k=4: the default
    assert [str(g) for g in seed_order(one)] == ["fast_sincos", "reorder(strategy=interleave)",
                                                 "coarsen_tile(k=4)", "addr_rebase"]
    seeded = apply_genome(ROTARY_2.ptx_text(), Genome(tuple(seed_order(one))), ROTARY_2.launch)
    assert [o.status for o in seeded.outcomes[:3]] == ["applied"] * 3, seeded.outcomes
    # coarsen_tile rebased the angles already
    assert seeded.outcomes[3].detail == "nothing to change"
