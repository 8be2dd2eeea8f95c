"""Fast f32 division: ``div.rn.f32`` -> ``div.approx.f32`` or ``div.full.f32`` (fast math).

``div.rn`` (and ``.rz/.rm/.rp``) is IEEE-rounded division, a ~10-instruction subroutine
with a slow path; ``div.full.f32`` is a full-range approximation (max 2 ulp error) and
``div.approx.f32`` computes ``a * (1/b)`` (max 2 ulp for |b| in [2^-126, 2^126], 0 or a
wrong sign-preserving value outside). ``mode=approx`` turns IEEE and ``.full`` divisions
into ``.approx``; ``mode=full`` turns IEEE divisions into ``.full``. ``.ftz`` is kept.

This changes results in the last bits: the correctness gate's tolerance decides whether
a variant survives. f64 division has no approximate form and is left alone, as is
integer division.
"""

from __future__ import annotations

from genomes.ptx import Instruction, Module
from genomes.transforms.base import Param, Transform

MODES = ("approx", "full")
IEEE_ROUNDING = ("rn", "rz", "rm", "rp")


def is_f32(ins: Instruction) -> bool:
    """An instruction whose (last) type is ``.f32``."""
    return bool(ins.mods) and ins.mods[-1] == "f32"


def with_rounding(ins: Instruction, old: tuple[str, ...], new: str) -> Instruction:
    """``ins`` with its first modifier among ``old`` replaced by ``new``."""
    mods = list(ins.mods)
    at = next(i for i, m in enumerate(mods) if m in old)
    mods[at] = new
    return ins.with_(opcode=".".join([ins.op, *mods]))


def apply(module: Module, mode: str) -> int:
    slower = IEEE_ROUNDING + (("full",) if mode == "approx" else ())

    def change(ins: Instruction) -> Instruction | None:
        if ins.op == "div" and is_f32(ins) and any(m in slower for m in ins.mods):
            return with_rounding(ins, slower, mode)
        return None

    return sum(fn.rewrite(change) for fn in module.functions)


TRANSFORM = Transform(
    name="fast_div",
    group="fast_div",
    summary="approximate f32 division: div.rn/.full.f32 -> div.approx.f32 (mode=approx) "
            "or div.rn.f32 -> div.full.f32 (mode=full); changes results in the last bits",
    applies_when="f32 divisions that are IEEE-rounded (or .full, for mode=approx)",
    params=(Param("mode", default="approx", choices=MODES),),
    apply=apply,
    changes_results=True,
)
