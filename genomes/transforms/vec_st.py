"""Merge scalar global stores of consecutive addresses into one vector store.

The mirror of ``vec_ld``. Rule, inside each basic block: scalar stores
``st.global[.mods].T [%base+k], v`` (T of 1, 2, 4 or 8 bytes, the same opcode, guard and
base register) writing ``k, k+s, ..., k+(n-1)s`` become
``st.global[.mods].vn.T [%base+k], {v0, ..., vn-1}`` placed where the *last* of them (in
program order) was, i.e. the earlier stores are sunk. It is done only where

- ``[%base+k]`` is provably aligned to n·s bytes (``genomes.alignment``);
- every earlier store of the group can be sunk to the last one: between them lies no
  barrier-class instruction, no scope brace or directive, no store other than the
  group's own (which write other bytes), and no load that ``PointerInfo.may_alias``
  says may read the sunk store's bytes; nothing between writes the sunk store's value,
  base or guard register.

Immediate values (``0f00000000``) go into the brace list as they are: ptxas (CUDA 13.0,
sm_90) accepts ``st.global.v4.f32 [%rd1], {0f00000000, %f2, ...}``.

``width=4``: v4 groups (of 1-, 2- or 4-byte stores), falling back to v2 where four cannot
be gathered; 8-byte types only form v2. ``width=2``: v2 only. Other state spaces are left
alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from genomes.memory import Access, PointerInfo, access_of, effect
from genomes.ptx import Address, Function, Instruction, Module
from genomes.transforms.base import Param, Transform
from genomes.vectorize import (SIZES, blocks_motion, group_start, plan_groups, rewrite_body,
                               vector_opcode)



@dataclass(frozen=True)
class _Store:
    index: int  # position in fn.body
    ins: Instruction
    value: str
    access: Access

    @property
    def key(self) -> tuple:
        return self.ins.opcode, self.ins.pred, self.access.base


def _as_scalar_store(index: int, ins: Instruction) -> _Store | None:
    """The scalar global store at ``index``, if it is a merge candidate."""
    if ins.op != "st" or ins.space != "global" or effect(ins) != "store":
        return None
    if len(ins.operands) != 2 or any(m in ("v2", "v4", "v8") for m in ins.mods):
        return None
    type_ = ins.mods[-1] if ins.mods else ""
    value = ins.operands[1].strip()
    if value.startswith("{") and value.endswith("}"):  # Triton's single-element list
        value = value[1:-1].strip()
    acc = access_of(ins)
    if type_ not in SIZES or acc is None or not acc.base.startswith("%") \
            or not value or "," in value or " " in value:
        return None
    return _Store(index, ins, value, acc)


def _try_group(fn: Function, block: range, anchor: _Store, n: int, stores: dict[int, _Store],
               consumed: set[int], info: PointerInfo) -> list[_Store] | None:
    """The n stores of the aligned vector holding ``anchor``, all sinkable to it, or None."""
    size = anchor.access.size
    start = group_start(anchor.access.offset, size, n, anchor.access.base, info)
    if start is None:
        return None
    need: dict[int, _Store | None] = {start + k * size: None for k in range(n)}
    need[anchor.access.offset] = anchor
    written: set[str] = set()  # registers written between a candidate and the anchor
    loads: list[Access] = []  # loads between a candidate and the anchor
    for j in range(anchor.index - 1, block.start - 1, -1):
        stmt = fn.body[j].stmt
        if not isinstance(stmt, Instruction):
            if blocks_motion(stmt):
                return None
            continue
        cand = stores.get(j)
        if (cand is not None and j not in consumed and cand.key == anchor.key
                and cand.access.offset in need and need[cand.access.offset] is None
                and not written & set(cand.ins.uses())
                and not any(info.may_alias(cand.access, ld) for ld in loads)):
            need[cand.access.offset] = cand
            if all(v is not None for v in need.values()):
                return [need[off] for off in sorted(need)]
            continue  # a member: the others move past it, to other bytes
        kind = effect(stmt)
        if kind in ("store", "barrier"):
            return None
        if kind == "load":
            acc = access_of(stmt)
            if acc is None:
                return None
            loads.append(acc)
        written.update(stmt.defs())
    return None


def _merge_function(fn: Function, width: int) -> int:
    info = PointerInfo(fn)
    stores = {}
    for i, line in enumerate(fn.body):
        if isinstance(line.stmt, Instruction):
            found = _as_scalar_store(i, line.stmt)
            if found is not None:
                stores[i] = found
    if not stores:
        return 0
    groups, consumed = plan_groups(
        fn, stores, width, lambda a: a.access.size,
        lambda block, anchor, n, used: _try_group(fn, block, anchor, n, stores, used, info),
        last_first=True)
    replace: dict[int, Instruction] = {}
    for anchor, members in groups:
        first = members[0]  # lowest address: the vector's address
        replace[anchor.index] = anchor.ins.with_(
            opcode=vector_opcode(anchor.ins, len(members)),
            operands=(Address(first.access.base, first.access.offset).render(),
                      "{" + ", ".join(m.value for m in members) + "}"))
    rewrite_body(fn, replace, consumed)
    return len(groups)


def apply(module: Module, width: int = 4) -> int:
    """Vectorize global stores in every function; returns the number of vector stores made."""
    return sum(_merge_function(fn, width) for fn in module.functions)


TRANSFORM = Transform(
    name="vec_st",
    group="st_width",
    summary="merge scalar global stores of consecutive, provably aligned addresses into "
            "st.global.v2/.v4",
    applies_when="a basic block has 2 or 4 scalar 1-, 2- or 4-byte (or 2 scalar 8-byte) "
                 "global stores to one base register at consecutive offsets, the first "
                 "provably aligned to the vector size, with no other store, no barrier "
                 "and no possibly aliasing load between them",
    params=(Param("width", default=4, choices=(2, 4)),),
    apply=apply,
)
