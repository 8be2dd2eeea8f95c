"""The dependence DAG of one basic block, for instruction scheduling (``reorder``).

Nodes are the block's statements in original order; an edge ``a -> b`` means ``b`` must
stay after ``a``. Edges come from:

* registers: RAW (a use after the last def), WAR (a def after a use), WAW (a def after a
  def). Guard predicates are reads (``Instruction.uses`` includes them), so a predicated
  def also stays after the previous def of its target (WAW), which keeps the old value it
  falls back to;
* memory: a store after a load or store, or a load after a store, when ``may_alias`` says
  the two may touch a common byte or when either is not a plain ``ld``/``st`` (``access_of``
  is None). Loads never order against loads. Prefetches order only after the defs of their
  address registers (a hint cannot make a result wrong);
* fences: barrier-class instructions (``bar.sync``, ``atom``, ``membar``, calls, unknown
  ops, and reads of ``%clock``/``%clock64``/``%globaltimer``), scope braces ``{`` ``}``,
  directives (``.reg``, ``.param``, ``.pragma`` ...) and labels (should a range span one)
  are ordered against *every* other node,
  so nothing crosses them. That is stricter than memory order needs (ALU work could cross
  ``bar.sync``), but it keeps warp-convergence points, timer reads and scoped declarations
  exactly where they were, at almost no cost in scheduling freedom;
* the terminator (``bra``/``ret``/``exit``/``call``/``trap`` ending the block) stays last.

Non-statement text needs no handling: comments and whitespace belong to a ``Line`` and
travel with it. ``.loc`` lines are *attached to the next node* and move with it, since
they describe that instruction. Non-instruction lines after the last node (the whitespace
before a function's closing brace) are the block's ``tail`` and stay at its end.

Ordering edges that are already implied by a path are skipped (ancestor sets kept as int
bitmasks): a 16x16x16 gemm tile has ~8000 loads that all may alias its stores, and without
the pruning every store would get an edge from every earlier load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from genomes.memory import PointerInfo, access_of, effect
from genomes.ptx import Directive, Function, Instruction, Label, Other

TERMINATORS = frozenset({"bra", "brx", "ret", "exit", "call", "trap"})
FENCE_KINDS = frozenset({"barrier", "fence", "terminator"})
_TIMER_RE = re.compile(r"%(?:clock|clock64|clock_hi|globaltimer\w*|pm\d+\w*)\b")

# Latency estimates, used only as scheduling priorities (how much work a result keeps
# waiting), not measurements of any GPU: global/local memory ~400 cycles, shared/const
# ~30, multi-function-unit math 20-40, everything else 4-6.
_LOAD_LATENCY = {"shared": 30, "const": 30, "param": 30}
_SLOW_LATENCY = 400
_MATH_LATENCY = {"div": 40, "rem": 40, "sqrt": 30, "rsqrt": 20, "rcp": 20, "ex2": 20,
                 "lg2": 20, "sin": 20, "cos": 20, "tanh": 20, "shfl": 24, "vote": 8,
                 "match": 24, "redux": 24}


@dataclass
class Dag:
    """The dependence DAG of one block. Node ``k`` is the k-th node in original order.

    ``anchors[k]`` is the body index of node k's statement; ``groups[k]`` the body
    indices that move with it (attached ``.loc`` lines, then the anchor); ``tail`` the
    pinned lines after the last node. Edges always point forward in original order, so
    ``range(len(anchors))`` is a topological order.
    """

    anchors: list[int] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # effect(), or "fence" / "terminator"
    latency: list[int] = field(default_factory=list)
    succs: list[set[int]] = field(default_factory=list)
    preds: list[set[int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.anchors)

    def critical_path_lengths(self) -> list[int]:
        """For each node, the longest latency-weighted path from it to the block's end
        (its own latency included): the classic list-scheduling priority."""
        cp = [0] * len(self)
        for k in reversed(range(len(self))):
            cp[k] = self.latency[k] + max((cp[s] for s in self.succs[k]), default=0)
        return cp

    def edges(self) -> list[tuple[int, int]]:
        return [(a, b) for a in range(len(self)) for b in sorted(self.succs[a])]


def node_kind(ins: Instruction) -> str:
    """``effect()``, with terminators and timer reads singled out (both stay in place)."""
    if ins.op in TERMINATORS:
        return "terminator"
    if any(_TIMER_RE.search(op) for op in ins.operands):
        return "barrier"  # moving a timer read changes what it measures
    return effect(ins)


def latency_of(ins: Instruction | None, kind: str) -> int:
    """A rough result latency for ``ins`` (a priority, see the table above)."""
    if ins is None or kind in ("fence", "terminator"):
        return 1
    if kind == "load":
        return _LOAD_LATENCY.get(ins.space or "generic", _SLOW_LATENCY)
    if kind in ("store", "prefetch"):
        return 4
    if kind == "barrier":
        return 20
    if ins.op in _MATH_LATENCY:
        return _MATH_LATENCY[ins.op]
    wide = "f64" in ins.mods or "wide" in ins.mods or (
        ins.op in ("mul", "mad") and not any(m.startswith(("f", "bf")) for m in ins.mods))
    return 6 if wide else 4


def build_dag(fn: Function, block: range, info: PointerInfo) -> Dag:
    """The DAG over the statements of ``fn.body[block]`` (one basic block)."""
    dag = Dag()
    pending: list[int] = []  # .loc lines waiting for the node they describe
    for idx in block:
        stmt = fn.body[idx].stmt
        if isinstance(stmt, Instruction):
            kind = node_kind(stmt)
        elif isinstance(stmt, (Directive, Label)) or (isinstance(stmt, Other)
                                                      and stmt.text in ("{", "}")):
            kind, stmt = "fence", None
        else:  # .loc, or the empty Other holding the whitespace before the closing brace
            pending.append(idx)
            continue
        dag.anchors.append(idx)
        dag.groups.append(pending + [idx])
        dag.kinds.append(kind)
        dag.latency.append(latency_of(stmt, kind))
        pending = []
    dag.tail = pending
    n = len(dag.anchors)
    dag.succs = [set() for _ in range(n)]
    dag.preds = [set() for _ in range(n)]
    _add_edges(dag, fn, info)
    return dag


def _add_edges(dag: Dag, fn: Function, info: PointerInfo) -> None:
    """Fill succs/preds in one forward pass (see the module docstring for the rules)."""
    last_def: dict[str, int] = {}
    uses_since_def: dict[str, list[int]] = {}
    ancestors: list[int] = []  # bitmask of every node that must precede node k
    loads = stores = 0  # bitmasks of the load / store nodes seen so far
    accesses = []
    last_fence: int | None = None

    for k, (idx, kind) in enumerate(zip(dag.anchors, dag.kinds)):
        stmt = fn.body[idx].stmt
        ins = stmt if isinstance(stmt, Instruction) else None
        accesses.append(access_of(ins) if kind in ("load", "store") else None)
        preds: set[int] = set()
        if last_fence is not None:
            preds.add(last_fence)
        if ins is not None and kind not in FENCE_KINDS:
            for reg in ins.uses():  # RAW
                if reg in last_def:
                    preds.add(last_def[reg])
            for reg in ins.defs():  # WAW, WAR
                if reg in last_def:
                    preds.add(last_def[reg])
                preds.update(uses_since_def.get(reg, ()))
            for reg in ins.uses():
                uses_since_def.setdefault(reg, []).append(k)
            for reg in ins.defs():
                last_def[reg] = k
                uses_since_def[reg] = []
        preds.discard(k)
        anc = 0
        for p in preds:
            anc |= ancestors[p] | (1 << p)
        dag.preds[k] = preds

        if kind in FENCE_KINDS:
            candidates = (1 << k) - 1  # everything before
        elif kind == "load":
            candidates = stores
        elif kind == "store":
            candidates = loads | stores
        else:
            candidates = 0
        # Latest candidates first: an edge from a late node usually implies the earlier ones.
        rest = candidates & ~anc
        while rest:
            p = rest.bit_length() - 1
            rest ^= 1 << p
            if kind in FENCE_KINDS or _conflict(accesses[p], accesses[k], info):
                preds.add(p)
                anc |= ancestors[p] | (1 << p)
                rest &= ~anc
        ancestors.append(anc)
        for p in preds:
            dag.succs[p].add(k)

        if kind == "load":
            loads |= 1 << k
        elif kind == "store":
            stores |= 1 << k
        elif kind in FENCE_KINDS:
            last_fence = k


def _conflict(a, b, info: PointerInfo) -> bool:
    """Whether two memory ops (not both loads) must keep their order."""
    return a is None or b is None or info.may_alias(a, b)
