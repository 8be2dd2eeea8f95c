"""addr_rebase on PTX that Triton wrote (tests/data/captured/rotary_llama: Inductor's rotary
embedding of a Hugging Face Llama, eight angles a thread read 2 KiB apart, each address
computed on its own) and on small kernels written here for the cases its proof decides."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import Gene, Genome, apply_genome
from genomes.launch import Launch
from harness.kernels.suite import find_kernel

ROTARY = find_kernel(Path(__file__).parent / "data" / "captured" / "rotary_llama.toml")
REBASE = Gene.make("addr_rebase")


def _accesses(text: str) -> list[ptx.Instruction]:
    fn = ptx.parse(text).entries[0]
    return [i for i in fn.instructions() if i.op in ("ld", "st") and i.space == "global"]


@needs_ptxas
def test_the_rotary_angles_are_read_from_the_first_ones_address(tmp_path):
    """Triton's source reads angle (x0 % 64 % 32) * 512 + x1 for a thread's 8 consecutive
    x0: angle k lies k * 512 floats (2048 bytes) after angle 0, on every thread."""
    genome = Genome((Gene.make("fast_sincos"), REBASE))
    applied = apply_genome(ROTARY.ptx_text(), genome, ROTARY.launch)
    assert [o.status for o in applied.outcomes] == ["applied", "applied"]
    before, after = _accesses(ROTARY.ptx_text()), _accesses(applied.ptx)
    def angles(loads):  # the scalar 4-byte loads but libdevice's tables (ld.global.nc)
        return [i for i in loads if i.mods[-1] == "b32" and "v4" not in i.mods
                and "nc" not in i.mods]

    assert len(angles(before)) == len(angles(after)) == 8
    first = angles(after)[0].address()
    assert first == angles(before)[0].address()
    assert [a.address() for a in angles(after)[1:]] == [ptx.Address(first.base, 2048 * k)
                                                 for k in range(1, 8)]
    assert applied.launch == ROTARY.launch
    out = tmp_path / "v.ptx"
    out.write_text(applied.ptx)
    subprocess.run(["ptxas", "-arch=sm_90a", str(out), "-o", str(tmp_path / "v.cubin")],
                   check=True)


_KERNEL = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_p, .param .u64 k_q)
{{
\t.reg .pred %p<4>;
\t.reg .b32 %r<16>;
\t.reg .f32 %f<8>;
\t.reg .b64 %rd<16>;
\tld.param.u64 %rd1, [k_p];
\tld.param.u64 %rd2, [k_q];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd3, %r1, 4;
\tadd.s64 %rd4, %rd1, %rd3;
\tld.global.f32 %f1, [%rd4];
{body}
\tret;
}}
"""
LAUNCH = Launch((1, 1, 1), (64, 1, 1))


def _rebased(body: str) -> list[ptx.Address]:
    """The addresses of the body's accesses after addr_rebase (the first load excluded)."""
    applied = apply_genome(_KERNEL.format(body=body), Genome((REBASE,)), LAUNCH)
    return [i.address() for i in _accesses(applied.ptx)[1:]]


def test_an_address_computed_its_own_way_is_rebased_with_its_distance():
    # (tid + 16) * 4 through another multiply: 64 bytes after the first load's address
    body = ("\tadd.s32 %r2, %r1, 16;\n\tmul.wide.u32 %rd5, %r2, 4;\n"
            "\tadd.s64 %rd6, %rd1, %rd5;\n\tld.global.f32 %f2, [%rd6+8];\n"
            "\tst.global.f32 [%rd6+4], %f2;")
    assert _rebased(body) == [ptx.Address("%rd4", 72), ptx.Address("%rd4", 68)]


def test_a_distance_that_differs_on_one_thread_is_left_alone():
    # tid ^ 1: +4 bytes on even threads, -4 on odd ones
    body = ("\txor.b32 %r2, %r1, 1;\n\tmul.wide.u32 %rd5, %r2, 4;\n"
            "\tadd.s64 %rd6, %rd1, %rd5;\n\tld.global.f32 %f2, [%rd6];")
    assert _rebased(body) == [ptx.Address("%rd6", 0)]


def test_only_the_threads_whose_guard_holds_must_agree():
    # min(tid, 40) + 8: 32 bytes after the first address below tid 40, not above
    body = ("\tmin.u32 %r2, %r1, 40;\n\tadd.s32 %r3, %r2, 8;\n\tmul.wide.u32 %rd5, %r3, 4;\n"
            "\tadd.s64 %rd6, %rd1, %rd5;\n\tsetp.lt.u32 %p1, %r1, 40;\n"
            "\t@%p1 ld.global.f32 %f2, [%rd6];\n\t@!%p1 ld.global.f32 %f3, [%rd6];")
    assert _rebased(body) == [ptx.Address("%rd4", 32), ptx.Address("%rd6", 0)]


def test_another_pointer_is_never_a_base():
    body = "\tadd.s64 %rd6, %rd2, %rd3;\n\tld.global.f32 %f2, [%rd6];"
    assert _rebased(body) == [ptx.Address("%rd6", 0)]


def test_an_address_made_from_a_loaded_index_is_left_alone_and_the_rest_rebased():
    body = ("\tld.global.u32 %r2, [%rd4+256];\n\tmul.wide.u32 %rd5, %r2, 4;\n"
            "\tadd.s64 %rd6, %rd1, %rd5;\n\tld.global.f32 %f2, [%rd6];\n"
            "\tadd.s64 %rd7, %rd3, 512;\n\tadd.s64 %rd8, %rd1, %rd7;\n"
            "\tld.global.f32 %f3, [%rd8];")
    assert _rebased(body) == [ptx.Address("%rd4", 256), ptx.Address("%rd6", 0),
                              ptx.Address("%rd4", 512)]


def test_without_a_launch_it_is_a_no_op():
    applied = apply_genome(ROTARY.ptx_text(), Genome((REBASE,)))
    assert applied.outcomes[0].status == "no-op"
    assert "needs the launch" in applied.outcomes[0].detail


@pytest.mark.parametrize("grid", [(1, 1, 1), (2, 1, 1)])
def test_the_proof_is_for_the_launch_it_was_made_with(grid):
    # tid % 64 + 1: one element on in a block of 64; a block of 128 wraps at tid 64
    body = ("\tadd.s32 %r2, %r1, 1;\n\trem.u32 %r3, %r2, 64;\n"
            "\tmul.wide.u32 %rd5, %r3, 4;\n\tadd.s64 %rd6, %rd1, %rd5;\n"
            "\tld.global.f32 %f2, [%rd6];")
    text = _KERNEL.format(body=body)
    small = apply_genome(text, Genome((REBASE,)), Launch(grid, (63, 1, 1)))
    big = apply_genome(text, Genome((REBASE,)), Launch(grid, (128, 1, 1)))
    assert _accesses(small.ptx)[1].address() == ptx.Address("%rd4", 4)
    assert _accesses(big.ptx)[1].address() == ptx.Address("%rd6", 0)


def test_registers_stay_grouped_only_at_the_distance_every_chunk_shows():
    """``_refine``: a pair a constant apart in each chunk, but a different constant in
    the next, is no pair; the first register leaving its group keeps the others together."""
    from genomes.transforms.addr_rebase import _refine

    distance: dict = {}
    regs = ["%a", "%b", "%c", "%d"]
    first = {"%a": (0, 0), "%b": (0, 8), "%c": (0, 24), "%d": (1, 5)}  # (class, first offset)
    groups = _refine(None, distance, first, regs)
    assert groups == [["%a", "%b", "%c"], ["%d"]] and distance["%c"] == 24
    second = {"%a": (0, 1000), "%b": (1, 2008), "%c": (1, 2024), "%d": (2, 7)}  # %a moved alone
    groups = _refine(groups, distance, second, regs)
    assert sorted(groups) == [["%a"], ["%b", "%c"], ["%d"]] and distance["%c"] - distance["%b"] == 16
    third = {"%a": (0, 0), "%b": (0, 0), "%c": (0, 17), "%d": (0, 3)}  # %b, %c: 17 apart, not 16
    assert sorted(_refine(groups, distance, third, regs)) == [["%a"], ["%b"], ["%c"], ["%d"]]
