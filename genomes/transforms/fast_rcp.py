"""Fast f32 reciprocal: ``rcp.rn.f32`` and ``1/x`` divisions -> ``rcp.approx.f32`` (fast math).

``rcp.rn.f32`` (or ``.rz/.rm/.rp``) is an IEEE-rounded reciprocal, a short subroutine
around the hardware's approximate one; ``rcp.approx.f32`` is that single MUFU.RCP
instruction (max 1 ulp error). A division whose numerator is the literal 1.0
(``div.rn.f32 %f2, 0f3F800000, %f1``) becomes the same ``rcp.approx.f32 %f2, %f1``.
``.ftz`` is kept. Results change in the last bits: the correctness gate decides.
f64 reciprocals are left alone (``rcp.approx.ftz.f64`` is far less accurate).
"""

from __future__ import annotations

from genomes.ptx import Instruction, Module
from genomes.transforms.base import Transform
from genomes.transforms.fast_div import IEEE_ROUNDING, is_f32, with_rounding


def is_one(operand: str) -> bool:
    """Whether an f32 operand is the literal 1.0 (``0f3F800000`` or a decimal 1.0)."""
    text = operand.strip()
    if text[:2] in ("0f", "0F"):
        return text[2:].upper() == "3F800000"
    try:
        return float(text) == 1.0
    except ValueError:
        return False


def apply(module: Module) -> int:
    def change(ins: Instruction) -> Instruction | None:
        if not is_f32(ins):
            return None
        if ins.op == "rcp" and any(m in IEEE_ROUNDING for m in ins.mods):
            return with_rounding(ins, IEEE_ROUNDING, "approx")
        if ins.op == "div" and len(ins.operands) == 3 and is_one(ins.operands[1]):
            ftz = ("ftz",) if "ftz" in ins.mods else ()
            return ins.with_(opcode=".".join(["rcp", "approx", *ftz, "f32"]),
                             operands=(ins.operands[0], ins.operands[2]))
        return None

    return sum(fn.rewrite(change) for fn in module.functions)


TRANSFORM = Transform(
    name="fast_rcp",
    group="fast_rcp",
    summary="approximate f32 reciprocal: rcp.rn.f32 and div.f32 1.0/x -> rcp.approx.f32; "
            "changes results in the last bits",
    applies_when="IEEE-rounded f32 reciprocals, or f32 divisions of the literal 1.0",
    params=(),
    apply=apply,
    changes_results=True,
)
