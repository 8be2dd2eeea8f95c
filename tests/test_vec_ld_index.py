"""vec_ld_index and the launch-wide evaluation behind it (genomes.lane_eval), on PTX that
Triton wrote (tests/data/captured/cat_transpose: Inductor's cat of transposed attention
gradients in GPT-2's training step, 32 scalar bf16 loads a thread, each address computed
on its own through lowered divisions) and on small kernels written here for single ops."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_ptxas
from genomes import lane_eval, ptx
from genomes.genome import Gene, Genome, apply_genome
from harness.kernels.suite import find_kernel

SPEC = find_kernel(Path(__file__).parent / "data" / "captured" / "cat_transpose.toml")
LAUNCH = SPEC.launch
GENOME = Genome((Gene.make("vec_ld_index"),))


def _global_loads(text: str) -> list[ptx.Instruction]:
    fn = ptx.parse(text).entries[0]
    return [ins for ins in fn.instructions() if ins.op == "ld" and ins.space == "global"]


def test_the_evaluated_addresses_are_the_triton_sources_indices():
    """The first transposed input's address of every thread (first chunk of the launch)
    equals what Triton's source says: 64*x1 + 32768*((x0-768)//64 % 12) + 393216*x2 +
    (x0-768) % 64 elements, where the thread loads (768 <= x0 < 1536)."""
    fn = ptx.parse(SPEC.ptx_text()).entries[0]
    first = _global_loads(SPEC.ptx_text())[1]
    guard = first.pred.lstrip("@!")
    chunk = next(lane_eval.evaluate(fn, [first.address().base, guard], LAUNCH.grid,
                                    LAUNCH.block))
    t = np.arange(len(chunk[guard]))
    x = (t // 128) * 1024 + (t % 128) * 8
    x0, x1, x2 = x % 2304, (x // 2304) % 512, x // 1179648
    assert np.array_equal(chunk[guard], (x0 >= 768) & (x0 < 1536))
    want = 2 * (64 * x1 + 32768 * (((x0 - 768) // 64) % 12) + 393216 * x2 + (x0 - 768) % 64)
    pointer = chunk[first.address().base]
    assert pointer.param.endswith("_param_1")
    assert np.array_equal(pointer.offset[chunk[guard]], want[chunk[guard]])


_OPS = """
.visible .entry k(.param .u64 k_p, .param .u32 k_n)
{{
\t.reg .pred %p<2>;
\t.reg .b16 %rs<4>;
\t.reg .b32 %r<12>;
\t.reg .b64 %rd<4>;
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %ctaid.x;
\tmad.lo.s32 %r3, %r2, 64, %r1;
{body}
\tret;
}}
"""


def _one(body: str, reg: str) -> np.ndarray:
    fn = ptx.parse(".version 8.0\n.target sm_90\n.address_size 64\n"
                   + _OPS.format(body=body)).entries[0]
    (chunk,) = lane_eval.evaluate(fn, [reg], (2, 1, 1), (64, 1, 1))
    bits = np.asarray(chunk[reg])  # the register's bits, read as unsigned
    return bits.view(f"u{bits.dtype.itemsize}").astype(np.int64)


X = np.arange(128)


@pytest.mark.parametrize("body, reg, want", [
    ("\tadd.s32 %r4, %r3, -100;\n\tdiv.s32 %r5, %r4, 7;", "%r5",
     np.trunc((X - 100) / 7).astype(np.int64) & 0xFFFFFFFF),   # toward zero
    ("\tadd.s32 %r4, %r3, -100;\n\trem.s32 %r5, %r4, 7;", "%r5",
     np.fmod(X - 100, 7) & 0xFFFFFFFF),
    ("\tadd.s32 %r4, %r3, -64;\n\tshr.s32 %r5, %r4, 3;", "%r5",
     ((X - 64) >> 3) & 0xFFFFFFFF),                             # arithmetic
    ("\tadd.s32 %r4, %r3, -64;\n\tshr.u32 %r5, %r4, 3;", "%r5",
     ((X - 64) & 0xFFFFFFFF) >> 3),                             # logical
    ("\tshl.b32 %r5, %r3, 40;", "%r5", 0 * X),                  # past the width: 0
    ("\tadd.s32 %r4, %r3, 100;\n\tcvt.s32.s8 %r5, %r4;", "%r5",
     (((X + 100) & 0xFF) ^ 0x80) - 0x80 & 0xFFFFFFFF),         # sign-extends bit 7
    ("\tcvt.u16.u32 %rs1, %r3;\n\tadd.s16 %rs2, %rs1, -200;\n\tshr.s16 %rs3, %rs2, 2;",
     "%rs3", (((X - 200) >> 2) & 0xFFFF)),
    ("\tmul.hi.u32 %r5, %r3, -1;", "%r5", np.maximum(X - 1, 0)),  # (2^32-1)x >> 32
    ("\tmul.hi.s32 %r5, %r3, -954437177;", "%r5", ((X * -954437177) >> 32) & 0xFFFFFFFF),
    ("\tmul.wide.s32 %rd1, %r3, -3;", "%rd1", X * -3),
    ("\tsetp.lt.u32 %p1, %r3, 70;\n\tselp.b32 %r5, 1, 2, %p1;", "%r5", np.where(X < 70, 1, 2)),
    ("\tbfe.u32 %r5, %r3, 3, 2;", "%r5", (X >> 3) & 3),
    ("\tbfe.s32 %r5, %r3, 2, 3;", "%r5", ((((X >> 2) & 7) ^ 4) - 4) & 0xFFFFFFFF),
])
def test_integer_semantics_of_single_ops(body, reg, want):
    assert np.array_equal(_one(body, reg), want)


@pytest.mark.parametrize("body, reg, why", [
    ("\tld.param.u32 %r5, [k_n];\n\tadd.s32 %r6, %r5, %r3;", "%r6", "scalar parameter"),
    ("\tmov.u32 %r5, %r3;\n\tadd.s32 %r5, %r5, 1;", "%r5", "defined 2 times"),
    ("\tcvt.rn.f32.s32 %r5, %r3;", "%r5", "float"),
    ("\tmov.u32 %r5, %laneid;", "%r5", "not the launch's"),
    ("\tbfe.u32 %r5, %r3, 30, 4;", "%r5", "field outside"),
])
def test_what_is_not_modelled_is_refused_with_its_reason(body, reg, why):
    with pytest.raises(lane_eval.Unsupported, match=why):
        _one(body, reg)


@needs_ptxas
def test_the_per_element_loads_become_four_16_byte_loads(tmp_path):
    applied = apply_genome(SPEC.ptx_text(), GENOME, LAUNCH)
    assert [o.status for o in applied.outcomes] == ["applied"]
    assert applied.outcomes[0].changes == 4 and applied.launch == LAUNCH
    before, after = _global_loads(SPEC.ptx_text()), _global_loads(applied.ptx)
    assert [i.mods[-1] for i in before].count("b16") == 32
    assert len(after) == 5 and all(i.mods[-2:] == ("v4", "b32") for i in after)
    # each word unpacked into the scalar loads' registers, under the loads' own guard
    unpacks = [i for i in ptx.parse(applied.ptx).entries[0].instructions()
               if i.opcode == "mov.b32" and "%evo_vl" in i.operands[1]]
    assert len(unpacks) == 16 and {u.pred for u in unpacks} == {"@%p2", "@%p3"}
    assert unpacks[0].operands[0] == "{%rs1, %rs3}"
    out = tmp_path / "v.ptx"
    out.write_text(applied.ptx)
    subprocess.run(["ptxas", "-arch=sm_90a", str(out), "-o", str(tmp_path / "v.cubin")],
                   check=True)


def test_one_lane_off_by_one_breaks_its_groups_and_only_those():
    """Lane 2's index made x+3 instead of x+2: no group may hold a lane-2 load; the
    aligned pairs and quads without it still merge."""
    text = SPEC.ptx_text().replace("or.b32 \t%r17, %r15, 2;", "or.b32 \t%r17, %r15, 3;")
    assert text != SPEC.ptx_text()
    applied = apply_genome(text, GENOME, LAUNCH)
    loads = _global_loads(applied.ptx)
    assert not any("%evo_vl" in i.operands[0] for i in loads)  # no 16-byte group
    assert {i.mods[-2] for i in loads if "v" in i.mods[-2]} <= {"v2", "v4"}
    assert any(i.opcode.endswith("v4.b16") for i in loads)  # lanes 4..7
    assert any(i.opcode.endswith("v2.b16") for i in loads)  # lanes 0..1


def test_without_a_launch_it_is_a_no_op_and_a_later_launch_change_is_refused(widen_gene):
    assert apply_genome(SPEC.ptx_text(), GENOME).outcomes[0].status == "no-op"
    both = apply_genome(SPEC.ptx_text(), Genome((*GENOME.genes, Gene.make("widen"))), LAUNCH)
    assert [o.status for o in both.outcomes] == ["applied", "no-op"]
    assert "keeps the launch vec_ld_index was applied for" in both.outcomes[1].detail
    assert both.launch == LAUNCH
    alone = apply_genome(SPEC.ptx_text(), Genome((Gene.make("widen"),)), LAUNCH)
    assert alone.launch.grid[0] == LAUNCH.grid[0] // 2  # the fake gene does apply alone
