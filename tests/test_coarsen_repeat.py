"""coarsen_repeat (each thread does the work of k threads S blocks apart that load the
same elements, and loads them once): on the Llama key rotary kernel Triton wrote (its
output is each key head repeated for 4 query heads) and on small kernels written here,
one of which repeats its loads on every block but one (the proof, not the sample, must
catch it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_ptxas
from genomes import lane_eval, ptx
from genomes.genome import apply_genome, parse_inline
from genomes.launch import Launch
from harness.kernels.suite import find_kernel
from harness.sass import disassemble, opcode_histogram

ROTARY = find_kernel(Path(__file__).parent / "data" / "captured" / "rotary_llama.toml")

# A tile of one element a thread, x = ctaid * 128 | tid, y[x] = sin(x[x % 1024 + (ctaid ==
# ODD)]): blocks 8 apart read the same elements, except block ODD, which reads one on.
_REPEAT = """.version 8.0
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
\trem.u32 %r5, %r4, {period};
\tsetp.eq.u32 %p1, %r1, {odd};
\tselp.u32 %r6, 1, 0, %p1;
\tadd.s32 %r7, %r5, %r6;
\tmul.wide.u32 %rd3, %r7, 4;
\tadd.s64 %rd4, %rd1, %rd3;
\tld.global.b32 %r8, [%rd4];
\tmov.b32 %f1, %r8;
\tsin.approx.f32 %f2, %f1;
\tmul.wide.u32 %rd5, %r4, 4;
\tadd.s64 %rd6, %rd2, %rd5;
\tst.global.f32 [%rd6], %f2;
\tret;
}}
"""
LAUNCH = Launch((512, 1, 1), (128, 1, 1))


def _global(text: str, op: str) -> list[ptx.Instruction]:
    fn = ptx.parse(text).entries[0]
    return [i for i in fn.instructions() if i.op == op and i.space == "global"]


def _sines(text: str, tmp_path) -> int:
    """How many sines and cosines (MUFU.SIN, MUFU.COS) ptxas keeps in the kernel."""
    (tmp_path / "v.ptx").write_text(text)
    subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "v.ptx"), "-o",
                    str(tmp_path / "v.cubin")], check=True)
    sass = disassemble((tmp_path / "v.cubin").read_bytes())
    if sass is None:
        pytest.skip("cuobjdump is not installed")
    return sum(n for op, n in opcode_histogram(sass, fine=True).items()
               if op.startswith(("MUFU.SIN", "MUFU.COS")))


def _copy_blocks(text: str, launch: Launch, k: int) -> np.ndarray:
    """The original block each copy of each new thread runs (copy 0 first), evaluated for
    every thread of the new launch from the lines the transform put first."""
    fn = ptx.parse(text).entries[0]
    base = "%evc_b32_3"  # _index_lines: c, q, r, base, then base + j * S for j >= 1
    names = [base] + [f"%evc_b32_{3 + j}" for j in range(1, k)]
    chunks = list(lane_eval.evaluate(fn, names, launch.grid, launch.block))
    return np.stack([np.concatenate([c[n] for c in chunks]) for n in names])


@needs_ptxas
@pytest.mark.parametrize("k", [2, 4])
def test_blocks_that_load_the_same_elements_run_in_one_thread_that_loads_them_once(k, tmp_path):
    text = _REPEAT.format(period=1024, odd=4096)  # no block reads one on
    applied = apply_genome(text, parse_inline(f"coarsen_repeat(k={k})"), LAUNCH)
    assert applied.outcomes[0].status == "applied", applied.outcomes[0].detail
    assert applied.launch == Launch((512 // k, 1, 1), (128, 1, 1))
    assert len(_global(applied.ptx, "ld")) == 1 and len(_global(applied.ptx, "st")) == k
    blocks = _copy_blocks(applied.ptx, applied.launch, k)
    assert np.all(np.diff(blocks, axis=0) == 8)  # the stride found: 1024 elements a period
    per_thread = blocks[:, ::128]  # thread 0 of each new block: every old block once
    assert sorted(per_thread.ravel().tolist()) == list(range(512))
    assert _sines(applied.ptx, tmp_path) == 1  # the copies' sines: one left


def test_a_load_that_repeats_on_every_sampled_block_but_not_on_all_is_kept_where_it_differs():
    """Block 77 reads one element on; the stride is guessed on sample blocks (77 is not
    among them), and the proof evaluates every thread: copy 1 of new block 21 is old block
    77, so copy 1 keeps its own load; copies 2 and 3 read copy 0's value."""
    applied = apply_genome(_REPEAT.format(period=1024, odd=77),
                           parse_inline("coarsen_repeat(k=4)"), LAUNCH)
    assert applied.outcomes[0].status == "applied", applied.outcomes[0].detail
    loads = _global(applied.ptx, "ld")
    assert len(loads) == 2
    fn = ptx.parse(applied.ptx).entries[0]
    movs = [i for i in fn.instructions() if i.opcode == "mov.b32"
            and i.operands[1] == loads[0].defs()[0] and i.operands[0].startswith("%evc_b32")]
    assert len(movs) == 2  # copies 2 and 3


@pytest.mark.parametrize("period, launch, why", [
    (1 << 30, LAUNCH, "no stride of at most 128 blocks repeats the loads"),
    (1024, Launch((510, 1, 1), (128, 1, 1)), "4 does not divide the grid of 510 blocks")])
def test_loads_that_never_repeat_or_a_grid_k_does_not_divide_are_said(period, launch, why):
    applied = apply_genome(_REPEAT.format(period=period, odd=4096),
                           parse_inline("coarsen_repeat(k=4)"), launch)
    assert applied.outcomes[0].status == "no-op"
    assert why in applied.outcomes[0].detail


@needs_ptxas
def test_the_llama_key_rotary_kernel_computes_each_sine_once_for_its_four_heads(tmp_path):
    """Triton's rotary embedding with repeat_kv fused (each key head written for 4 query
    heads, 32 blocks a head): after fast_sincos, coarsen_repeat(k=4) gives each thread the
    4 heads' tiles of one key tile; it loads the key elements and the angles once, and
    ptxas keeps the 16 sines and cosines of one tile where coarsen_tile(k=4) keeps 64."""
    sincos = apply_genome(ROTARY.ptx_text(), parse_inline("fast_sincos"), ROTARY.launch)
    repeat = apply_genome(ROTARY.ptx_text(), parse_inline("fast_sincos,coarsen_repeat(k=4)"),
                          ROTARY.launch)
    assert [o.status for o in repeat.outcomes] == ["applied", "applied"]
    assert repeat.launch.grid[0] == ROTARY.launch.grid[0] // 4
    assert len(_global(repeat.ptx, "ld")) == len(_global(sincos.ptx, "ld"))
    assert len(_global(repeat.ptx, "st")) == 4 * len(_global(sincos.ptx, "st"))
    blocks = _copy_blocks(repeat.ptx, repeat.launch, 4)
    assert np.all(np.diff(blocks, axis=0) == 32)
    tile = apply_genome(ROTARY.ptx_text(), parse_inline("fast_sincos,coarsen_tile(k=4)"),
                        ROTARY.launch)
    assert _sines(sincos.ptx, tmp_path) == 16
    assert _sines(tile.ptx, tmp_path) == 64
    assert _sines(repeat.ptx, tmp_path) == 16


@pytest.mark.parametrize("name", ["rotary_llama", "rotary_llama_x2", "cat_transpose",
                                  "addmm_gelu"])
@pytest.mark.parametrize("gene", ["coarsen_tile(k=4)", "coarsen_repeat(k=4)"])
def test_the_search_asks_the_coarsenings_their_shape_and_gets_what_applying_says(name, gene):
    """``changes_kernel`` (what a search asks of every gene on every kernel) takes the
    coarsenings' ``precheck`` in place of their launch-wide proofs: same answer here,
    alone and after fast_sincos, as applying them."""
    from genomes.genome import Genome
    from genomes.variation import changes_kernel

    spec = find_kernel(Path(__file__).parent / "data" / "captured" / f"{name}.toml")
    module = ptx.parse(spec.ptx_text())
    g = parse_inline(gene).genes[0]
    applied = (apply_genome(module, Genome((g,)), spec.launch).changed
               or apply_genome(module, parse_inline(f"fast_sincos,{gene}"),
                               spec.launch).outcomes[-1].status == "applied")
    assert changes_kernel(module, g, spec.launch) == applied


@needs_ptxas
def test_repeat_kv_fused_into_a_rotary_embedding_by_nvcc_shares_its_sine(tmp_path):
    """The same repeat in CUDA C that nvcc compiled (tests/data/unseen/repeat): one element
    a thread, blocks 256 apart reading the same key element; coarsened by 4 over that
    repeat, the thread loads once and ptxas keeps one sine and one cosine for 4 stores
    (8 after coarsen_tile), the rotation's select shared too."""
    spec = find_kernel(Path(__file__).parent / "data" / "unseen" / "repeat" /
                       "repeat_kv_rope.toml")
    repeat = apply_genome(spec.ptx_text(), parse_inline("coarsen_repeat(k=4)"), spec.launch)
    assert repeat.outcomes[0].status == "applied", repeat.outcomes[0].detail
    assert len(_global(repeat.ptx, "ld")) == len(_global(spec.ptx_text(), "ld")) == 3
    assert len(_global(repeat.ptx, "st")) == 4
    assert np.all(np.diff(_copy_blocks(repeat.ptx, repeat.launch, 4), axis=0) == 256)
    tile = apply_genome(spec.ptx_text(), parse_inline("coarsen_tile(k=4)"), spec.launch)
    assert _sines(tile.ptx, tmp_path) == 8
    assert _sines(repeat.ptx, tmp_path) == 2
