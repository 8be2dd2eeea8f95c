"""Merge scalar global loads of consecutive addresses into one vector load.

Rule, inside each basic block: scalar loads ``ld.global[.mods].T %d, [%base+k]`` with T of
1, 2, 4 or 8 bytes (``genomes.vectorize.SIZES``: u8 ... s64), the same opcode, the same
guard and the same base register, reading ``k, k+s, ..., k+(n-1)s`` (s = sizeof T), become
``ld.global[.mods].vn.T {%d0, ..., %dn-1}, [%base+k]`` placed where the *first* of them
(in program order) was. It is done only where

- ``[%base+k]`` is provably aligned to n·s bytes (``genomes.alignment``);
- every later load of the group can be hoisted to the first one: no store and no
  barrier-class instruction lies between (conservatively, whatever the addresses), no
  scope brace or directive lies between, nothing between (the first load included)
  writes the load's base or guard register, and nothing between reads or writes its
  destination register.

``width=4`` makes v4 groups (16 bytes of 4-byte loads, 4 of bytes); a group that cannot
be completed to four falls back to v2, so ``width=4`` is "as wide as provable". 8-byte
types only ever form v2 (16 bytes, the widest vector access). ``width=2`` makes v2 only.
Parameter, shared, local and const loads are left alone.

Why the hoisting argument holds for several groups at once: every load that moves
upward is checked against every instruction it passes in the *original* order, and the
only loads another group moves past it are loads (which commute with loads) whose
registers were checked at their original position.
"""

from __future__ import annotations

from dataclasses import dataclass

from genomes.memory import PointerInfo, effect
from genomes.ptx import Address, Function, Instruction, Module
from genomes.transforms.base import Param, Transform
from genomes.vectorize import (SIZES, blocks_motion, group_start, plan_groups, rewrite_body,
                               vector_opcode)



@dataclass(frozen=True)
class _Load:
    index: int  # position in fn.body
    ins: Instruction
    dest: str
    addr: Address
    size: int

    @property
    def key(self) -> tuple:
        # Equal opcode strings mean equal cache operators, eviction hints and type.
        return self.ins.opcode, self.ins.pred, self.addr.base


def _single_register(operand: str) -> str | None:
    """``%f1`` or Triton's ``{ %f1 }`` -> ``%f1``; anything else -> None."""
    text = operand.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return text if text.startswith("%") and "," not in text and " " not in text else None


def _as_scalar_load(index: int, ins: Instruction) -> _Load | None:
    """The scalar global load at ``index``, if it is a merge candidate."""
    if ins.op != "ld" or ins.space != "global" or effect(ins) != "load":
        return None
    if len(ins.operands) != 2 or any(m in ("v2", "v4", "v8") for m in ins.mods):
        return None  # a third operand is an L2 cache-policy register
    type_ = ins.mods[-1] if ins.mods else ""
    dest = _single_register(ins.operands[0])
    addr = ins.address()
    if type_ not in SIZES or dest is None or addr is None or not addr.base.startswith("%"):
        return None
    return _Load(index, ins, dest, addr, SIZES[type_])


def _try_group(fn: Function, block: range, anchor: _Load, n: int, loads: dict[int, _Load],
               consumed: set[int], info: PointerInfo) -> list[_Load] | None:
    """The n loads of the aligned vector holding ``anchor``, all hoistable to it, or None."""
    start = group_start(anchor.addr.offset, anchor.size, n, anchor.addr.base, info)
    if start is None:
        return None
    need: dict[int, _Load | None] = {start + k * anchor.size: None for k in range(n)}
    need[anchor.addr.offset] = anchor
    written = set(anchor.ins.defs())
    read = set(anchor.ins.uses())
    for j in range(anchor.index + 1, block.stop):
        stmt = fn.body[j].stmt
        if not isinstance(stmt, Instruction):
            if blocks_motion(stmt):
                return None
            continue
        cand = loads.get(j)
        if (cand is not None and j not in consumed and cand.key == anchor.key
                and cand.addr.offset in need and need[cand.addr.offset] is None
                and not written & set(cand.ins.uses())
                and not (written | read) & set(cand.ins.defs())):
            need[cand.addr.offset] = cand
            if all(v is not None for v in need.values()):
                return [need[off] for off in sorted(need)]
        if effect(stmt) in ("store", "barrier"):
            return None
        written.update(stmt.defs())
        read.update(stmt.uses())
    return None


def _merge_function(fn: Function, width: int) -> int:
    info = PointerInfo(fn)
    loads = {}
    for i, line in enumerate(fn.body):
        if isinstance(line.stmt, Instruction):
            found = _as_scalar_load(i, line.stmt)
            if found is not None:
                loads[i] = found
    if not loads:
        return 0
    groups, consumed = plan_groups(
        fn, loads, width, lambda a: a.size,
        lambda block, anchor, n, used: _try_group(fn, block, anchor, n, loads, used, info),
        last_first=False)
    replace: dict[int, Instruction] = {}
    for anchor, members in groups:
        first = members[0]  # lowest address: the vector's address
        replace[anchor.index] = anchor.ins.with_(
            opcode=vector_opcode(anchor.ins, len(members)),
            operands=("{" + ", ".join(m.dest for m in members) + "}",
                      Address(first.addr.base, first.addr.offset).render()))
    rewrite_body(fn, replace, consumed)
    return len(groups)


def apply(module: Module, width: int = 4) -> int:
    """Vectorize global loads in every function; returns the number of vector loads made."""
    return sum(_merge_function(fn, width) for fn in module.functions)


TRANSFORM = Transform(
    name="vec_ld",
    group="ld_width",
    summary="merge scalar global loads of consecutive, provably aligned addresses into "
            "ld.global.v2/.v4",
    applies_when="a basic block has 2 or 4 scalar 1-, 2- or 4-byte (or 2 scalar 8-byte) "
                 "global loads from one base register at consecutive offsets, the first "
                 "provably aligned to the vector size, with no store or barrier between them",
    params=(Param("width", default=4, choices=(2, 4)),),
    apply=apply,
)
