"""fast_sincos on PTX Triton wrote (tests/data/captured/rotary_llama: Inductor's rotary
embedding of a Hugging Face Llama, libdevice's cosf and sinf inlined 8 times each, every
sinf sharing its cosf's reduction): what is replaced, what stays, and what stops it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import needs_ptxas
from genomes import ptx
from genomes.genome import Gene, Genome, apply_genome
from harness.kernels.suite import find_kernel

SPEC = find_kernel(Path(__file__).parent / "data" / "captured" / "rotary_llama.toml")
GENOME = Genome((Gene.make("fast_sincos"),))


def _ops(text: str) -> list[ptx.Instruction]:
    return ptx.parse(text).entries[0].instructions()


def _apply(text: str):
    applied = apply_genome(text, GENOME, SPEC.launch)
    return applied.outcomes[0], applied.ptx


@needs_ptxas
def test_every_cos_and_sin_becomes_one_approx_and_the_rest_of_the_kernel_stays(tmp_path):
    outcome, text = _apply(SPEC.ptx_text())
    assert outcome.status == "applied" and outcome.changes == 16
    before, after = _ops(SPEC.ptx_text()), _ops(text)
    assert [i.opcode for i in after].count("cos.approx.ftz.f32") == 8
    assert [i.opcode for i in after].count("sin.approx.ftz.f32") == 8
    # libdevice's branches, slow-path loop and its table are gone; the kernel's own loads
    # (some scheduled into the regions) and its store are all still there
    assert not any(i.op in ("bra", "madc") or i.space == "local" for i in after)
    global_before = [i for i in before if i.space == "global" and "nc" not in i.mods]
    assert [i.render() for i in after if i.space == "global"] == \
        [i.render() for i in global_before]
    # each approx reads its angle reduced to [-pi, pi]: sin(x) takes its cos(x)'s x
    angles = [i.operands[1] for i in after if i.opcode == "mul.f32"
              and i.operands[2] == "0f3E22F983"]
    assert len(angles) == 16 and angles[:8] == angles[8:] and len(set(angles)) == 8
    approx = [i for i in after if "approx" in i.mods]
    assert all(a.operands[1].startswith("%evo_sc") for a in approx)
    out = tmp_path / "v.ptx"
    out.write_text(text)
    subprocess.run(["ptxas", "-arch=sm_90a", str(out), "-o", str(tmp_path / "v.cubin")],
                   check=True)


def test_a_value_of_a_region_read_outside_it_stops_the_whole_function():
    """A word the first cos's slow path loaded (%r25) stored after the regions: nothing
    is replaced."""
    text = SPEC.ptx_text()
    assert "ld.local.b32 \t%r25, [%r24+24];" in text
    store = next(line for line in text.splitlines() if "st.global" in line)
    changed = text.replace(store, store + "\n\tst.global.b32 \t[%rd1], %r25;", 1)
    assert changed != text
    outcome, out = _apply(changed)
    assert outcome.status == "no-op" and out == changed


def test_a_store_inside_a_region_stops_the_whole_function():
    text = SPEC.ptx_text()
    inside = "mul.rn.ftz.f32 \t%r28, %r853, %r853;"
    assert inside in text
    changed = text.replace(inside, inside + "\n\tst.global.b32 \t[%rd1], %r28;", 1)
    outcome, out = _apply(changed)
    assert outcome.status == "no-op" and out == changed
