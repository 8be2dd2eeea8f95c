"""What instructions do to memory, where pointers come from, and when two accesses may alias.

Shared by the transforms that move or merge memory operations (vectorize, reorder,
prefetch). Everything here is conservative: when in doubt, two accesses may alias and an
instruction is an ordering barrier.

Assumption, stated once: a pointer parameter holds the start of a buffer aligned to at
least 16 bytes (cudaMalloc gives 256), and distinct pointer parameters may still point
into the same buffer (so accesses through different parameters may alias).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from genomes.ptx import Function, Instruction, Label

PARAM_ALIGN = 16

# Ops with no memory effect and no control effect: free to move within their block.
_ALU_OPS = frozenset(
    "add sub mul mad mad24 mul24 sad div rem abs neg min max popc clz bfind fns brev bfe bfi "
    "dp4a dp2a and or xor not cnot lop3 shf shl shr fma rcp sqrt rsqrt sin cos lg2 ex2 tanh "
    "copysign testp set setp selp slct mov cvt cvta isspacep mapa prmt shfl vote match activemask "
    "redux getctarank addc subc madc".split()
)
# Ops that synchronize or leave the block: nothing memory-related moves across them.
_BARRIER_OPS = frozenset(
    "bar barrier membar fence bra brx ret exit call trap brkpt mbarrier cp wgmma griddepcontrol "
    "setmaxnreg nanosleep elect red atom multimem tensormap".split()
)
_WIDTHS = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
           "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
           "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16}


@dataclass(frozen=True)
class Access:
    """A load or store: which space, where, and how many bytes."""

    kind: str  # "load" | "store"
    space: str  # "global", "shared", "local", "param", "const", "generic"
    base: str  # register or symbol
    offset: int
    size: int  # bytes


def effect(ins: Instruction) -> str:
    """Classify: "alu" (pure), "load", "store", "prefetch", or "barrier" (orders everything)."""
    if ins.op in ("ld", "ldu", "tex", "suld", "tld4"):
        if "volatile" in ins.mods or any(m in ("acquire", "relaxed") for m in ins.mods):
            return "barrier"
        return "load"
    if ins.op in ("st", "sust"):
        if "volatile" in ins.mods or any(m in ("release", "relaxed") for m in ins.mods):
            return "barrier"
        return "store"
    if ins.op in ("prefetch", "prefetchu"):
        return "prefetch"
    if ins.op in _ALU_OPS:
        return "alu"
    return "barrier"  # unknown or synchronizing ops: keep everything in order around them


def access_of(ins: Instruction) -> Access | None:
    """The Access of a plain ld/st, or None for anything else."""
    kind = effect(ins)
    if kind not in ("load", "store") or ins.op not in ("ld", "ldu", "st"):
        return None
    addr = ins.address()
    if addr is None:
        return None
    return Access(kind, ins.space or "generic", addr.base, addr.offset, access_size(ins))


def access_size(ins: Instruction) -> int:
    """Bytes moved by a ld/st: element width times vector length."""
    width = next((_WIDTHS[m] for m in reversed(ins.mods) if m in _WIDTHS), 4)
    vec = next((int(m[1:]) for m in ins.mods if re.fullmatch(r"v[248]", m)), 1)
    return width * vec


def with_cache_operator(ins: Instruction, operator: str, replaces) -> Instruction:
    """``ins`` with ``operator`` as its cache operator right after ``.global`` (any of
    ``replaces`` already there removed): ``ld.global.f32`` -> ``ld.global.cs.f32``."""
    mods = [m for m in ins.mods if m not in replaces]
    mods.insert(mods.index("global") + 1, operator)
    return ins.with_(opcode=".".join([ins.op, *mods]))


def element_type(ins: Instruction) -> str | None:
    """The type modifier of a ld/st (``f32`` in ``ld.global.v2.f32``)."""
    return next((m for m in reversed(ins.mods) if m in _WIDTHS), None)


@dataclass(frozen=True)
class Root:
    """A register's value as ``param + offset`` (loop-invariant: every link is single-def)."""

    param: str
    offset: int


class PointerInfo:
    """Def counts and pointer roots of one function, for alias and alignment questions."""

    def __init__(self, fn: Function):
        self.defs: dict[str, list[Instruction]] = {}
        for ins in fn.instructions():
            for reg in ins.defs():
                self.defs.setdefault(reg, []).append(ins)
        self._roots: dict[str, Root | None] = {}

    def single_def(self, reg: str) -> Instruction | None:
        found = self.defs.get(reg)
        return found[0] if found and len(found) == 1 else None

    def root(self, reg: str, _depth: int = 0) -> Root | None:
        """``param + constant`` for a register computed only from a param by cvta/mov/add."""
        if reg in self._roots:
            return self._roots[reg]
        result = None
        ins = self.single_def(reg)
        if ins is not None and _depth < 64 and not ins.pred:
            ops = ins.operands
            if ins.op == "ld" and "param" in ins.mods and len(ops) == 2:
                addr = ins.address()
                if addr and addr.offset == 0 and not addr.base.startswith("%"):
                    result = Root(addr.base, 0)
            elif ins.op in ("cvta", "mov") and len(ops) == 2 and ops[1].startswith("%"):
                result = self.root(ops[1], _depth + 1)
            elif ins.op == "add" and len(ops) == 3:
                a, b = ops[1], ops[2]
                if b.startswith("%") and not a.startswith("%"):
                    a, b = b, a
                imm = _int(b)
                if a.startswith("%") and imm is not None:
                    base = self.root(a, _depth + 1)
                    result = Root(base.param, base.offset + imm) if base else None
        self._roots[reg] = result
        return result

    def provenance(self, reg: str) -> frozenset[str]:
        """The pointer params a register's value may be derived from; ``"*"`` = unknown.

        Follows every def of the register (so loop-carried pointers are covered). A value
        loaded from memory (other than a param) could be any pointer, so it is ``"*"``.
        """
        if not hasattr(self, "_prov"):
            self._prov: dict[str, frozenset[str]] = {}
        if reg in self._prov:
            return self._prov[reg]
        self._prov[reg] = frozenset()  # cycle guard: a loop adds nothing new
        result: set[str] = set()
        for ins in self.defs.get(reg, ()):
            if ins.op == "ld" and "param" in ins.mods:
                addr = ins.address()
                if addr is not None and access_size(ins) == 8:
                    result.add(addr.base)
            elif ins.op in _ALU_OPS:
                for src in ins.uses():
                    result |= self.provenance(src)
            else:
                result.add("*")
        self._prov[reg] = frozenset(result)
        return self._prov[reg]

    def resolve(self, acc: Access) -> tuple[str, int]:
        """A canonical (base, offset) for an access: param-rooted when that can be shown."""
        r = self.root(acc.base) if acc.base.startswith("%") else None
        if r is not None:
            return "param:" + r.param, r.offset + acc.offset
        return acc.base, acc.offset

    def may_alias(self, a: Access, b: Access) -> bool:
        """Whether two accesses may touch a common byte.

        Same resolved base with constant offsets compares byte ranges; a base register
        that is not param-rooted is only trusted when it is defined exactly once.
        Different spaces never alias, except generic which may be any.
        """
        if a.space != b.space and "generic" not in (a.space, b.space):
            return False
        base_a, off_a = self.resolve(a)
        base_b, off_b = self.resolve(b)
        if base_a != base_b:
            return True
        if not base_a.startswith("param:") and base_a.startswith("%") \
                and self.single_def(base_a) is None:
            return True
        return off_a < off_b + b.size and off_b < off_a + a.size


def _int(text: str) -> int | None:
    try:
        return int(text, 0)
    except ValueError:
        return None


def basic_blocks(fn: Function) -> list[range]:
    """Index ranges of ``fn.body`` that form basic blocks (split at labels and branches).

    Only Instruction lines are interesting inside a block; other lines (directives,
    comments) stay where they are.
    """
    blocks, start = [], 0
    for i, line in enumerate(fn.body):
        stmt = line.stmt
        if isinstance(stmt, Label):
            if i > start:
                blocks.append(range(start, i))
            start = i + 1
        elif isinstance(stmt, Instruction) and stmt.op in ("bra", "brx", "ret", "exit", "call",
                                                           "trap"):
            blocks.append(range(start, i + 1))
            start = i + 1
    if start < len(fn.body):
        blocks.append(range(start, len(fn.body)))
    return blocks


def written_params(fn: Function, info: PointerInfo) -> frozenset[str]:
    """Pointer params the function may store through (``"*"`` in it: a store whose
    pointer's origin is unknown). What ``.nc`` loads must never read (``cache_ld``'s
    ``nc`` policy, and the finalist check of ``harness.gpu.finalist``)."""
    written: set[str] = set()
    for ins in fn.instructions():
        addr = ins.address()
        if addr is None or effect(ins) in ("load", "prefetch") or \
                ins.space in ("shared", "local", "param", "const"):
            continue
        written |= info.provenance(addr.base) if addr.base.startswith("%") else {"*"}
    return frozenset(written)
