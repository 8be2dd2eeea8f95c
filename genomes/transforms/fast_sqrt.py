"""Fast f32 square root: ``sqrt.rn.f32`` -> ``sqrt.approx.f32`` (fast math).

``sqrt.rn.f32`` (or ``.rz/.rm/.rp``) is IEEE-rounded, a subroutine around the hardware's
approximate reciprocal square root; ``sqrt.approx.f32`` is the approximation alone (max
relative error about 2^-23). ``.ftz`` is kept. Results change in the last bits: the
correctness gate decides. f64 square roots are left alone.
"""

from __future__ import annotations

from genomes.ptx import Instruction, Module
from genomes.transforms.base import Transform
from genomes.transforms.fast_div import IEEE_ROUNDING, is_f32, with_rounding


def apply(module: Module) -> int:
    def change(ins: Instruction) -> Instruction | None:
        if ins.op == "sqrt" and is_f32(ins) and any(m in IEEE_ROUNDING for m in ins.mods):
            return with_rounding(ins, IEEE_ROUNDING, "approx")
        return None

    return sum(fn.rewrite(change) for fn in module.functions)


TRANSFORM = Transform(
    name="fast_sqrt",
    group="fast_sqrt",
    summary="approximate f32 square root: sqrt.rn.f32 -> sqrt.approx.f32; changes results "
            "in the last bits",
    applies_when="IEEE-rounded f32 square roots",
    params=(),
    apply=apply,
    changes_results=True,
)
