"""Merge scalar global loads whose addresses are computed one by one into vector loads,
where the launch's every thread shows them consecutive.

Triton gives each thread several elements of a tile and, where its axis analysis cannot
show an index contiguous (a ``cat`` of transposed inputs: ``(x - 768) // 64 % 12``...),
computes every element's address on its own and loads it with its own 2-byte load:
``vec_ld`` (one base register, constant offsets) does not see that the eight addresses
follow each other. This transform evaluates the index arithmetic of those addresses for
every thread of the launch (``genomes.lane_eval``: exact integer semantics, no sampling)
and merges a run of loads where, on every thread whose guard is true, load j reads
``address_0 + j * size`` and ``address_0`` is aligned to the vector's bytes (the pointer
parameter itself being ``PARAM_ALIGN``-aligned, the one assumption ``genomes.memory``
states).

Rule, in the function's straight-line head (before any branch): a run of n (2, 4, 8)
scalar ``ld.global`` of one opcode and one guard, each into one register, each with no
cache-policy operand or with policy registers made by the same ``createpolicy``, proven
consecutive as above, becomes one load at the *last* of them (the earlier ones sink to
it, so the default values a guarded load leaves in place are already written), provided
nothing between a member and the last stores, synchronizes, opens a scope, or reads or
writes its register. Eight 2-byte elements load as ``v4.b32`` and are unpacked with
``mov.b32 {lo, hi}`` under the same guard; other sizes load as ``vN`` of their own type.

The proof holds for the launch it was made with: the genome keeps that launch (a later
gene that would change it is a no-op, ``genomes.genome``).
"""

from __future__ import annotations

from dataclasses import dataclass

from genomes.launch import launched_entry
from genomes.memory import PARAM_ALIGN, PointerInfo, effect
from genomes.ptx import Directive, Function, Instruction, Line, Module
from genomes.transforms.base import NotApplicable, Transform
from genomes.transforms.l2_policy import fresh_register, prologue_index
from genomes.vectorize import SIZES, blocks_motion

_FLOW = frozenset({"bra", "brx", "call", "ret", "exit"})
_PURE = frozenset({"createpolicy"})  # computes a value; ``effect`` files it as a barrier
_CACHE: dict[tuple, frozenset] = {}  # proofs by (slice, loads, launch): ~1 s each to redo
_CACHE_SIZE = 64


@dataclass(frozen=True)
class _Load:
    index: int  # position in fn.body
    ins: Instruction
    dest: str
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


def _candidates(fn: Function, info: PointerInfo, stop: int) -> list[_Load]:
    found = []
    order = {id(line.stmt): i for i, line in enumerate(fn.body)}
    for i, line in enumerate(fn.body[:stop]):
        ins = line.stmt
        if not (isinstance(ins, Instruction) and ins.op == "ld" and ins.space == "global"
                and effect(ins) == "load" and len(ins.operands) in (2, 3)):
            continue
        type_ = ins.mods[-1]
        dest = ins.operands[0].strip().strip("{}").strip()
        addr = ins.address()
        if (type_ not in SIZES or SIZES[type_] < 2 or any(m[0] == "v" and m[1:].isdigit()
                                                          for m in ins.mods)
                or not dest.startswith("%") or "," in dest or addr is None
                or not addr.base.startswith("%")):
            continue
        policy = ()
        if len(ins.operands) == 3:
            policy = _policy_key(info, order, ins.operands[2].strip(), i)
            if policy is None:
                continue
        found.append(_Load(i, ins, dest, addr.base, addr.offset, SIZES[type_],
                           (ins.opcode, ins.pred, policy)))
    return found


def _windows(loads: list[_Load]) -> list[tuple[int, int]]:
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


def _proven(fn: Function, info: PointerInfo, loads: list[_Load], windows, launch) -> frozenset:
    """The windows whose loads are consecutive and aligned on every thread of ``launch``
    where their guard holds (all threads where the guard cannot be evaluated)."""
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
           tuple((m.base, m.offset, m.size, m.ins.pred) for m in loads), tuple(windows),
           tuple(guards), launch.grid, launch.block)
    if key in _CACHE:
        return _CACHE[key]
    alive = set(windows)
    for chunk in lane_eval.evaluate(fn, bases + guards, launch.grid, launch.block, info=info):
        for start, n in list(alive):
            members = loads[start:start + n]
            first = chunk[members[0].base]
            pred = members[0].ins.pred
            mask = True
            if pred and pred.lstrip("@!") in chunk:
                mask = chunk[pred.lstrip("@!")]
                mask = ~mask if pred.startswith("@!") else mask
            span = n * members[0].size
            ok = PARAM_ALIGN % span == 0 and np.all(
                ((first.offset + members[0].offset) % span == 0) | ~np.asarray(mask))
            for j, m in enumerate(members[1:], 1):
                a = chunk[m.base]
                ok = ok and a.param == first.param and np.all(
                    (a.offset + m.offset - first.offset - members[0].offset
                     == j * m.size) | ~np.asarray(mask))
            if not ok:
                alive.discard((start, n))
        if not alive:
            break
    proven = frozenset(alive)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = proven
    return proven


def _sinkable(fn: Function, members: list[_Load]) -> bool:
    """Every member can move down to the last one (see the module's rule)."""
    last = members[-1].index
    fixed = set(members[0].ins.uses())  # the vector's address, guard and policy
    for m in members:
        if m.dest in fixed:
            return False
    for m in members[:-1]:
        for j in range(m.index + 1, last):
            stmt = fn.body[j].stmt
            if not isinstance(stmt, Instruction):
                if blocks_motion(stmt):
                    return False
                continue
            if stmt.op not in _PURE and effect(stmt) in ("store", "barrier"):
                return False
            if m.dest in stmt.uses() or m.dest in stmt.defs() or fixed & set(stmt.defs()):
                return False
    return len({m.dest for m in members}) == len(members)


def _vector_lines(fn: Function, members: list[_Load], temps: list[str]) -> list[Instruction]:
    first, n = members[0], len(members)
    head = first.ins.opcode.split(".")[:-1]
    type_ = first.ins.mods[-1]
    address = f"[{first.base}+{first.offset}]" if first.offset else f"[{first.base}]"
    policy = first.ins.operands[2:]
    if first.size == 2 and n == 8:  # no v8 of 16-bit loads: four 32-bit words, unpacked
        words = temps[:4]
        load = Instruction(".".join([*head, "v4", "b32"]),
                           ("{" + ", ".join(words) + "}", address, *policy), first.ins.pred)
        unpack = [Instruction("mov.b32", (f"{{{members[2 * k].dest}, "
                                          f"{members[2 * k + 1].dest}}}", words[k]),
                              first.ins.pred) for k in range(4)]
        return [load, *unpack]
    return [Instruction(".".join([*head, f"v{n}", type_]),
                        ("{" + ", ".join(m.dest for m in members) + "}", address, *policy),
                        first.ins.pred)]


def _merge(fn: Function, launch) -> int:
    stop = next((i for i, line in enumerate(fn.body) if isinstance(line.stmt, Instruction)
                 and line.stmt.op in _FLOW), len(fn.body))
    info = PointerInfo(fn)
    loads = _candidates(fn, info, stop)
    windows = _windows(loads)
    if not windows:
        return 0
    from genomes import lane_eval

    try:
        proven = _proven(fn, info, loads, windows, launch)
    except lane_eval.Unsupported as why:
        raise NotApplicable(f"the loads' addresses cannot be evaluated: {why}") from None
    chosen, used = [], set()
    for start, n in sorted(proven, key=lambda w: (w[0], -w[1])):
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


def apply(module: Module, launch) -> int:
    """Merge the launched entry's provably consecutive loads; the number of vector loads."""
    entry = launched_entry(module, launch)
    if isinstance(entry, str):
        raise NotApplicable(entry)
    return _merge(entry, launch)


TRANSFORM = Transform(
    name="vec_ld_index",
    group="ld_index",
    summary="merge scalar global loads whose addresses are computed one by one (Triton's "
            "per-element index arithmetic) into vector loads, where evaluating that "
            "arithmetic for every thread of the launch shows them consecutive and aligned",
    applies_when="before any branch, 2, 4 or 8 consecutive scalar 2-, 4- or 8-byte global "
                 "loads of one opcode and guard whose addresses, on every thread of the "
                 "launch that loads, follow each other from an aligned first one",
    params=(),
    apply=apply,
    reads_launch=True,
)
