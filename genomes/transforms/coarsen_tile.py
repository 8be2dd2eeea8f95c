"""Thread coarsening for kernels that read their thread and block index anywhere (Triton's
tiles): each thread does the work of k neighbouring threads of the launch, and the grid
shrinks by k.

``coarsen`` needs one global index ``G = ctaid.x * ntid.x + tid.x`` through which alone
the threads depend on the launch. Triton computes its offsets as ``ctaid.x * XBLOCK +
(tid.x * V) % XBLOCK`` and reads ``%tid.x`` where it likes, which is not that shape. This
transform needs less: a one-dimensional launch whose grid k divides, a kernel that reads
no special register but ``%tid.x``, ``%ctaid.x`` and ``%ntid.x``, uses no shared or local
memory, barrier or warp collective, and -- once short forward branches are predicated
(``genomes.if_convert``) -- runs straight to one final ``ret``. Then each thread's work
depends on (ctaid.x, tid.x) alone and threads do not communicate, so thread t of new
block c can run, for j < k, the original thread

    g = (c * ntid + t) * k + j,    ctaid_j = g / ntid,    tid_j = g % ntid

each copy reading its own ctaid_j / tid_j and writing fresh registers. The copies are
interleaved instruction by instruction (independent work side by side; in a kernel
without data races they touch disjoint memory, as in ``coarsen``).

Why: a warp's access of copy j spans k times the addresses it did, so neighbouring
copies' accesses are merged back where evaluating the new launch proves them
consecutive and aligned (``vec_ld_index``, ``vec_st_index``) and the others are
addressed from copy 0's registers where their distance is constant (``addr_rebase``).
A tile of V elements a thread becomes one of k*V: Triton's per-element index arithmetic
left dead, and a table read across a warp (a rotary embedding's angles, 2 KiB apart a
thread) met in fewer distinct lines per instruction. Those proofs hold for the new launch
only, which the genome then keeps (``pins_launch``).
"""

from __future__ import annotations

import re

from genomes.if_convert import exit_labels, if_convert
from genomes.launch import Launch
from genomes.ptx import Directive, Instruction, Line, Module
from genomes.thread_copies import PREFIX, Copy, FreshRegisters, Renamer
from genomes.thread_index import declared_registers, works_together
from genomes.transforms.base import NotApplicable, Param, Transform, launched

FACTORS = (2, 4, 8)
_INDEX = {"%tid.x": "%evk_tid", "%ctaid.x": "%evk_ctaid"}  # what each copy reads instead
_READ = frozenset(_INDEX) | {"%ntid.x"}
_FLOW = frozenset({"bra", "brx", "call", "ret", "exit"})
_SPACES = {"ld": ("global", "param", "const"), "st": ("global",), "atom": ("global",),
           "red": ("global",)}


def _refusal(fn, launch: Launch, k: int) -> str | None:
    """Why the kernel is not of the shape above for this launch, or None."""
    if launch.grid[1:] != (1, 1) or launch.block[1:] != (1, 1):
        return "the launch is not one-dimensional"
    if launch.grid[0] % k:
        return f"{k} does not divide the grid of {launch.grid[0]} blocks"
    if launch.grid[0] * launch.block[0] >= 1 << 31:
        return "the launch has too many threads for a 32-bit index"
    if any(name.startswith(PREFIX) for name in declared_registers(fn)):
        return "already coarsened"
    for ins in fn.instructions():
        why = works_together(ins, _READ, "tid.x, ctaid.x and ntid.x")
        if why:
            return why
        if ins.op in _SPACES and ins.space not in _SPACES[ins.op]:
            return f"{ins.opcode} is not a global access (copies would share that memory)"
        if any(".local" in o for o in ins.operands):
            return "uses local memory (copies would share it)"
    return None


def _straight(fn) -> str | None:
    """Why the function does not run straight to one final ret, or None."""
    code = [i for i in fn.instructions()]
    for n, ins in enumerate(code):
        if ins.op in _FLOW and not (ins.op == "ret" and not ins.pred and n == len(code) - 1):
            return f"{ins.opcode} before the end (not a straight-line tile)"
    return None


def _index_lines(fresh: FreshRegisters, block: int, k: int) -> tuple[list, list[Copy]]:
    """The new thread's k original (ctaid, tid) pairs, neighbouring threads, and a copy
    reading each."""
    c, t, g, g0 = (fresh.reg("b32") for _ in range(4))
    out = [Instruction("mov.u32", (c, "%ctaid.x")), Instruction("mov.u32", (t, "%tid.x")),
           Instruction("mad.lo.s32", (g, c, str(block), t)),
           Instruction("mul.lo.s32", (g0, g, str(k)))]
    copies = []
    for j in range(k):
        gj = g0
        if j:
            gj = fresh.reg("b32")
            out.append(Instruction("add.s32", (gj, g0, str(j))))
        cta, tid = fresh.reg("b32"), fresh.reg("b32")
        out += divide(cta, tid, gj, block)
        copies.append(Copy({_INDEX["%ctaid.x"]: cta, _INDEX["%tid.x"]: tid}))
    return out, copies


def divide(quotient: str, remainder: str, value: str, by: int) -> list[Instruction]:
    """``quotient, remainder = value / by, value % by`` (unsigned), shifts for a power of 2."""
    if by & (by - 1) == 0:
        return [Instruction("shr.u32", (quotient, value, str(by.bit_length() - 1))),
                Instruction("and.b32", (remainder, value, str(by - 1)))]
    return [Instruction("div.u32", (quotient, value, str(by))),
            Instruction("rem.u32", (remainder, value, str(by)))]


def _reading_copies(ins: Instruction) -> Instruction:
    """``ins`` reading the placeholders each copy renames instead of %tid.x / %ctaid.x."""
    operands = tuple(re.sub(r"%(?:tid|ctaid)\.x\b", lambda m: _INDEX[m.group(0)], o)
                     for o in ins.operands)
    return ins.with_(operands=operands) if operands != ins.operands else ins


def _coarsen(fn, fresh: FreshRegisters, prologue: list,
             copies: list[Copy]) -> list[list[Instruction]]:
    """Run ``copies`` of the thread's work after ``prologue`` (which computes each copy's
    indices); for each original instruction, its copies' instructions (copy 0 first)."""
    first = next(i for i, ln in enumerate(fn.body) if isinstance(ln.stmt, Instruction))
    last = max(i for i, ln in enumerate(fn.body) if isinstance(ln.stmt, Instruction))
    renamer = Renamer(fn, fresh, 0)
    body = [Line(ins) for ins in prologue]
    twins = []
    for i in range(first, last):  # the final ret stays as it is
        line = fn.body[i]
        if not isinstance(line.stmt, Instruction):
            body.append(line)  # labels (debug information points at them), .loc, ...
            continue
        ins, out, mine = _reading_copies(line.stmt), [], []
        for copy in copies:
            renamer.rename(ins, copy, out)
            mine.append(out[-1])  # a guarded write's copy of the old value comes before
        twins.append(mine)
        body += [Line(s, line.before, line.after) for s in out]
    fn.body[first:last] = body
    decl = max((i for i, ln in enumerate(fn.body[:first])
                if isinstance(ln.stmt, Directive) and ln.stmt.keyword == ".reg"), default=-1)
    fn.body[decl + 1:decl + 1] = fresh.declarations()
    return twins


def prepared(module: Module, launch: Launch, k: int):
    """The launched entry, short branches predicated, where it has the shape the module's
    docstring asks for k copies (else NotApplicable)."""
    fn = launched(module, launch)
    why = _refusal(fn, launch, k)
    if why:
        raise NotApplicable(why)
    if_convert(fn, 0, exit_labels(fn))
    why = _straight(fn)
    if why:
        raise NotApplicable(why)
    return fn


def copied(fn, index_lines) -> list[list[Instruction]]:
    """``fn`` (``prepared``) made to run copies of a thread's work: ``index_lines(fresh)``
    gives the lines computing each copy's indices and the copies; ``_coarsen``'s copies of
    each instruction."""
    fresh = FreshRegisters()
    prologue, copies = index_lines(fresh)
    return _coarsen(fn, fresh, prologue, copies)


def merge_copies(fn, launch: Launch) -> None:
    """Merge and rebase the copies' accesses for the new launch (see the docstring)."""
    from genomes.lane_merge import merge
    from genomes.transforms.addr_rebase import rebase

    for step in (lambda: merge(fn, launch, "ld"), lambda: merge(fn, launch, "st"),
                 lambda: rebase(fn, launch)):
        try:
            step()
        except NotApplicable:
            continue  # what cannot be proven stays as the copies left it


def precheck(module: Module, launch: Launch, k: int) -> str | None:
    """Why the kernel is not of the shape for k copies (``prepared``), or None: what a
    search asks of this gene, without the copies' launch-wide proofs."""
    try:
        prepared(module.copy(), launch, k)
    except NotApplicable as why:
        return str(why)
    return None


def apply(module: Module, launch: Launch, k: int) -> tuple[int, Launch]:
    fn = prepared(module, launch, k)
    copied(fn, lambda fresh: _index_lines(fresh, launch.block[0], k))
    new = launch.with_shape((launch.grid[0] // k, 1, 1), launch.block)
    merge_copies(fn, new)
    return 1, new


TRANSFORM = Transform(
    name="coarsen_tile",
    group="coarsen",
    summary="each thread does the work of k neighbouring threads, for kernels that read "
            "tid.x and ctaid.x anywhere (Triton's tiles); their accesses merged back into "
            "vector ones where the new launch proves them consecutive; the grid shrinks by k",
    applies_when="1-D launches whose grid k divides, of kernels without shared or local "
                 "memory, barriers or warp collectives that run straight (short branches "
                 "predicated) to one final ret",
    params=(Param("k", default=4, choices=FACTORS),),
    apply=apply,
    edits_launch=True,
    pins_launch=True,
    enabled_by=("fast_sincos",),  # libdevice's sin/cos: branches and local memory
    precheck=precheck,
)
