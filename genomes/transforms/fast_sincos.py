"""Fast sin/cos: libdevice's inlined ``__nv_sinf``/``__nv_cosf`` -> ``sin.approx``/
``cos.approx`` (``__sinf``/``__cosf``; fast math).

Triton's ``tl.sin``/``tl.cos`` (and Inductor's, e.g. the rotary embeddings a Hugging Face
Llama computes inside its step) are libdevice's: a Cody-Waite reduction by pi/2, a
Payne-Hanek slow path for |x| >= 105615 (a loop over ``__cudart_i2opi_f`` through local
memory), and two polynomials: ~40 instructions and five branches an element, which make
such a kernel wait on instruction issue. LLVM names the blocks of Triton's PTX, and each
inlined call ends at a label commented ``%__nv_cosf.exit`` or ``%__nv_sinf.exit`` (with a
number after the first). Where ``sin(x)`` follows ``cos(x)``, LLVM shares the first one's
reduction with it: its code starts right after an earlier exit label, without a reduction
of its own.

Rule, for a function as a whole (all its regions or none):

- a region runs back from its exit label to its own ``mul.f32 t, x, 0f3F22F983`` (x times
  2/pi, with an ``abs`` of the same x in the region), or, where there is none before the
  previous exit label, from that label on; such a region's x is the x of the one earlier
  region whose registers it reads;
- its result is what its last float instruction before the exit label writes;
- an instruction whose value is read outside the regions (or by such an instruction) is
  not the region's but code LLVM scheduled into it, and stays where it is: one from the
  region's start to its first label or branch (code every thread runs), or an unguarded
  one without effects anywhere in it (an ``ld.param`` in its last block), its register
  written nowhere else; everything else in the span is the region's;
- nothing of the regions has an effect outside them: no store but to local memory, no
  load but from read-only global or local memory, no barrier or call; their branches
  stay inside them or land on their exit labels and no other branch lands inside; no
  register they write but the results is read elsewhere, a result not before its exit
  label; x is not written by a region.

Each region's code is removed, and right after its exit label x is reduced to [-pi, pi]
by a three-part 2 pi (Cody-Waite: ``k = rint(x / 2pi)``, ``r = x - k * 2pi`` in three
``fma``) and ``cos.approx[.ftz].f32 result, r`` (``sin``) computes the value (``.ftz``
where the region's arithmetic flushed subnormals). ``cos.approx`` alone reduces in single
precision, and its error grows with |x|: on a Llama's angles (0-511) it was 1.2e-4, which
the gate rejected on bf16 outputs near zero; reduced first, the error is that of the
approximation on [-pi, pi] (2^-20.5) plus ~1e-7 for |x| up to 1e5 (libdevice's fast
path's range), against libdevice's ~1 ulp: the correctness gate's tolerance decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from genomes.memory import PointerInfo, effect
from genomes.ptx import Directive, Function, Instruction, Label, Line, Module
from genomes.transforms.base import Transform
from genomes.transforms.l2_policy import fresh_register, prologue_index

TWO_OVER_PI = "3F22F983"
# 1 / 2pi and 2pi in three parts, negated (-6.2831855, +1.7484555e-07, +7.1054274e-15)
_INV_TWO_PI = "0f3E22F983"
_MINUS_TWO_PI = ("0fC0C90FDB", "0f343BBD2E", "0f28000000")
_TEMPS = 5  # registers a region's reduction takes
_EXIT = re.compile(r"%__nv_(sin|cos)f\.exit\d*\b")
_FLOW = frozenset({"bra", "brx"})


@dataclass
class _Region:
    kind: str  # "sin" | "cos"
    start: int
    exit: int  # the exit label's index
    x: str | None = None  # None: read from the earlier region it shares a reduction with
    result: str = ""
    own: set[int] = field(default_factory=set)  # indices of its instructions and labels


def _own_start(fn: Function, exit_at: int, floor: int) -> tuple[int, str] | None:
    """(index, x) of a ``mul.f32 t, x, 2/pi`` between ``floor`` and the exit label."""
    for i in range(exit_at - 1, floor - 1, -1):
        stmt = fn.body[i].stmt
        if (isinstance(stmt, Instruction) and stmt.opcode in ("mul.f32", "mul.ftz.f32")
                and stmt.pred is None and len(stmt.operands) == 3
                and stmt.operands[2].strip().upper() == f"0F{TWO_OVER_PI}"):
            return i, stmt.operands[1].strip()
    return None


def _regions(fn: Function) -> list[_Region]:
    regions, floor = [], 0
    for k, line in enumerate(fn.body):
        found = _EXIT.search(line.after) if isinstance(line.stmt, Label) else None
        if not found:
            continue
        own = _own_start(fn, k, floor)
        start, x = own if own else (floor, None)
        regions.append(_Region(found.group(1), start, k, x))
        floor = k + 1
    return regions


def _classify(fn: Function, regions: list[_Region]) -> bool:
    """Fill each region's ``result`` and ``own``; False where the rule is not met."""
    span = {i: r for r in regions for i in range(r.start, r.exit)}
    ins_at = {i: fn.body[i].stmt for i in span if isinstance(fn.body[i].stmt, Instruction)}
    for r in regions:  # the value at the exit: its last float instruction's
        last = max((i for i in range(r.start, r.exit) if i in ins_at
                    and ins_at[i].mods[-1:] == ("f32",)), default=None)
        if last is None or len(ins_at[last].defs()) != 1:
            return False
        r.result = ins_at[last].defs()[0]
    results = {r.result for r in regions}
    free = set()  # the code every thread runs from a region's start to its first branch
    for r in regions:
        for i in range(r.start, r.exit):
            stmt = fn.body[i].stmt
            if isinstance(stmt, Label) or (isinstance(stmt, Instruction) and stmt.op in _FLOW):
                break
            free.add(i)
    # a pure instruction elsewhere in a region may have been scheduled there too (an
    # ld.param in its last block): where it stays, it runs unconditionally, which it may
    stretch = set(free)
    free |= {i for i, ins in ins_at.items() if not ins.pred and (
        effect(ins) == "alu" and ins.op not in _FLOW or (ins.op == "ld" and ins.space == "param"))}
    outside_uses = set()
    for i, line in enumerate(fn.body):
        if i not in span and isinstance(line.stmt, Instruction):
            outside_uses.update(line.stmt.uses())
    kept: set[int] = set()
    while True:  # what is read outside, or by what stays, stays (but the results)
        needed = (outside_uses | {u for i in kept for u in ins_at[i].uses()}) - results
        more = {i for i in free & ins_at.keys() if i not in kept
                and set(ins_at[i].defs()) & needed}
        if not more:
            break
        kept |= more
    defs = PointerInfo(fn).defs
    if any(len(defs[d]) > 1 for i in kept - stretch for d in ins_at[i].defs()):
        return False  # a register written twice: where its writer runs matters
    for r in regions:
        r.own = {i for i in range(r.start, r.exit) if i not in kept}
    return True


def _written(fn: Function, r: _Region) -> set[str]:
    return {d for i in r.own if isinstance(fn.body[i].stmt, Instruction)
            for d in fn.body[i].stmt.defs()}


def _closed(fn: Function, regions: list[_Region]) -> bool:
    """The rule's conditions on effects, branches, registers and each region's x."""
    own = set().union(*(r.own for r in regions))
    labels = {fn.body[i].stmt.name for i in own if isinstance(fn.body[i].stmt, Label)}
    exits = {fn.body[r.exit].stmt.name for r in regions}
    written = {id(r): _written(fn, r) for r in regions}
    for r in regions:
        if r.x is None:  # shares an earlier region's reduction: that region's x
            reads = {u for i in r.own if isinstance(fn.body[i].stmt, Instruction)
                     for u in fn.body[i].stmt.uses()}
            sources = [q for q in regions if q.exit < r.start and written[id(q)] & reads]
            if len(sources) != 1 or sources[0].x is None:
                return False
            r.x = sources[0].x
        elif not any(isinstance(fn.body[i].stmt, Instruction) and fn.body[i].stmt.op == "abs"
                     and fn.body[i].stmt.operands[1].strip() == r.x for i in r.own):
            return False
    all_written = set().union(*written.values())
    results = {r.result: r.exit for r in regions}
    if any(r.x in all_written for r in regions) or len(results) != len(regions):
        return False
    for i, line in enumerate(fn.body):
        ins = line.stmt
        if not isinstance(ins, Instruction):
            continue
        target = ins.operands[-1].strip() if ins.op in _FLOW else None
        if i in own:
            kind = effect(ins)
            if target is not None and target not in labels | exits:
                return False
            if kind == "store" and ins.space != "local":
                return False
            if kind == "load" and not (ins.space == "local" or "nc" in ins.mods):
                return False
            if target is None and kind not in ("alu", "load", "store"):
                return False
            continue
        if target in labels:
            return False  # a jump into a region from outside it
        for reg in ins.uses():
            if reg in all_written and (reg not in results or i < results[reg]):
                return False
    return True


def _replace_in(fn: Function) -> int:
    regions = _regions(fn)
    if not regions or not _classify(fn, regions) or not _closed(fn, regions):
        return 0
    stem = fresh_register(fn, "%evo_sc")
    at_exit = {}
    for n, r in enumerate(regions):
        ftz = any(isinstance(fn.body[i].stmt, Instruction) and "ftz" in fn.body[i].stmt.mods
                  for i in r.own)
        op = ".".join([r.kind, "approx", *(["ftz"] if ftz else []), "f32"])
        at_exit[r.exit] = _reduced(op, r.result, r.x, [f"{stem}{_TEMPS * n + j}"
                                                       for j in range(_TEMPS)])
    gone = set().union(*(r.own for r in regions))
    body = []
    for i, line in enumerate(fn.body):
        if i in gone:
            continue
        body.append(line)
        body += [Line(ins, "\t", "\n") for ins in at_exit.get(i, ())]
    at = prologue_index(fn)
    body[at:at] = [Line(Directive(f".reg .f32 \t{stem}<{_TEMPS * len(regions)}>;"), "\t", "\n")]
    fn.body[:] = body
    return len(regions)


def _reduced(op: str, result: str, x: str, t: list[str]) -> list[Instruction]:
    """``op result, r`` with r = x reduced to [-pi, pi] (the module's rule)."""
    return [Instruction("mul.f32", (t[0], x, _INV_TWO_PI)),
            Instruction("cvt.rni.f32.f32", (t[1], t[0])),
            Instruction("fma.rn.f32", (t[2], t[1], _MINUS_TWO_PI[0], x)),
            Instruction("fma.rn.f32", (t[3], t[1], _MINUS_TWO_PI[1], t[2])),
            Instruction("fma.rn.f32", (t[4], t[1], _MINUS_TWO_PI[2], t[3])),
            Instruction(op, (result, t[4]))]


def apply(module: Module) -> int:
    """Replace the libdevice sinf/cosf regions of every function that meets the rule."""
    return sum(_replace_in(fn) for fn in module.functions)


TRANSFORM = Transform(
    name="fast_sincos",
    group="fast_sincos",
    summary="replace libdevice's inlined sinf/cosf (Triton's tl.sin/tl.cos: reduction, "
            "slow path, polynomials) with sin.approx/cos.approx; changes results",
    applies_when="Triton PTX whose blocks LLVM named, with __nv_sinf/__nv_cosf regions "
                 "closed to the rest of the kernel (rotary embeddings computed in the step)",
    params=(),
    apply=apply,
    changes_results=True,
)
