"""If-conversion: short forward branches around a few instructions become predication.

nvcc's libdevice math leaves small "triangles" in otherwise straight code (``erff``,
``logf``, ``log1pf``, ``tanhf``):

    @%p2 bra  $L__BB2_3;        ->     @!%p2 ex2.approx.ftz.f32 %f24, %f30;
    ex2.approx.ftz.f32 ...              @!%p2 sub.f32 %f26, %f25, %f24;
    sub.f32 ...                         @!%p2 copysign.f32 %f30, %f2, %f26;
    copysign.f32 %f30, ...
  $L__BB2_3:

and an ``if (...) { ...; return; }`` in a kernel leaves a "diamond" whose two sides meet
at a join label (often the exit block):

    @%p2 bra  $L__BB10_3;       ->     @!%p2 st.global.f32 [%rd1], %f5;
    st.global.f32 [%rd1], %f5;          @%p2 st.global.u32 [%rd1], %r6;
    bra.uni   $L__BB10_4;             $L__BB10_4:
  $L__BB10_3:
    st.global.u32 [%rd1], %r6;
  $L__BB10_4:

(nvcc also writes a diamond as ``@P bra X; bra.uni Y; X: ...``, with X reached by that
branch alone: that is read as ``@!P bra Y; ...`` first.) Each is the same program: a
PTX instruction under a false guard does nothing (no write, no memory access), so
guarding each side with the condition under which it ran and dropping the branches (and
the label only they reached) changes no result. It is
done only where that argument is plain: each side holds only instructions (scope braces
without declarations allowed), none a branch, return, call or barrier, none writing the
condition; the jumped-to side of a diamond is reached by its branch alone; every branch
jumps forward. A label other branches still reach stays (a diamond's join, a triangle's
label that several branches skip to).

Blocks convert innermost first, so an outer one may skip instructions that already
carry a guard X: each then runs under a fresh predicate, ``and``-ed from X and the outer
guard right before it (``%evif_p<N>``), which is true exactly when both paths reached it.
Where both sides of a diamond end by storing to the same address (``y[i] = c ? a : b``
written as if/else), the two stores become one select and one unguarded store
(``_merged_store``), which coarsen's vectorizer can then merge across copies.
``coarsen`` uses this to reach such bodies: straight code can be repeated and interleaved
for k elements, branches cannot.
"""

from __future__ import annotations

import dataclasses

from genomes.memory import effect
from genomes.ptx import Directive, Function, Instruction, Label, Line, Other
from genomes.vectorize import SIZES

MAX_SKIPPED = 24  # predicated-off instructions still issue: only short blocks pay
_NOT_PREDICABLE = frozenset("bra brx ret exit call bar barrier trap brkpt".split())


_FRESH = "%evif_p"
# a merged store's value, by width: %evif_w0 (.b32), %evif_d0 (.b64), %evif_h0 (.b16);
# names of letters then digits, as register ranges (%r<N>) are
_VALUE = {16: "%evif_h", 32: "%evif_w", 64: "%evif_d"}


def exit_labels(fn) -> frozenset[str]:
    """Labels that only return (the bounds check's target): not branches to if-convert."""
    exits, body = set(), fn.body
    for i, line in enumerate(body):
        if isinstance(line.stmt, Label):
            nxt = next((ln.stmt for ln in body[i + 1:] if isinstance(ln.stmt, Instruction)),
                       None)
            if nxt is not None and nxt.op == "ret" and not nxt.pred:
                exits.add(line.stmt.name)
    return frozenset(exits)


def if_convert(fn: Function, start: int = 0, keep: frozenset[str] = frozenset()) -> int:
    """Convert every qualifying triangle and diamond after line ``start`` in place (module
    docstring), but never a branch to a label in ``keep``; returns how many."""
    done, fresh, values = 0, [0], {}

    def new_pred() -> str:
        fresh[0] += 1
        return f"{_FRESH}{fresh[0] - 1}"

    def new_value(bits: int) -> str:
        values[bits] = values.get(bits, 0) + 1
        return f"{_VALUE[bits]}{values[bits] - 1}"

    done += _branch_over_jump(fn, start)
    while (found := _triangle(fn, start, keep) or _diamond(fn, start, keep)) is not None:
        branch, label, jump, join = found
        ins = fn.body[branch].stmt
        condition = ins.pred.lstrip("@!")
        taken = ins.pred  # the guard under which the branch jumps
        falls = _negated(taken)
        if join is None:  # triangle: the skipped lines run where the branch falls through
            block = _guarded(fn.body[branch + 1:label], falls, condition, new_pred)
            # the label stays where other branches still jump to it
            end = label + 1 if _references(fn, fn.body[label].stmt.name) == 1 else label
            fn.body[branch:end] = block
        else:  # diamond: [branch+1, jump) falls through, (label, join) is jumped to
            sides = [fn.body[branch + 1:jump], fn.body[label + 1:join]]
            merged = _merged_store(sides, taken, new_value)
            block = (_guarded(sides[0], falls, condition, new_pred)
                     + fn.body[jump + 1:label]  # blank lines and comments before the label
                     + _guarded(sides[1], taken, condition, new_pred) + merged)
            fn.body[branch:join] = block
        done += 1
    declarations = [f".reg .b{bits} \t{_VALUE[bits]}<{n}>;" for bits, n in values.items()]
    if fresh[0]:
        declarations.append(f".reg .pred \t{_FRESH}<{fresh[0]}>;")
    if declarations:
        last = max((i for i, ln in enumerate(fn.body) if isinstance(ln.stmt, Directive)
                    and ln.stmt.keyword == ".reg"), default=-1)
        fn.body[last + 1:last + 1] = [Line(Directive(d)) for d in declarations]
    return done


def _merged_store(sides: list[list[Line]], taken: str, new_value) -> list[Line]:
    """Where both sides of a diamond end their memory work with a plain store to the same
    address, of the same width (``if (c) y[i] = a; else y[i] = b;``), those two stores
    leave their sides (``sides`` is edited) for one select and one unguarded store after
    both, which a vectorizer can merge with its neighbours. Each store moves only past
    lines of its own side that neither touch memory nor write what it reads, and past the
    other side's lines, which do not run on its path: no result changes. Returns the new
    lines (none where the sides do not qualify)."""
    found = [_final_store(side) for side in sides]
    if None in found:
        return []
    (i, a), (j, b) = found
    if a.mods[:-1] != b.mods[:-1] or a.operands[0].strip() != b.operands[0].strip() \
            or SIZES.get(a.mods[-1]) != SIZES.get(b.mods[-1]):
        return []
    bits = 8 * SIZES[a.mods[-1]]
    if bits not in _VALUE:
        return []
    value = new_value(bits)
    fall, jumped = a.operands[1].strip(), b.operands[1].strip()
    on_true = (jumped, fall) if not taken.startswith("@!") else (fall, jumped)
    del sides[0][i], sides[1][j]
    store = ".".join(("st", *a.mods[:-1], f"b{bits}"))  # st.global.f32 -> st.global.b32
    return [Line(Instruction(f"selp.b{bits}", (value, *on_true, taken.lstrip("@!")))),
            Line(Instruction(store, (a.operands[0], value)))]


def _final_store(side: list[Line]) -> tuple[int, Instruction] | None:
    """(position, instruction) of the side's last memory access, when it is an unguarded
    scalar store of a register that no later line of the side writes, nor its address."""
    touches = [k for k, ln in enumerate(side)
               if isinstance(ln.stmt, Instruction) and effect(ln.stmt) != "alu"]
    if not touches:
        return None
    k = touches[-1]
    st = side[k].stmt
    if st.op != "st" or st.pred or len(st.operands) != 2 or st.mods[-1] not in SIZES \
            or not st.operands[1].strip().startswith("%") or "{" in st.operands[1]:
        return None
    reads = set(st.uses())
    if any(isinstance(ln.stmt, Instruction) and reads & set(ln.stmt.defs())
           for ln in side[k + 1:]):
        return None
    return k, st


def _guarded(lines: list[Line], guard: str, condition: str, new_pred) -> list[Line]:
    """``lines`` (a block that ran where ``guard`` held) guarded by it; an instruction that
    had a guard X of its own runs under X and ``guard``, and-ed into a fresh predicate."""
    block: list[Line] = []
    runs = None  # the guard as a register, made when a line needs it
    for line in lines:
        stmt = line.stmt
        if not isinstance(stmt, Instruction):
            block.append(line)
            continue
        if not stmt.pred:
            block.append(dataclasses.replace(line, stmt=stmt.with_(pred=guard)))
            continue
        if runs is None:  # first in the block: the condition is not written in it
            runs = new_pred()
            op = "not.pred" if guard.startswith("@!") else "mov.pred"
            block.insert(0, Line(Instruction(op, (runs, condition))))
        inner, both = stmt.pred.lstrip("@!"), new_pred()
        if stmt.pred.startswith("@!"):
            block.append(Line(Instruction("not.pred", (both, inner))))
            inner = both
            both = new_pred()
        block.append(Line(Instruction("and.pred", (both, runs, inner))))
        block.append(dataclasses.replace(line, stmt=stmt.with_(pred="@" + both)))
    return block


def _branches(fn: Function, start: int, keep: frozenset[str]):
    """(branch line, target label line, label lines, branches to the target) of each
    guarded forward branch after ``start`` to a label not in ``keep``."""
    body = fn.body
    labels = {ln.stmt.name: i for i, ln in enumerate(body) if isinstance(ln.stmt, Label)}
    for i in range(start, len(body)):
        ins = body[i].stmt
        if not (isinstance(ins, Instruction) and ins.op == "bra" and ins.pred):
            continue
        target = ins.operands[0].strip()
        at = labels.get(target)
        if at is not None and at > i and target not in keep:
            yield i, at, labels, _references(fn, target)


def _triangle(fn: Function, start: int, keep: frozenset[str]):
    """(branch line, label line, None, None) of the first convertible triangle, or None. Other
    branches may jump to the label too (``if (a) goto L; ...; if (b) goto L; ...; L:``):
    none lands inside the block (it holds no label), and the label stays for them."""
    for i, at, _, _ in _branches(fn, start, keep):
        if _plain_block(fn, i + 1, at, fn.body[i].stmt.pred.lstrip("@!")):
            return i, at, None, None
    return None


def _diamond(fn: Function, start: int, keep: frozenset[str]):
    """(branch line, else-label line, ``bra JOIN`` line, join-label line) of the first
    convertible diamond: the fall-through side ends in an unguarded ``bra JOIN``, JOIN a
    label after the jumped-to side; or None."""
    for i, at, labels, refs in _branches(fn, start, keep):
        if refs != 1:  # another branch lands on the jumped-to side: it is no one path's
            continue
        jump = _last_instruction(fn, at)
        ins = fn.body[jump].stmt if jump > i else None
        if not (isinstance(ins, Instruction) and ins.op == "bra" and not ins.pred):
            continue
        join = labels.get(ins.operands[0].strip())
        condition = fn.body[i].stmt.pred.lstrip("@!")
        if join is not None and join > at and _plain_block(fn, i + 1, jump, condition) \
                and _plain_block(fn, at + 1, join, condition):
            return i, at, jump, join
    return None


def _branch_over_jump(fn: Function, start: int) -> int:
    """Rewrite ``@P bra X; bra Y; X:`` (X reached by this branch alone) as ``@!P bra Y;``,
    the same jumps, in place; returns how many. nvcc lays out some if/else this way, and
    the diamond it hides is then plain to see."""
    body, done = fn.body, 0
    for i in range(len(body) - 1, start - 1, -1):  # from the end: deletions keep i valid
        ins = body[i].stmt
        if not (isinstance(ins, Instruction) and ins.op == "bra" and ins.pred):
            continue
        j = _next_statement(fn, i)
        k = _next_statement(fn, j) if j is not None else None
        if k is None:
            continue
        jump, label = body[j].stmt, body[k].stmt
        target = ins.operands[0].strip()
        if isinstance(jump, Instruction) and jump.op == "bra" and not jump.pred \
                and isinstance(label, Label) and label.name == target \
                and _references(fn, target) == 1:
            body[i] = dataclasses.replace(body[i], stmt=ins.with_(
                pred=_negated(ins.pred), operands=(jump.operands[0].strip(),)))
            del body[i + 1:k + 1]
            done += 1
    return done


def _negated(guard: str) -> str:
    """``@!%p`` for ``@%p`` and ``@%p`` for ``@!%p``."""
    return ("@" if guard.startswith("@!") else "@!") + guard.lstrip("@!")


def _next_statement(fn: Function, after: int) -> int | None:
    """The line of the first instruction or label after line ``after``, or None."""
    return next((j for j in range(after + 1, len(fn.body))
                 if isinstance(fn.body[j].stmt, (Instruction, Label))), None)


def _last_instruction(fn: Function, before: int) -> int:
    """The line of the last instruction before line ``before`` (-1 when none)."""
    return next((j for j in range(before - 1, -1, -1)
                 if isinstance(fn.body[j].stmt, Instruction)), -1)


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
