"""Fast f32 reciprocal square root: ``1/sqrt(x)`` and ``a/sqrt(x)`` -> ``rsqrt.approx.f32``.

Pattern: ``sqrt.*.f32 %s, %x`` whose result feeds exactly one instruction, which is

* ``rcp.*.f32 %d, %s`` or ``div.*.f32 %d, 1.0, %s``: the sqrt becomes
  ``rsqrt.approx.f32 %s, %x`` and the consumer ``mov.f32 %d, %s``;
* ``div.*.f32 %d, %a, %s``: the sqrt becomes ``rsqrt.approx.f32 %s, %x`` and the
  consumer ``mul.f32 %d, %a, %s``.

Sound as a rewrite because ``%s`` has one definition (the sqrt, unpredicated) and one
use (the consumer, which reads it once), so changing what ``%s`` holds is seen by the
consumer alone, which is rewritten to match. ``.ftz`` on the sqrt is kept. The values
change in the last bits (rsqrt.approx: max relative error about 2^-22.9): fast math, the
correctness gate decides. (nvcc's ``rsqrtf`` already emits ``rsqrt.approx.f32``; this is
for ``1.0f/sqrtf(x)`` written out.)
"""

from __future__ import annotations

from collections import Counter

from genomes.ptx import Instruction, Line, Module, registers_in
from genomes.transforms.base import Transform
from genomes.transforms.fast_div import is_f32
from genomes.transforms.fast_rcp import is_one


def use_counts(fn) -> Counter:
    """How many times each register is read in ``fn`` (a register read twice by one
    instruction counts twice; guards count)."""
    counts: Counter = Counter()
    for ins in fn.instructions():
        counts.update(ins.uses())
    return counts


def def_sites(fn) -> dict[str, list[int]]:
    """Body indices of the instructions that write each register."""
    sites: dict[str, list[int]] = {}
    for i, line in enumerate(fn.body):
        if isinstance(line.stmt, Instruction):
            for reg in line.stmt.defs():
                sites.setdefault(reg, []).append(i)
    return sites


def _consumer(ins: Instruction, s: str) -> str | None:
    """How ``ins`` consumes ``%s``: "recip" (1/s), "div" (a/s), or None."""
    if ins.pred is not None and s in registers_in(ins.pred):
        return None
    if not is_f32(ins) or ins.operands[-1].strip() != s:
        return None
    if ins.op == "rcp" and len(ins.operands) == 2:
        return "recip"
    if ins.op == "div" and len(ins.operands) == 3:
        return "recip" if is_one(ins.operands[1]) else "div"
    return None


def apply(module: Module) -> int:
    changed = 0
    for fn in module.functions:
        uses, sites = use_counts(fn), def_sites(fn)
        users: dict[str, int] = {}
        for i, line in enumerate(fn.body):
            if isinstance(line.stmt, Instruction):
                for reg in set(line.stmt.uses()):
                    users[reg] = i
        for i, line in enumerate(fn.body):
            sq = line.stmt
            if not (isinstance(sq, Instruction) and sq.op == "sqrt" and is_f32(sq)
                    and sq.pred is None and len(sq.operands) == 2):
                continue
            s, x = sq.operands[0].strip(), sq.operands[1].strip()
            if sites.get(s) != [i] or uses[s] != 1 or s == x or s not in users:
                continue
            j = users[s]
            use = fn.body[j].stmt
            kind = _consumer(use, s)
            if kind is None:
                continue
            ftz = ("ftz",) if "ftz" in sq.mods else ()
            rsqrt = sq.with_(opcode=".".join(["rsqrt", "approx", *ftz, "f32"]))
            fn.body[i] = Line(rsqrt, line.before, line.after)
            if kind == "recip":
                new = use.with_(opcode="mov.f32", operands=(use.operands[0], s))
            else:
                mul_ftz = ("ftz",) if "ftz" in use.mods else ()
                new = use.with_(opcode=".".join(["mul", *mul_ftz, "f32"]))
            fn.body[j] = Line(new, fn.body[j].before, fn.body[j].after)
            changed += 1
    return changed


TRANSFORM = Transform(
    name="fast_rsqrt",
    group="fast_rsqrt",
    summary="1/sqrt(x) -> rsqrt.approx.f32, a/sqrt(x) -> a*rsqrt.approx.f32(x); changes "
            "results in the last bits",
    applies_when="an unpredicated f32 sqrt whose result is read once, by an f32 rcp or a "
                 "division by it",
    params=(),
    apply=apply,
    changes_results=True,
)
