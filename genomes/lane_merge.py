"""Merging scalar global accesses into vector ones where the launch's every thread shows
them consecutive and aligned: the engine of ``vec_ld_index`` and ``vec_st_index``.

Triton gives each thread several elements of a tile and, where its axis analysis cannot
show an index contiguous (a ``cat`` of transposed inputs: ``(x - 768) // 64 % 12``...),
computes every element's address on its own and accesses it on its own: ``vec_ld``/
``vec_st`` (one base register, constant offsets) do not see that the addresses follow
each other. ``merge`` evaluates the index arithmetic of those addresses for every thread
of the launch (``genomes.lane_eval``: exact integer semantics, no sampling) and merges a
run where, on every thread whose guard is true, access j touches ``address_0 + j * size``
and ``address_0`` is aligned to the vector's bytes (the pointer parameter itself being
``PARAM_ALIGN``-aligned, the one assumption ``genomes.memory`` states).

Rule, in the function's straight-line head (before any branch): a run of n (2, 4, 8)
scalar global loads (or stores) of one opcode, each of one register, with guards of one
polarity whose registers hold the same value on every thread (evaluated; the same
register where they cannot be), each with no cache-policy operand or with policy
registers made by the same ``createpolicy``, proven consecutive as above, becomes one
access at the *last* of them: the earlier ones sink to it, provided nothing between a
member and the last stores (for stores: accesses memory at all), synchronizes, opens a
scope, or reads or writes its register. Eight 2-byte elements go as ``v4.b32``, unpacked
(or packed) with ``mov.b32 {lo, hi}``; other sizes as ``vN`` of their own type.

The proof holds for the launch it was made with: a genome keeps that launch (a later
gene that would change it is a no-op, ``genomes.genome``).
"""

from __future__ import annotations

from dataclasses import dataclass

from genomes import proofs
from genomes.memory import PARAM_ALIGN, PointerInfo, effect
from genomes.ptx import Directive, Function, Instruction, Line
from genomes.transforms.base import NotApplicable
from genomes.transforms.l2_policy import fresh_register, prologue_index
from genomes.vectorize import SIZES, blocks_motion

_FLOW = frozenset({"bra", "brx", "call", "ret", "exit"})
_PURE = frozenset({"createpolicy"})  # computes a value; ``effect`` files it as a barrier
PROOF = "lane_merge/1"  # genomes.proofs: by (slice, loads, launch), ~1 s each to redo


@dataclass(frozen=True)
class Access:
    """A scalar global load or store that may join a vector one."""

    index: int  # position in fn.body
    ins: Instruction
    reg: str  # the register loaded into, or stored
    base: str
    offset: int
    size: int
    key: tuple  # what members of one vector share: opcode, guard, cache policy


def _policy_key(info: PointerInfo, order: dict[int, int], reg: str,
                before: int) -> tuple | None:
    """The definitions of a cache-policy register with its name left out (two registers
    with equal keys hold the same policy), or None where one lies at or after ``before``
    (``order``: each statement's body index, by id)."""
    defs = info.defs.get(reg, [])
    if not defs or any(order[id(d)] >= before or d.pred for d in defs):
        return None
    return tuple((d.opcode, d.operands[1:]) for d in defs)


def candidates(fn: Function, info: PointerInfo, stop: int, op: str = "ld") -> list[Access]:
    """The scalar global loads (``op`` "ld") or stores ("st") before body index ``stop``
    that may join a vector access, in program order."""
    found = []
    order = {id(line.stmt): i for i, line in enumerate(fn.body)}
    value = 0 if op == "ld" else 1  # the loaded register's operand, or the stored one's
    for i, line in enumerate(fn.body[:stop]):
        ins = line.stmt
        if not (isinstance(ins, Instruction) and ins.op == op and ins.space == "global"
                and effect(ins) == ("load" if op == "ld" else "store")
                and len(ins.operands) in (2, 3)):
            continue
        type_ = ins.mods[-1]
        reg = ins.operands[value].strip().strip("{}").strip()
        addr = ins.address()
        if (type_ not in SIZES or SIZES[type_] < 2 or any(m[0] == "v" and m[1:].isdigit()
                                                          for m in ins.mods)
                or not reg.startswith("%") or "," in reg or addr is None
                or not addr.base.startswith("%")):
            continue
        policy = ()
        if len(ins.operands) == 3:
            policy = _policy_key(info, order, ins.operands[2].strip(), i)
            if policy is None:
                continue
        polarity = (ins.pred or "")[:2].rstrip("%")  # "@", "@!" or "": the guards
        found.append(Access(i, ins, reg, addr.base, addr.offset, SIZES[type_],  # themselves
                            (ins.opcode, polarity, policy)))  # are compared by evaluation
    return found


def windows(loads: list[Access]) -> list[tuple[int, int]]:
    """(start, n) of every run of n consecutive candidates sharing a key."""
    out = []
    for i, first in enumerate(loads):
        n = 16 // first.size
        while n >= 2:
            members = loads[i:i + n]
            if len(members) == n and all(m.key == first.key for m in members):
                out.append((i, n))
            n //= 2
    return out


def proven(fn: Function, info: PointerInfo, loads: list[Access], runs, launch) -> frozenset:
    """The runs (``windows``) whose accesses are consecutive and aligned on every thread
    of ``launch`` where their guard holds (all threads where it cannot be evaluated)."""
    import numpy as np  # only where the gene is applied: genomes imports need no NumPy

    from genomes import lane_eval
    guards = sorted({m.ins.pred.lstrip("@!") for m in loads if m.ins.pred})
    bases = sorted({m.base for m in loads})
    try:
        code = lane_eval.backward_slice(fn, bases + guards, info)
    except lane_eval.Unsupported:
        guards = []  # the guards' slice is not modelled: then every thread must agree
        code = lane_eval.backward_slice(fn, bases, info)
    key = (tuple(i.render() for i in code),
           tuple((m.base, m.offset, m.size, m.ins.pred) for m in loads), tuple(runs),
           tuple(guards), launch.grid, launch.block)
    kept = proofs.recall(PROOF, key)
    if kept is not None:
        return frozenset((start, n) for start, n in kept)
    alive = set(runs)
    for chunk in lane_eval.evaluate(fn, bases + guards, launch.grid, launch.block, info=info):
        for start, n in list(alive):
            members = loads[start:start + n]
            first = chunk[members[0].base]
            threads = len(first.offset)
            mask = guard_mask(chunk, members[0].ins.pred, threads)
            # another guard register must hold the same value on every thread
            ok = all(m.ins.pred == members[0].ins.pred or (
                mask is not None
                and np.array_equal(guard_mask(chunk, m.ins.pred, threads), mask))
                for m in members[1:])
            if mask is None:
                mask = np.ones(threads, dtype=bool)  # not evaluable: every thread
            span = n * members[0].size
            ok = ok and PARAM_ALIGN % span == 0 and np.all(
                ((first.offset + members[0].offset) % span == 0) | ~mask)
            for j, m in enumerate(members[1:], 1):
                a = chunk[m.base]
                ok = ok and a.param == first.param and np.all(
                    (a.offset + m.offset - first.offset - members[0].offset
                     == j * m.size) | ~mask)
            if not ok:
                alive.discard((start, n))
        if not alive:
            break
    proven = frozenset(alive)
    proofs.keep(PROOF, key, sorted([start, n] for start, n in proven))
    return proven


def head_end(fn: Function) -> int:
    """The body index of the function's first branch, call or return: its straight-line
    head (where a register defined before an access holds on every thread reaching it)
    ends there."""
    return next((i for i, line in enumerate(fn.body) if isinstance(line.stmt, Instruction)
                 and line.stmt.op in _FLOW), len(fn.body))


def guard_mask(chunk: dict, pred: str | None, threads: int):
    """The threads on which a guard ``@%p``/``@!%p`` holds (all for no guard), or None
    where its register was not evaluated."""
    import numpy as np

    if not pred:
        return np.ones(threads, dtype=bool)
    reg = pred.lstrip("@!")
    if reg not in chunk:
        return None
    where = np.asarray(chunk[reg])
    return ~where if pred.startswith("@!") else where


def _sinkable(fn: Function, members: list[Access]) -> bool:
    """Every member can move down to the last one: nothing between a member and the last
    synchronizes, opens a scope, writes its register or the first's address, guard or
    policy, or -- for loads -- stores or reads the loaded register, or -- for stores --
    accesses memory at all (any access might alias the store)."""
    last = members[-1].index
    stores = members[0].ins.op == "st"
    fixed = set(members[0].ins.uses()) - ({members[0].reg} if stores else set())
    for m in members:  # the vector's address, guard and policy: no load may write them
        if m.reg in fixed and not stores:
            return False
    own = {m.index for m in members}  # the run's own accesses may lie between
    for m in members[:-1]:
        for j in range(m.index + 1, last):
            if j in own:
                continue
            stmt = fn.body[j].stmt
            if not isinstance(stmt, Instruction):
                if blocks_motion(stmt):
                    return False
                continue
            kinds = ("load", "store", "barrier") if stores else ("store", "barrier")
            if stmt.op not in _PURE and effect(stmt) in kinds:
                return False
            read = m.reg in stmt.uses() and not stores  # a store's value may be read
            if read or m.reg in stmt.defs() or fixed & set(stmt.defs()):
                return False
    return len({m.reg for m in members}) == len(members)


def _vector_lines(fn: Function, members: list[Access], temps: list[str]) -> list[Instruction]:
    first, n = members[0], len(members)
    head = first.ins.opcode.split(".")[:-1]
    type_ = first.ins.mods[-1]
    address = f"[{first.base}+{first.offset}]" if first.offset else f"[{first.base}]"
    policy = first.ins.operands[2:]
    if first.ins.op == "st":
        return _store_lines(members, temps, head, address, policy)
    if first.size == 2 and n == 8:  # no v8 of 16-bit loads: four 32-bit words, unpacked
        words = temps[:4]
        load = Instruction(".".join([*head, "v4", "b32"]),
                           ("{" + ", ".join(words) + "}", address, *policy), first.ins.pred)
        unpack = [Instruction("mov.b32", (f"{{{members[2 * k].reg}, "
                                          f"{members[2 * k + 1].reg}}}", words[k]),
                              first.ins.pred) for k in range(4)]
        return [load, *unpack]
    return [Instruction(".".join([*head, f"v{n}", type_]),
                        ("{" + ", ".join(m.reg for m in members) + "}", address, *policy),
                        first.ins.pred)]


def _store_lines(members: list[Access], temps: list[str], head: list[str], address: str,
                 policy) -> list[Instruction]:
    first, n = members[0], len(members)
    if first.size == 2 and n == 8:  # four 32-bit words packed from the pairs, then stored
        pack = [Instruction("mov.b32", (temps[k], f"{{{members[2 * k].reg}, "
                                                  f"{members[2 * k + 1].reg}}}"))
                for k in range(4)]
        return [*pack, Instruction(".".join([*head, "v4", "b32"]),
                                   (address, "{" + ", ".join(temps[:4]) + "}", *policy),
                                   first.ins.pred)]
    return [Instruction(".".join([*head, f"v{n}", first.ins.mods[-1]]),
                        (address, "{" + ", ".join(m.reg for m in members) + "}", *policy),
                        first.ins.pred)]


def merge(fn: Function, launch, op: str = "ld") -> int:
    """Merge ``fn``'s provably consecutive global loads (``op`` "ld") or stores ("st")
    for ``launch`` (see the module's rule); how many vector accesses."""
    stop = head_end(fn)
    info = PointerInfo(fn)
    loads = candidates(fn, info, stop, op)
    found = windows(loads)
    if not found:
        return 0
    from genomes import lane_eval

    try:
        merged = proven(fn, info, loads, found, launch)
    except lane_eval.Unsupported as why:
        raise NotApplicable(f"the addresses cannot be evaluated: {why}") from None
    chosen, used = [], set()
    for start, n in sorted(merged, key=lambda w: (w[0], -w[1])):
        members = loads[start:start + n]
        if used.isdisjoint(range(start, start + n)) and _sinkable(fn, members):
            chosen.append(members)
            used.update(range(start, start + n))
    if not chosen:
        return 0
    temps_base = fresh_register(fn, "%evo_vl")
    wide = sum(1 for g in chosen if g[0].size == 2 and len(g) == 8)
    at_last, gone, k = {}, set(), 0
    for members in chosen:
        temps = [f"{temps_base}{4 * k + t}" for t in range(4)]
        k += members[0].size == 2 and len(members) == 8
        at_last[members[-1].index] = _vector_lines(fn, members, temps)
        gone.update(m.index for m in members[:-1])
    body = []
    for i, line in enumerate(fn.body):
        if i in at_last:
            body += [Line(ins, line.before, line.after) for ins in at_last[i]]
        elif i not in gone:
            body.append(line)
    if wide:
        at = prologue_index(fn)
        body[at:at] = [Line(Directive(f".reg .b32 \t{temps_base}<{4 * wide}>;"), "\n\t", "\n")]
    fn.body[:] = body
    return len(chosen)
