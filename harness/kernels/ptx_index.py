"""What a kernel's index guard says, for ``evo init-kernel``: the scalar param that bounds the
global thread index, and the buffers that index addresses.

A kernel of one thread per element guards its index,

    i = blockIdx.x * blockDim.x + threadIdx.x;  if (i < n) y[i] = f(x[i]);

which in PTX is a register computed from ``%ctaid.x`` and ``%tid.x``, compared by a
``setp`` with a register loaded from a scalar param (``ld.param``). Where one is found,
``n`` is the element count of every buffer whose addresses the index computes (``x``,
``y``), and a launch of ``ceil(n / block)`` blocks covers it. The guard is *whole* when
it is exactly ``i < n`` (or ``n > i``, or its negation for a branch past the body): every
element below ``n`` is then reached, and a buffer the kernel only writes is written whole;
a stencil's ``0 < i < n - 1`` is not whole (its borders stay unwritten).

Data flow is followed through registers with one or more definitions; a value loaded from
memory other than a param is opaque (``hist[data[i]]`` is addressed by data, not by ``i``),
and an address through a division, remainder, shift right or mask is not "indexed by i"
(batch norm's ``gamma[i / hw % channels]`` holds ``channels`` elements, not ``n``).
A 2-D or 3-D index (``%ctaid.y``, ``%tid.z``) has no one size: nothing is inferred.
"""

from __future__ import annotations

from dataclasses import dataclass

SPECIAL = ("%ctaid.x", "%tid.x")  # both in a register's sources: the global thread index
_LESS = {"lt": "upper", "gt": "lower", "ge": "upper-negated", "le": "lower-negated"}
_MIXING = ("div", "rem", "shr", "and", "min", "max", "sel", "selp", "slct")  # not i + c


@dataclass(frozen=True)
class IndexGuard:
    """``size``: the PTX param bounding the index; ``indexed``: pointer params addressed
    through it; ``whole``: the guard is exactly ``i < size`` (module docstring)."""

    size: str
    indexed: frozenset[str]
    whole: bool


def index_guard(ptx_text: str, entry: str) -> IndexGuard | None:
    """The entry's index guard, or None where none is found (module docstring)."""
    from genomes.memory import PointerInfo
    from genomes.ptx import parse

    fn = next((f for f in parse(ptx_text).entries if f.name == entry), None)
    if fn is None:
        return None
    info = PointerInfo(fn)
    sources = _Sources(info.defs)
    guards = []  # (size param, direct, comparison, index first) per setp on the index
    for ins in fn.instructions():
        if ins.op != "setp" or len(ins.operands) < 3:
            continue
        a, b = ins.operands[-2], ins.operands[-1]
        on_index = [_is_index(sources.of(x)) for x in (a, b)]
        if not any(on_index):
            continue
        if any(_other_axes(sources.of(x)) for x in (a, b)):
            return None  # a 2-D or 3-D index: no one size says the buffers' counts
        other = b if on_index[0] else a
        params = {s for s in sources.of(other) if s.startswith("param:")}
        size = next(iter(params))[6:] if len(params) == 1 and len(sources.of(other)) == 1 else None
        cmp = next((m for m in ins.mods if m in _LESS), None)
        guards.append((size, sources.direct(other), cmp, on_index[0]))
    sizes = {g[0] for g in guards if g[0] is not None}
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    whole = len(guards) == 1 and guards[0][1] and guards[0][2] is not None and (
        (guards[0][3] and _LESS[guards[0][2]].startswith("upper"))
        or (not guards[0][3] and _LESS[guards[0][2]].startswith("lower")))
    indexed = set()
    for ins in fn.instructions():
        if ins.op not in ("ld", "st", "atom", "red") or "global" not in ins.mods:
            continue
        addr = ins.address()
        found = sources.of(addr.base) if addr is not None and addr.base.startswith("%") else ()
        if _is_index(found) and "mixed" not in found:  # i, i + 1, 4 * i: not i / hw % c
            if _other_axes(found):
                return None
            indexed |= info.provenance(addr.base) - {"*"}
    return IndexGuard(size, frozenset(indexed), bool(whole))


def _is_index(sources: frozenset[str]) -> bool:
    return all(s in sources for s in SPECIAL)


def _other_axes(sources: frozenset[str]) -> bool:
    return any(s.startswith(("%ctaid.", "%tid.")) and not s.endswith(".x") for s in sources)


class _Sources:
    """What each register's value derives from: special registers, ``param:NAME`` for a
    param load, ``load`` for any other load (opaque), across every definition."""

    def __init__(self, defs: dict):
        self.defs = defs
        self.memo: dict[str, frozenset[str]] = {}

    def of(self, operand: str, depth: int = 0) -> frozenset[str]:
        if operand.startswith(("%ctaid.", "%tid.", "%ntid.", "%nctaid.")):
            return frozenset({operand})
        if not operand.startswith("%") or depth > 64:
            return frozenset()
        if operand in self.memo:
            return self.memo[operand]
        self.memo[operand] = frozenset()  # a loop through itself adds nothing
        found: set[str] = set()
        for ins in self.defs.get(operand, ()):
            if ins.op == "ld":
                addr = ins.address()
                param = "param" in ins.mods and addr is not None and not addr.base.startswith("%")
                found.add(f"param:{addr.base}" if param else "load")
                continue
            if ins.op in _MIXING:
                found.add("mixed")
            for src in ins.operands[1:]:
                found |= self.of(src, depth + 1)
        self.memo[operand] = frozenset(found)
        return self.memo[operand]

    def direct(self, operand: str) -> bool:
        """The register holds a param as loaded (through cvt/mov only: no arithmetic)."""
        for _ in range(16):
            found = self.defs.get(operand, ())
            if len(found) != 1:
                return False
            ins = found[0]
            if ins.op == "ld":
                return "param" in ins.mods
            if ins.op not in ("mov", "cvt") or len(ins.operands) != 2:
                return False
            operand = ins.operands[1]
        return False
