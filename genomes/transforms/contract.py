"""Floating-point contraction: ``mul.f32`` + ``add.f32`` -> ``fma.rn.f32`` (fast math).

``mode=fuse``: a product ``mul[.rn][.ftz].f32 %p, %a, %b`` whose result is read exactly
once, by an ``add[.rn][.ftz][.sat].f32 %d, %p, %c`` (either operand order) later in the
same basic block, becomes ``fma.rn[.ftz][.sat].f32 %d, %a, %b, %c`` at the add's place and
the mul is deleted. Conditions that make the move sound: ``%p`` has that one definition
(unpredicated) and that one use; neither ``%a`` nor ``%b`` is written between the two;
both have the same ``.ftz``. A ``sub`` fuses where the negation can be folded into a hex
immediate (``%p - 0f3F800000`` -> ``fma(a, b, 0fBF800000)``; ``%c - %p`` when ``%a`` or
``%b`` is an immediate).

``mode=relax``: drop ``.rn`` from f32 ``add/sub/mul``. An explicit rounding qualifier
keeps ptxas from contracting (``-fmad=false`` PTX and some hand-written PTX carry it);
without it ptxas fuses on its own.

Either way results change in the last bits (one rounding instead of two): the
correctness gate decides. nvcc 13 ``-O3`` already emits ``fma.rn.f32`` and unqualified
``mul``/``add`` (contractible) for the suite, so on nvcc output this gene rarely applies.
"""

from __future__ import annotations

from genomes.memory import basic_blocks
from genomes.ptx import Instruction, Line, Module
from genomes.transforms.base import Param, Transform
from genomes.transforms.fast_rsqrt import def_sites, use_counts

MODES = ("fuse", "relax")
_MUL_MODS = frozenset({"rn", "ftz"})
_ADD_MODS = frozenset({"rn", "ftz", "sat"})


def _plain(ins: Instruction, op: str, allowed: frozenset) -> bool:
    return (ins.op == op and len(ins.mods) >= 1 and ins.mods[-1] == "f32"
            and set(ins.mods[:-1]) <= allowed)


def negate_immediate(operand: str) -> str | None:
    """``-x`` for a hex f32 immediate (``0f3F800000`` -> ``0fBF800000``), else None."""
    text = operand.strip()
    if text[:2] not in ("0f", "0F") or len(text) != 10:
        return None
    try:
        bits = int(text[2:], 16) ^ 0x80000000
    except ValueError:
        return None
    return f"0f{bits:08X}"


def _fma_operands(use: Instruction, p: str, a: str, b: str) -> tuple[str, str, str] | None:
    """(a', b', c) with use == a'*b' + c once ``p = a*b``, or None if it cannot be said."""
    x, y = (o.strip() for o in use.operands[1:3])
    if use.op == "add":
        return (a, b, y) if x == p else (a, b, x)
    if x == p:  # a*b - y
        neg = negate_immediate(y)
        return (a, b, neg) if neg else None
    neg_a, neg_b = negate_immediate(a), negate_immediate(b)  # x - a*b
    if neg_a:
        return neg_a, b, x
    return (a, neg_b, x) if neg_b else None


def _fuse(fn) -> int:
    uses, sites = use_counts(fn), def_sites(fn)
    block_of = {i: k for k, block in enumerate(basic_blocks(fn)) for i in block}
    replace: dict[int, Instruction] = {}
    dead: set[int] = set()
    for j, line in enumerate(fn.body):
        use = line.stmt
        if not (isinstance(use, Instruction) and len(use.operands) == 3
                and (_plain(use, "add", _ADD_MODS) or _plain(use, "sub", _ADD_MODS))):
            continue
        for p in dict.fromkeys(o.strip() for o in use.operands[1:3]):
            found = sites.get(p)
            if not p.startswith("%") or uses[p] != 1 or not found or len(found) != 1:
                continue
            i = found[0]
            mul = fn.body[i].stmt
            if (i >= j or i in dead or block_of.get(i) != block_of.get(j) or mul.pred
                    or not _plain(mul, "mul", _MUL_MODS) or len(mul.operands) != 3
                    or ("ftz" in mul.mods) != ("ftz" in use.mods)):
                continue
            a, b = (o.strip() for o in mul.operands[1:3])
            if p in (a, b) or any(i < k < j for r in (a, b) for k in sites.get(r, ())):
                continue
            fma_ops = _fma_operands(use, p, a, b)
            if fma_ops is None:
                continue
            mods = ["rn", *(m for m in ("ftz", "sat") if m in use.mods), "f32"]
            replace[j] = use.with_(opcode=".".join(["fma", *mods]),
                                   operands=(use.operands[0], *fma_ops))
            dead.add(i)
            break
    for j, new in replace.items():
        fn.body[j] = Line(new, fn.body[j].before, fn.body[j].after)
    fn.body[:] = [ln for i, ln in enumerate(fn.body) if i not in dead]
    return len(replace)


def _relax(ins: Instruction) -> Instruction | None:
    if ins.op in ("add", "sub", "mul") and "rn" in ins.mods and ins.mods[-1] == "f32":
        return ins.with_(opcode=".".join([ins.op, *(m for m in ins.mods if m != "rn")]))
    return None


def apply(module: Module, mode: str) -> int:
    if mode == "relax":
        return sum(fn.rewrite(_relax) for fn in module.functions)
    return sum(_fuse(fn) for fn in module.functions)


TRANSFORM = Transform(
    name="contract",
    group="contract",
    summary="fuse single-use f32 mul+add into fma.rn.f32 (mode=fuse), or drop .rn from f32 "
            "add/sub/mul so ptxas may fuse (mode=relax); changes results in the last bits",
    applies_when="fuse: an f32 product read once, by an add/sub in its basic block; "
                 "relax: f32 add/sub/mul with an explicit .rn",
    params=(Param("mode", default="fuse", choices=MODES),),
    apply=apply,
    changes_results=True,
)
