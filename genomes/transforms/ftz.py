"""Flush f32 subnormals to zero: ``.ftz`` on f32 instructions that accept it (fast math).

Without ``.ftz`` the hardware's approximate units (MUFU: ``rcp/sqrt/rsqrt/ex2/lg2/sin/
cos.approx``) need extra instructions around them to scale subnormal inputs and outputs;
with it they are one instruction (nvcc's ``expf`` already uses ``ex2.approx.ftz.f32``;
Triton emits ``ex2.approx.f32`` and ``div.full.f32`` without it: ptxas 13.0 (sm_90)
assembles the suite's Triton softmax to 171 instead of 206 instructions with
``scope=approx``). Subnormal inputs and
results (|x| < 2^-126) become sign-preserving zero, which changes results only where such
tiny values occur: the correctness gate decides.

``scope=approx``: the approximate forms only (``*.approx.f32`` and ``div.full.f32``).
``scope=all``: every f32 instruction whose syntax has ``{.ftz}``: add sub mul fma mad div
rcp sqrt rsqrt ex2 lg2 sin cos min max abs neg setp set slct, and cvt from a float type
with f32 on one side (``cvt.rni.ftz.s32.f32``, ``cvt.ftz.f64.f32``). (ptxas 13.0 rejects ``.ftz`` on tanh, copysign, selp, testp and mov.)
The qualifier goes where the grammar has it: after rounding/comparison qualifiers, before
``.sat``/``.NaN``/``.xorsign`` and the types (``setp.lt.and.ftz.f32``, ``cvt.rzi.ftz.f32.f32``,
``add.rn.ftz.sat.f32``).
"""

from __future__ import annotations

import re

from genomes.ptx import Instruction, Module
from genomes.transforms.base import Param, Transform

SCOPES = ("approx", "all")
_FTZ_OPS = frozenset("add sub mul fma mad div rcp sqrt rsqrt ex2 lg2 sin cos min max abs neg "
                     "setp set slct".split())
_APPROX_OPS = frozenset("div rcp sqrt rsqrt ex2 lg2 sin cos".split())
_TYPE = re.compile(r"[bsuf]\d+|bf16|f16x2|bf16x2|pred")
_FLOAT = frozenset({"f16", "bf16", "f32", "f64"})
_AFTER_FTZ = frozenset({"sat", "NaN", "xorsign", "relu", "satfinite"})


def accepts_ftz(ins: Instruction, scope: str) -> bool:
    """Whether ``ins`` is an f32 instruction that takes ``.ftz`` (and has none yet)."""
    mods = ins.mods
    if not mods or "ftz" in mods:
        return False
    if scope == "approx":
        return (ins.op in _APPROX_OPS and mods[-1] == "f32"
                and ("approx" in mods or "full" in mods))
    if ins.op == "cvt":
        types = [m for m in mods if _TYPE.fullmatch(m)]
        return (len(types) == 2 and "f32" in types and types[1] in _FLOAT
                and not any("x" in t for t in types)
                and not any(m in ("relu", "satfinite") for m in mods))
    return ins.op in _FTZ_OPS and mods[-1] == "f32"


def with_ftz(ins: Instruction) -> Instruction:
    mods = list(ins.mods)
    at = next((i for i, m in enumerate(mods) if m in _AFTER_FTZ or _TYPE.fullmatch(m)),
              len(mods))
    mods.insert(at, "ftz")
    return ins.with_(opcode=".".join([ins.op, *mods]))


def apply(module: Module, scope: str) -> int:
    def change(ins: Instruction) -> Instruction | None:
        return with_ftz(ins) if accepts_ftz(ins, scope) else None

    return sum(fn.rewrite(change) for fn in module.functions)


TRANSFORM = Transform(
    name="ftz",
    group="ftz",
    summary="flush f32 subnormals to zero (.ftz) on the approximate math ops (scope=approx) "
            "or on every f32 op that accepts it (scope=all)",
    applies_when="f32 instructions without .ftz whose syntax allows it",
    params=(Param("scope", default="approx", choices=SCOPES),),
    apply=apply,
    changes_results=True,
)
