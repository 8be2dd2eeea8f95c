"""Address global accesses from an earlier access's address register plus a constant,
where the launch's every thread shows the difference constant; the arithmetic that
computed their own addresses is left dead, for ptxas to drop.

Triton computes every element's address of a thread's tile on its own where its axis
analysis cannot show the index contiguous: a rotary embedding reads its eight angles
``(x0 % 64 % 32) * 512 + x1`` 2 KiB apart, each through ~15 instructions of lowered
divisions and remainders (8- and 16-bit ones, by LLVM). Those addresses are not
consecutive, so ``vec_ld_index`` cannot merge them, but each is the first one plus a
constant on every thread: ``[%rd7]`` can be ``[%rd5+2048]``. This transform evaluates the
addresses for every thread of the launch (``genomes.lane_eval``: exact integer semantics,
no sampling) and makes that rewrite where it holds.

Rule, in the function's straight-line head (before any branch): a global load or store B
is rewritten to ``[A's address register + c]`` where A is the earliest global access
before it whose address, on every thread on which B's guard holds (every thread where
the guard cannot be evaluated), is B's address minus the same constant c (a 32-bit
offset), with the same pointer parameter. Nothing moves and nothing else changes: B
touches the same bytes on every thread that runs it. A's register is defined once,
unguarded (what ``lane_eval`` evaluates), so it holds that value wherever B runs.

The proof holds for the launch it was made with: the genome keeps that launch (a later
gene that would change it is a no-op, ``genomes.genome``).
"""

from __future__ import annotations

from dataclasses import dataclass

from genomes import proofs
from genomes.lane_merge import guard_mask, head_end
from genomes.memory import PointerInfo, effect
from genomes.ptx import Address, Function, Instruction, Line, Module
from genomes.transforms.base import NotApplicable, Transform, launched

PROOF = "addr_rebase/1"  # genomes.proofs: by (slice, accesses, launch), seconds each to redo
_LIMIT = 1 << 31  # a PTX address offset is a signed 32-bit immediate


@dataclass(frozen=True)
class _Access:
    index: int  # position in fn.body
    ins: Instruction
    base: str
    offset: int
    guard: str  # the guard's predicate register without @/@!, or ""


def _accesses(fn: Function, stop: int) -> list[_Access]:
    found = []
    for i, line in enumerate(fn.body[:stop]):
        ins = line.stmt
        if not (isinstance(ins, Instruction) and ins.op in ("ld", "st")
                and ins.space == "global" and effect(ins) in ("load", "store")):
            continue
        addr = ins.address()
        if addr is None or not addr.base.startswith("%"):
            continue
        found.append(_Access(i, ins, addr.base, addr.offset, (ins.pred or "").lstrip("@!")))
    return found


def _classes(chunk: dict, registers: list[str], where=None) -> dict[str, tuple[int, int]]:
    """{register: (class, its first thread's offset)} for the chunk's pointer registers:
    two registers share a class exactly where they point into the same parameter a
    constant distance apart on every thread of the chunk (``where``: on those threads;
    their offsets minus their first thread's are equal arrays). Grouping by that makes the
    pairs' check O(1) each; the arrays are compared whole within a group of equal
    samples, so a class is never a guess."""
    import numpy as np

    from genomes.lane_eval import Pointer

    groups: dict[tuple, list[tuple[int, np.ndarray]]] = {}
    classes: dict[str, tuple[int, int]] = {}
    count = 0
    for reg in registers:
        value = chunk.get(reg)
        if not isinstance(value, Pointer):
            continue
        offset = value.offset if where is None else value.offset[where]
        first = int(offset[0])
        shape = offset - first
        members = groups.setdefault((value.param, shape[::4096].tobytes()), [])
        for number, other in members:
            if np.array_equal(other, shape):
                break
        else:
            number, count = count, count + 1
            members.append((number, shape))
        classes[reg] = (number, first)
    return classes


def _refine(groups: list[list[str]] | None, distance: dict[str, int], classes: dict,
            registers: list[str]) -> list[list[str]]:
    """The pointer registers grouped so that a group's are a constant apart on every
    thread seen so far, refined by one more chunk's ``classes`` (``_classes``; None: the
    first chunk's); ``distance`` holds each register's offset minus its group's first
    register's, kept up to date. O(registers) a chunk, where comparing every pair is
    O(registers^2): Triton's kernels coarsened by 4 have 60 accesses."""
    if groups is None:
        by_class: dict[int, list[str]] = {}
        for reg in registers:
            if reg in classes:
                by_class.setdefault(classes[reg][0], []).append(reg)
        for group in by_class.values():
            for reg in group:
                distance[reg] = classes[reg][1] - classes[group[0]][1]
        return list(by_class.values())
    out = []
    for group in groups:
        parts: dict[tuple, list[str]] = {}
        for reg in group:  # still together: one class here, at the distance they had
            if reg in classes:
                number, first = classes[reg]
                parts.setdefault((number, first - distance[reg]), []).append(reg)
        for part in parts.values():
            shift = distance[part[0]]
            for reg in part:
                distance[reg] -= shift
            out.append(part)
    return out


def _proven(fn: Function, info: PointerInfo, accesses: list[_Access], launch) -> dict:
    """{index of B in ``accesses``: (index of A, c)} for every B that can be rebased."""
    import numpy as np  # only where the gene is applied: genomes imports need no NumPy

    from genomes import lane_eval
    bases = lane_eval.evaluable(fn, sorted({a.base for a in accesses}), info)
    guards = lane_eval.evaluable(fn, sorted({a.guard for a in accesses if a.guard}), info)
    known = set(bases)
    usable = [a for a in accesses if a.base in known]
    if len({a.base for a in usable}) < 2:
        return {}
    code = lane_eval.backward_slice(fn, bases + guards, info)
    key = (tuple(i.render() for i in code),
           tuple((a.base, a.offset, a.ins.pred) for a in accesses), tuple(bases),
           tuple(guards), launch.grid, launch.block)
    kept = proofs.recall(PROOF, key)
    if kept is not None:
        return {b: (a, c) for b, a, c in kept}
    position = {id(a): k for k, a in enumerate(accesses)}
    # a guarded B: per B, the earlier accesses (other address registers) still possible,
    # with their c (the guard may leave only threads on which a distance is constant)
    alive: dict[int, dict[int, int | None]] = {
        position[id(b)]: {position[id(a)]: None for a in usable[:j] if a.base != b.base}
        for j, b in enumerate(usable) if b.ins.pred}
    groups, distance = None, {}  # an unguarded B: registers a constant apart on every thread
    for chunk in lane_eval.evaluate(fn, bases + guards, launch.grid, launch.block, info=info):
        classes = _classes(chunk, bases)
        groups = _refine(groups, distance, classes, bases)
        guarded: dict[bytes, dict] = {}  # the threads a guard leaves -> the classes there
        for b_at, candidates in alive.items():
            b = accesses[b_at]
            if b.base not in classes:
                candidates.clear()  # an address not made from a pointer parameter
                continue
            where = guard_mask(chunk, b.ins.pred, len(chunk[b.base].offset))
            if where is not None and where.all():
                where = None  # a guard that holds on every thread of the chunk
            elif where is not None and not where.any():
                continue
            if where is None:
                seen = classes
            else:  # the coarsened copies' guards are registers of their own, often equal
                threads = np.packbits(where).tobytes()
                if threads not in guarded:
                    guarded[threads] = _classes(chunk, bases, where)
                seen = guarded[threads]
            b_class, b_first = seen[b.base]
            for a_at, c in list(candidates.items()):
                a_base = accesses[a_at].base
                if a_base not in seen:
                    del candidates[a_at]
                    continue
                a_class, a_first = seen[a_base]
                same, first = a_class == b_class, b_first + b.offset - a_first
                if not same or (c is not None and c != first) or not -_LIMIT <= first < _LIMIT:
                    del candidates[a_at]
                else:
                    candidates[a_at] = first
        if all(len(g) < 2 for g in groups) and not any(alive.values()):
            break
    proven = {b: min(c.items()) for b, c in alive.items()
              if c and min(c.items())[1] is not None}
    group_of = {reg: n for n, group in enumerate(groups or []) for reg in group}
    for j, b in enumerate(usable):  # an unguarded B: the earliest A of its group in reach
        if b.ins.pred or b.base not in group_of:
            continue
        for a in usable[:j]:
            c = distance[b.base] - distance.get(a.base, 0) + b.offset
            if (a.base != b.base and group_of.get(a.base) == group_of[b.base]
                    and -_LIMIT <= c < _LIMIT):
                proven[position[id(b)]] = (position[id(a)], c)
                break
    proofs.keep(PROOF, key, [[b, a, c] for b, (a, c) in sorted(proven.items())])
    return proven


def rebase(fn: Function, launch) -> int:
    """Rebase ``fn``'s provably constant-distance accesses for ``launch``; how many."""
    accesses = _accesses(fn, head_end(fn))
    if len(accesses) < 2:
        return 0
    from genomes import lane_eval

    try:
        proven = _proven(fn, PointerInfo(fn), accesses, launch)
    except lane_eval.Unsupported as why:
        raise NotApplicable(f"the accesses' addresses cannot be evaluated: {why}") from None
    for b_at, (a_at, c) in proven.items():
        b, a = accesses[b_at], accesses[a_at]
        line = fn.body[b.index]
        operands = tuple(Address(a.base, c).render() if o.strip().startswith("[") else o
                         for o in b.ins.operands)
        fn.body[b.index] = Line(b.ins.with_(operands=operands), line.before, line.after)
    return len(proven)


def apply(module: Module, launch) -> int:
    """Rebase the launched entry's provably constant-distance accesses; how many."""
    entry = launched(module, launch)
    return rebase(entry, launch)


TRANSFORM = Transform(
    name="addr_rebase",
    group="addr_rebase",
    summary="address global loads and stores as an earlier access's address plus a "
            "constant, where evaluating the index arithmetic for every thread of the launch "
            "shows the distance constant (Triton's per-element address arithmetic left dead)",
    applies_when="before any branch, a global access whose address, on every thread of the "
                 "launch that makes it, lies a constant 32-bit distance from an earlier "
                 "access's address into the same pointer parameter",
    params=(),
    apply=apply,
    reads_launch=True,
)
