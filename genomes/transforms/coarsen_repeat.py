"""Thread coarsening over a repeat: each thread does the work of k threads whose blocks are
S apart and that load the same elements, loads them once, and ptxas drops the arithmetic
the copies then repeat; the grid shrinks by k.

A kernel often writes one result several times: Llama's attention repeats each key head
for 4 query heads (``repeat_kv``), and Inductor fuses that copy into the rotary
embedding, so 4 of every 4 x 32 blocks load the same key elements and angles and compute
the same sines and cosines, only to store them to 4 places. Where the kernel is of
``coarsen_tile``'s shape (a one-dimensional launch of a straight-line tile reading
``%tid.x``/``%ctaid.x`` anywhere), thread t of new block c runs, for j < k, thread t of

    block_j = (c / S) * k * S + c % S + j * S

each copy on its own registers (``coarsen_tile``'s copies). S is the smallest stride
(k * S dividing the grid) on which a sample of blocks loads what the block S before it
loaded; it is only a guess until proven. The proof evaluates the new launch's index
arithmetic for every thread (``genomes.lane_eval``: exact, no sampling) and makes two
rewrites where it holds:

- a copy's global load whose address is copy 0's (same pointer, same offset on every
  thread on which the copy's guard holds) and whose guard holds only where copy 0's does
  becomes a guarded ``mov`` from copy 0's value: the two loads are neighbours (the copies
  of one instruction are emitted side by side), so no store comes between them;
- a copy's integer or predicate register read by its data arithmetic (a ``selp``'s
  condition, a converted index) that equals copy 0's on every thread is read from copy
  0's register instead.

The copies' arithmetic then reads copy 0's registers only, and ptxas's common
subexpression elimination keeps one of each; their stores stay (addressed from copy 0's
by ``addr_rebase`` where the distance is constant). Proofs hold for the new launch only,
which the genome keeps (``pins_launch``).
"""

from __future__ import annotations

import re

from genomes import proofs
from genomes.launch import Launch
from genomes.memory import PointerInfo, effect
from genomes.ptx import Instruction, Line, Module
from genomes.thread_copies import Copy, FreshRegisters
from genomes.thread_index import declared_registers, register_type
from genomes.transforms.base import NotApplicable, Param, Transform
from genomes.transforms.coarsen_tile import FACTORS, copied, divide, merge_copies, prepared

PROOF = "coarsen_repeat/1"  # genomes.proofs: by (slice, loads, pairs, launch)
STRIDE = "coarsen_repeat_stride/1"  # the sampled stride, by (slice, loads, launch, k)
STRIDES = 64  # candidate strides tried on the sample, at most
_REG = re.compile(r"%[A-Za-z_$][\w$]*")
_INDEX = {"%ctaid.x": "%evk_ctaid", "%tid.x": "%evk_tid"}  # coarsen_tile's placeholders


def _is_load(ins: Instruction) -> bool:
    """A global load addressed by a register."""
    return (ins.op == "ld" and ins.space == "global" and effect(ins) == "load"
            and (a := ins.address()) is not None and a.base.startswith("%"))


def _stride(fn, launch: Launch, k: int) -> int:
    """The smallest S with k * S dividing the grid on which sample blocks b and b + S load
    the same addresses under the same guards (a guess, proven later on the new launch)."""
    from genomes import lane_eval

    info = PointerInfo(fn)
    loads = [ins for ins in fn.instructions() if _is_load(ins)]
    regs = lane_eval.modelled(fn, info)
    wanted = sorted({a.address().base for a in loads} | {a.pred.lstrip("@!") for a in loads
                                                         if a.pred})
    if not loads or any(r not in regs for r in wanted):
        raise NotApplicable("the loads' addresses or guards cannot be evaluated")
    grid = launch.grid[0]
    strides = [s for s in range(1, grid // k + 1) if grid % (k * s) == 0][:STRIDES]
    try:
        code = lane_eval.backward_slice(fn, wanted, info)
    except lane_eval.Unsupported as why:
        raise NotApplicable(f"the loads' addresses cannot be evaluated: {why}") from None
    key = (tuple(i.render() for i in code), tuple(i.render() for i in loads), launch.grid,
           launch.block, k)
    kept = proofs.recall(STRIDE, key)  # the guess, for every gene and genome of a search
    if kept is None:
        kept = _sampled(fn, info, loads, wanted, launch, strides)
        proofs.keep(STRIDE, key, kept)
    if not kept:
        raise NotApplicable(f"no stride of at most {strides[-1]} blocks repeats the loads")
    return kept


def _sampled(fn, info, loads, wanted, launch: Launch, strides: list[int]) -> int:
    """The first of ``strides`` that repeats the loads on the sample blocks, or 0."""
    from genomes import lane_eval

    grid = launch.grid[0]
    for s in strides:
        blocks = sorted({0, s // 2, s - 1, grid - 2 * s, grid - s - 1})
        try:
            chunk = next(lane_eval.evaluate(fn, wanted, launch.grid, launch.block, info=info,
                                            ctas=blocks + [b + s for b in blocks]))
        except lane_eval.Unsupported as why:
            raise NotApplicable(f"the loads' addresses cannot be evaluated: {why}") from None
        half = len(blocks) * launch.block[0]
        if all(_same(chunk, ins, ins, slice(0, half), slice(half, None)) for ins in loads):
            return s
    return 0


def _same(chunk: dict, a: Instruction, b: Instruction, at_a, at_b) -> bool:
    """Whether load ``b`` (threads ``at_b``) reads what ``a`` read (threads ``at_a``)
    wherever its guard holds, and ``a``'s guard held there."""
    import numpy as np

    from genomes.lane_merge import guard_mask

    pa, pb = chunk[a.address().base], chunk[b.address().base]
    if not hasattr(pa, "param") or not hasattr(pb, "param") or pa.param != pb.param:
        return False
    size = len(np.asarray(pb.offset))
    ga = guard_mask(chunk, a.pred, size)[at_a]
    gb = guard_mask(chunk, b.pred, size)[at_b]
    oa = np.asarray(pa.offset)[at_a] + a.address().offset
    ob = np.asarray(pb.offset)[at_b] + b.address().offset
    return bool(np.all(ga | ~gb) and np.array_equal(oa[gb], ob[gb]))


def _index_lines(fresh: FreshRegisters, k: int, s: int) -> tuple[list, list[Copy]]:
    """The new thread's k original blocks, S apart (see the docstring), and a copy of the
    thread's work reading each."""
    c, q, r, base = (fresh.reg("b32") for _ in range(4))
    out = [Instruction("mov.u32", (c, "%ctaid.x")), *divide(q, r, c, s),
           Instruction("mad.lo.s32", (base, q, str(k * s), r))]
    copies = []
    for j in range(k):
        cta = base
        if j:
            cta = fresh.reg("b32")
            out.append(Instruction("add.s32", (cta, base, str(j * s))))
        copies.append(Copy({_INDEX["%ctaid.x"]: cta, _INDEX["%tid.x"]: "%tid.x"}))
    return out, copies


def _pairs(twins, regs: set[str]) -> list[tuple[int, int, str, str]]:
    """(twin, copy, copy 0's register, the copy's) for the evaluable registers that the
    copies' data instructions read in place of copy 0's (address operands left out: the
    loads are compared whole, the stores rebased)."""
    out = []
    for n, mine in enumerate(twins):
        first = mine[0]
        defs = first.defs()
        if len(defs) == 1 and defs[0] in regs:
            continue  # index arithmetic itself: only what data reads from it matters
        start = 1 if defs else 0
        names0 = _data_reads(first, start)
        for j, ins in enumerate(mine[1:], 1):
            out += [(n, j, a, b) for a, b in zip(names0, _data_reads(ins, start))
                    if a != b and a in regs and b in regs]
    return out


def _data_reads(ins: Instruction, start: int) -> list[str]:
    """The registers ``ins`` reads from operand ``start`` on, its address left out, then
    its guard's ("" for none): position for position alike in every copy."""
    texts = [o for o in ins.operands[start:] if not o.strip().startswith("[")]
    return _REG.findall(" ".join(texts)) + [(ins.pred or "").lstrip("@!")]


def _guard(pred: str | None, table: dict[str, str]) -> str | None:
    """The guard ``pred`` reading ``table``'s register for its own, where it has one."""
    if not pred:
        return pred
    bang = "@!" if pred.startswith("@!") else "@"
    return bang + table.get(pred.lstrip("@!"), pred.lstrip("@!"))


def _proven(fn, twins, launch: Launch) -> tuple[list, list]:
    """(the (twin, copy) loads that copy 0's value can replace, the register pairs found
    equal on every thread of ``launch``)."""
    import numpy as np

    from genomes import lane_eval

    info = PointerInfo(fn)
    regs = lane_eval.modelled(fn, info)
    loads = [(n, j) for n, mine in enumerate(twins) if _is_load(mine[0])
             for j in range(1, len(mine))]
    loads = [(n, j) for n, j in loads
             if all(r in regs for r in _address_regs(twins[n][0]) + _address_regs(twins[n][j]))]
    pairs = _pairs(twins, regs)
    wanted = sorted({r for n, j in loads for i in (0, j) for r in _address_regs(twins[n][i])}
                    | {r for *_, a, b in pairs for r in (a, b)})
    if not wanted:
        return [], []
    code = lane_eval.backward_slice(fn, wanted, info)
    # the loads whole (their offsets and guards decide too), the registers by name
    key = (tuple(i.render() for i in code),
           tuple((n, j, twins[n][0].render(), twins[n][j].render()) for n, j in loads),
           tuple(p[2:] for p in pairs), launch.grid, launch.block)
    kept = proofs.recall(PROOF, key)
    if kept is not None:
        return [tuple(x) for x in kept[0]], [tuple(x) for x in kept[1]]
    alive_loads, alive_pairs = set(loads), set(pairs)
    for chunk in lane_eval.evaluate(fn, wanted, launch.grid, launch.block, info=info):
        everyone = slice(None)
        alive_loads = {(n, j) for n, j in alive_loads
                       if _same(chunk, twins[n][0], twins[n][j], everyone, everyone)}
        alive_pairs = {p for p in alive_pairs if _equal(chunk[p[2]], chunk[p[3]], np)}
        if not alive_loads and not alive_pairs:
            break
    found = sorted(alive_loads), sorted(alive_pairs)
    proofs.keep(PROOF, key, [list(map(list, found[0])), list(map(list, found[1]))])
    return found


def _address_regs(ins: Instruction) -> list[str]:
    return [ins.address().base] + ([ins.pred.lstrip("@!")] if ins.pred else [])


def _equal(a, b, np) -> bool:
    if hasattr(a, "param") or hasattr(b, "param"):
        return (hasattr(a, "param") and hasattr(b, "param") and a.param == b.param
                and np.array_equal(a.offset, b.offset))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def _rewrite(fn, twins, loads, pairs) -> int:
    """Apply the proven rewrites; how many instructions changed."""
    declared = declared_registers(fn)
    renames: dict[int, dict[str, str]] = {}
    for n, j, a, b in pairs:
        renames.setdefault(id(twins[n][j]), {})[b] = a
    new: dict[int, list[Instruction]] = {}
    for n, j in loads:
        a, b = twins[n][0], twins[n][j]
        pred = _guard(b.pred, renames.get(id(b), {}))  # the guard may itself be copy 0's
        new[id(b)] = [Instruction(f"mov.{register_type(d, declared)}", (d, s), pred=pred)
                      for d, s in zip(b.defs(), a.defs())]
    for n, mine in enumerate(twins):
        for ins in mine[1:]:
            if id(ins) in renames and id(ins) not in new:
                table = renames[id(ins)]
                start = 1 if ins.defs() else 0
                ops = list(ins.operands)
                for i in range(start, len(ops)):
                    if not ops[i].strip().startswith("["):
                        ops[i] = _REG.sub(lambda m: table.get(m.group(0), m.group(0)), ops[i])
                new[id(ins)] = [ins.with_(operands=tuple(ops), pred=_guard(ins.pred, table))]
    body = []
    for line in fn.body:
        if id(line.stmt) in new:
            body += [Line(s, line.before, line.after) for s in new[id(line.stmt)]]
        else:
            body.append(line)
    fn.body[:] = body
    return len(new)


def precheck(module: Module, launch: Launch, k: int) -> str | None:
    """Why the kernel is not of the shape for k copies or its loads do not repeat on the
    sample (``_stride``), or None: what a search asks of this gene, without the proof."""
    try:
        fn = prepared(module.copy(), launch, k)
        _stride(fn, launch, k)
    except NotApplicable as why:
        return str(why)
    return None


def apply(module: Module, launch: Launch, k: int) -> tuple[int, Launch]:
    fn = prepared(module, launch, k)
    s = _stride(fn, launch, k)
    twins = copied(fn, lambda fresh: _index_lines(fresh, k, s))
    new = launch.with_shape((launch.grid[0] // k, 1, 1), launch.block)
    from genomes import lane_eval
    try:
        loads, pairs = _proven(fn, twins, new)
    except lane_eval.Unsupported as why:
        raise NotApplicable(f"the copies' indices cannot be evaluated: {why}") from None
    if not loads:
        raise NotApplicable(f"no load of the copies {s} blocks apart is proven to read "
                            "copy 0's elements")
    _rewrite(fn, twins, loads, pairs)
    merge_copies(fn, new)
    return 1, new


TRANSFORM = Transform(
    name="coarsen_repeat",
    group="coarsen",
    summary="each thread does the work of k threads S blocks apart that load the same "
            "elements (a result written several times: repeat_kv fused into a rotary "
            "embedding), loads them once where evaluating the new launch proves the "
            "addresses equal, and ptxas drops the repeated arithmetic; the grid shrinks by k",
    applies_when="coarsen_tile's kernels (1-D straight-line tiles) whose loads repeat with "
                 "a stride of S blocks, k * S dividing the grid",
    params=(Param("k", default=4, choices=FACTORS),),
    apply=apply,
    edits_launch=True,
    pins_launch=True,
    enabled_by=("fast_sincos",),  # libdevice's sin/cos: branches and local memory
    precheck=precheck,
)
