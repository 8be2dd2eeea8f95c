"""If-conversion: a short forward branch around a few instructions becomes predication.

nvcc's libdevice math leaves small "triangles" in otherwise straight code (``erff``,
``logf``, ``log1pf``, ``tanhf``):

    @%p2 bra  $L__BB2_3;        ->     @!%p2 ex2.approx.ftz.f32 %f24, %f30;
    ex2.approx.ftz.f32 ...              @!%p2 sub.f32 %f26, %f25, %f24;
    sub.f32 ...                         @!%p2 copysign.f32 %f30, %f2, %f26;
    copysign.f32 %f30, ...
  $L__BB2_3:

The two are the same program: a PTX instruction under a false guard does nothing (no
write, no memory access), so guarding each skipped instruction with the negated branch
condition and dropping the branch and its label changes no result. It is done only where
that argument is plain: the skipped lines are instructions (scope braces without
declarations allowed), none a branch, return, call or barrier, none writing the
condition; the label is the target of this branch alone; the branch jumps forward.

Triangles convert innermost first, so an outer one may skip instructions that already
carry a guard X: each then runs under a fresh predicate, ``and``-ed from X and the outer
guard right before it (``%evif_p<N>``), which is true exactly when both paths reached it.
``coarsen`` uses this to reach such bodies: straight code can be repeated and interleaved
for k elements, branches cannot.
"""

from __future__ import annotations

import dataclasses

from genomes.ptx import Directive, Function, Instruction, Label, Line, Other

MAX_SKIPPED = 24  # predicated-off instructions still issue: only short blocks pay
_NOT_PREDICABLE = frozenset("bra brx ret exit call bar barrier trap brkpt".split())


_FRESH = "%evif_p"


def if_convert(fn: Function, start: int = 0, keep: frozenset[str] = frozenset()) -> int:
    """Convert every qualifying triangle after line ``start`` in place (module docstring),
    but never a branch to a label in ``keep``; returns how many."""
    done, fresh = 0, [0]

    def new_pred() -> str:
        fresh[0] += 1
        return f"{_FRESH}{fresh[0] - 1}"

    while (found := _triangle(fn, start, keep)) is not None:
        branch, label = found
        ins = fn.body[branch].stmt
        condition = ins.pred.lstrip("@!")
        guard = ("@" if ins.pred.startswith("@!") else "@!") + condition
        block: list[Line] = []
        taken = None  # the outer guard as a register, made when a skipped line needs it
        for line in fn.body[branch + 1:label]:
            stmt = line.stmt
            if not isinstance(stmt, Instruction):
                block.append(line)
                continue
            if not stmt.pred:
                block.append(dataclasses.replace(line, stmt=stmt.with_(pred=guard)))
                continue
            if taken is None:  # first in the block: the condition is not written in it
                taken = new_pred()  # true where the block runs: the branch not taken
                op = "not.pred" if guard.startswith("@!") else "mov.pred"
                block.insert(0, Line(Instruction(op, (taken, condition))))
            inner, both = stmt.pred.lstrip("@!"), new_pred()
            if stmt.pred.startswith("@!"):
                block.append(Line(Instruction("not.pred", (both, inner))))
                inner = both
                both = new_pred()
            block.append(Line(Instruction("and.pred", (both, taken, inner))))
            block.append(dataclasses.replace(line, stmt=stmt.with_(pred="@" + both)))
        fn.body[branch:label + 1] = block
        done += 1
    if fresh[0]:
        last = max((i for i, ln in enumerate(fn.body) if isinstance(ln.stmt, Directive)
                    and ln.stmt.keyword == ".reg"), default=-1)
        fn.body.insert(last + 1, Line(Directive(f".reg .pred \t{_FRESH}<{fresh[0]}>;")))
    return done


def _triangle(fn: Function, start: int, keep: frozenset[str]) -> tuple[int, int] | None:
    """(branch line, label line) of the first convertible triangle, or None."""
    body = fn.body
    labels = {ln.stmt.name: i for i, ln in enumerate(body) if isinstance(ln.stmt, Label)}
    for i in range(start, len(body)):
        ins = body[i].stmt
        if not (isinstance(ins, Instruction) and ins.op == "bra" and ins.pred):
            continue
        target = ins.operands[0].strip()
        at = labels.get(target)
        if at is None or at <= i or target in keep or _references(fn, target) != 1:
            continue
        if _plain_block(fn, i + 1, at, ins.pred.lstrip("@!")):
            return i, at
    return None


def _references(fn: Function, label: str) -> int:
    return sum(1 for ln in fn.body if isinstance(ln.stmt, Instruction)
               and any(o.strip() == label for o in ln.stmt.operands))


def _plain_block(fn: Function, first: int, end: int, condition: str) -> bool:
    count = 0
    for line in fn.body[first:end]:
        stmt = line.stmt
        if isinstance(stmt, (Label, Directive)):
            return False
        if isinstance(stmt, Other):
            continue  # braces (a scope declaring registers holds a Directive), .loc, comments
        if stmt.op in _NOT_PREDICABLE or condition in stmt.defs():
            return False
        count += 1
    return 0 < count <= MAX_SKIPPED
