"""Recognizing kernels whose threads depend on the launch only through one global index.

``global_index(fn)`` finds ``G = ctaid.x * ntid.x + tid.x`` (nvcc's ``mad.lo.s32 G, %ctaid,
%ntid, %tid`` after ``mov``s from the special registers, or ``mul.lo`` + ``add``; or, where
the kernel indexes with 64 bits, ``mul.wide.u32 P, %ctaid, %ntid`` + ``cvt.u64.u32 T, %tid``
+ ``add.s64 G, P, T``: a 64-bit G) and checks
that the launch reaches the threads through G alone: no other special register (no y/z
index, no grid-stride ``%nctaid``, no lane or warp id), the ``mov``ed copies of ``%ctaid.x``,
``%ntid.x`` and ``%tid.x`` used for nothing but G, no shared memory, no barrier, no warp
collective (shfl, vote, match, redux), no call, no ``.reqntid``. Then each thread's work
is a function of G alone, and any launch that runs the same set of G values computes the
same thing: that is what the ``block`` gene relies on.

``straight_body(fn, index)`` goes further, for ``coarsen``: the function is

    head    ... G defined here (no stores, no branches)
    mid     instructions after G, computing the guard (no memory access but ld.param)
    guard   @P bra EXIT   (or @!P; optional: a kernel without a bounds check has none)
    body    straight-line code: no labels, no branches (a final ret is allowed); scopes
            ``{ }`` without declarations (nvcc's inline-asm conversions) are no scopes
    EXIT:   ret

so that the work of one thread (mid + body with G given) can be repeated for other values
of G inside one thread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from genomes.ptx import Directive, Function, Instruction, Label, Other

INDEX_SOURCES = ("%ctaid.x", "%ntid.x", "%tid.x")
_COLLECTIVES = frozenset("bar barrier shfl vote match redux activemask elect mbarrier "
                         "call wgmma cp griddepcontrol setmaxnreg".split())
_DECL = re.compile(r"\.reg\s+\.(\w+)\s+(.+?);", re.S)
_SPECIAL = re.compile(r"%(?:tid|ntid|ctaid|nctaid|laneid|warpid|nwarpid|smid|nsmid|gridid|"
                      r"lanemask_\w+|clock|clock64|clock_hi|envreg\d+|globaltimer\w*|cluster\w*|"
                      r"is_explicit_cluster|dynamic_smem_size|total_smem_size|"
                      r"reserved_smem\w*|pm\d+\w*|aggr_smem_size|current_graph_exec)"
                      r"(?:\.[xyz])?\b")


@dataclass
class GlobalIndex:
    """Where a function's global thread index lives."""

    reg: str  # the register holding ctaid.x * ntid.x + tid.x
    def_line: int  # its defining instruction's index in fn.body
    reg_types: dict[str, str]  # declared registers -> PTX type ("f32", "b64", "pred", ...)


@dataclass
class StraightBody:
    """The shape ``coarsen`` needs (see the module docstring); indices into fn.body."""

    index: GlobalIndex
    mid: list[int]  # instruction lines between G's definition and the guard
    guard: int | None  # the ``@P bra EXIT`` line, None when there is no bounds check
    body: list[int]  # instruction lines of the guarded body (a final ret excluded)
    exit: int  # first line of the exit block (the EXIT label, or the final ret)
    skip_pred: str = ""  # P
    negated: bool = False  # the branch is @!P


def declared_registers(fn: Function) -> dict[str, str]:
    """Every register the function declares, with its type: ``.reg .f32 %f<4>`` gives
    %f0..%f3 (each ``<N>`` range is expanded lazily by ``register_type``)."""
    table: dict[str, str] = {}
    for line in fn.body:
        stmt = line.stmt
        if isinstance(stmt, Directive) and stmt.keyword == ".reg":
            for m in _DECL.finditer(stmt.text):
                for name in (n.strip() for n in m.group(2).split(",")):
                    # one name declared in two scopes with two types has no one type: ""
                    table[name] = m.group(1) if table.get(name, m.group(1)) == m.group(1) \
                        else ""
    return table


def register_type(reg: str, declared: dict[str, str]) -> str | None:
    """The declared type of ``reg`` (``%f3`` under ``%f<4>``), or None."""
    if reg in declared:
        return declared[reg]
    m = re.fullmatch(r"(%[A-Za-z_$][\w$]*?)(\d+)", reg)  # %r3, %rd3, %evc_b32_3
    if m:
        for name, type_ in declared.items():
            rng = re.fullmatch(re.escape(m.group(1)) + r"<(\d+)>", name)
            if rng and int(m.group(2)) < int(rng.group(1)):
                return type_
    return None


def _instructions(fn: Function) -> list[tuple[int, Instruction]]:
    return [(i, ln.stmt) for i, ln in enumerate(fn.body) if isinstance(ln.stmt, Instruction)]


def works_together(ins: Instruction, allowed, beyond: str) -> str | None:
    """Why ``ins`` ties a thread to others (a collective, shared memory) or to the launch
    beyond the special registers ``allowed`` (described as ``beyond``), or None."""
    if ins.op in _COLLECTIVES:
        return f"uses {ins.op} (threads of a block or warp work together)"
    if ins.space == "shared" or any(".shared" in o for o in ins.operands):
        return "uses shared memory (threads of a block work together)"
    for special in _SPECIAL.findall(" ".join(ins.operands)):
        if special not in allowed:
            return f"reads {special} (depends on the launch beyond {beyond})"
    return None


def global_index(fn: Function) -> GlobalIndex | str:
    """The function's GlobalIndex, or a one-line reason why its threads may depend on
    the launch in other ways (see the module docstring)."""
    if ".reqntid" in fn.directives:
        return "the kernel requires its block size (.reqntid)"
    if not fn.is_entry:
        return "not a kernel entry"
    code = _instructions(fn)
    source_of: dict[str, str] = {}  # register -> special register it was mov'ed from
    for _, ins in code:
        why = works_together(ins, INDEX_SOURCES, "one global index")
        if why:
            return why
        if ins.op == "mov" and len(ins.operands) == 2 and ins.operands[1].strip() in INDEX_SOURCES:
            source_of[ins.operands[0].strip()] = ins.operands[1].strip()

    def source(operand: str) -> str | None:
        operand = operand.strip()
        return operand if operand in INDEX_SOURCES else source_of.get(operand)

    uses: dict[str, list[int]] = {}
    defs: dict[str, list[int]] = {}
    for i, ins in code:
        for reg in ins.uses():
            uses.setdefault(reg, []).append(i)
        for reg in ins.defs():
            defs.setdefault(reg, []).append(i)
    found: tuple[str, int, set[int]] | None = None  # G, its line, the lines that make it
    for i, ins in code:
        ops = [o.strip() for o in ins.operands]
        if ins.opcode in ("mad.lo.s32", "mad.lo.u32") and len(ops) == 4:
            if {source(ops[1]), source(ops[2])} == {"%ctaid.x", "%ntid.x"} and \
                    source(ops[3]) == "%tid.x":
                found = (ops[0], i, {i})
        elif ins.opcode in ("add.s64", "add.u64") and len(ops) == 3:
            for prod, wide in ((ops[1], ops[2]), (ops[2], ops[1])):
                p, t = _only_def(fn, defs, uses, prod, i), _only_def(fn, defs, uses, wide, i)
                if p is None or t is None:
                    continue
                pops, tops = [o.strip() for o in p[1].operands], [o.strip() for o in t[1].operands]
                if p[1].opcode == "mul.wide.u32" and len(pops) == 3 and \
                        {source(pops[1]), source(pops[2])} == {"%ctaid.x", "%ntid.x"} and \
                        t[1].opcode == "cvt.u64.u32" and len(tops) == 2 and \
                        source(tops[1]) == "%tid.x":
                    found = (ops[0], i, {i, p[0], t[0]})
        elif ins.opcode in ("add.s32", "add.u32") and len(ops) == 3:
            for prod, tid in ((ops[1], ops[2]), (ops[2], ops[1])):
                pdef = defs.get(prod, [])
                if source(tid) != "%tid.x" or len(pdef) != 1:
                    continue
                p = fn.body[pdef[0]].stmt
                pops = [o.strip() for o in p.operands]
                if p.opcode in ("mul.lo.s32", "mul.lo.u32") and len(pops) == 3 and \
                        {source(pops[1]), source(pops[2])} == {"%ctaid.x", "%ntid.x"} and \
                        uses.get(prod) == [i]:
                    found = (ops[0], i, {i, pdef[0]})
        if found:
            break
    if found is None:
        return "no global index ctaid.x * ntid.x + tid.x found"
    reg, line, makers = found
    for i, ins in code:  # a direct read of an index register anywhere else: not G alone
        direct = [o.strip() for o in ins.operands[1:] if o.strip() in INDEX_SOURCES]
        if direct and i not in makers and not (ins.op == "mov" and ins.operands[0].strip()
                                                in source_of):
            return f"{direct[0]} is used for more than the global index"
    if len(defs.get(reg, [])) != 1:
        return f"the global index {reg} is written more than once"
    for copy, special in source_of.items():
        if len(defs.get(copy, [])) != 1:
            return f"{copy} (a copy of {special}) is written more than once"
        if any(u not in makers for u in uses.get(copy, [])):
            return f"{special} is used for more than the global index"
    return GlobalIndex(reg, line, declared_registers(fn))


def _only_def(fn: Function, defs: dict, uses: dict, reg: str, user: int):
    """(line, instruction) of ``reg``'s one definition when ``user`` is its one use."""
    if len(defs.get(reg, [])) != 1 or uses.get(reg) != [user]:
        return None
    return defs[reg][0], fn.body[defs[reg][0]].stmt


def one_d_index_kernel(module, launch) -> tuple[Function, GlobalIndex] | str:
    """The module's only entry and its GlobalIndex, when its threads depend on a
    one-dimensional launch through the global index alone; else the reason why not."""
    if not launch.one_dimensional:
        return f"the launch ({launch}) is not one-dimensional"
    from genomes.launch import launched_entry

    fn = launched_entry(module, launch)
    if isinstance(fn, str):
        return fn
    index = global_index(fn)
    return index if isinstance(index, str) else (fn, index)


def straight_body(fn: Function, index: GlobalIndex) -> StraightBody | str:
    """The head / mid / guard / body / exit split of the module docstring, or why not."""
    body = fn.body
    for i in range(index.def_line):
        stmt = body[i].stmt
        if isinstance(stmt, Label) or (isinstance(stmt, Other) and stmt.text.strip() in "{}"):
            return "control flow or a scope before the global index"
        if isinstance(stmt, Instruction) and not _pure(stmt):
            return f"{stmt.opcode} before the global index"
    seq: list[int] = []  # instruction lines after G, up to the first label or ret
    stop, depth = None, 0
    for i in range(index.def_line + 1, len(body)):
        stmt = body[i].stmt
        if isinstance(stmt, Label) or (isinstance(stmt, Instruction) and stmt.op == "ret"):
            stop = i
            break
        if isinstance(stmt, Other) and stmt.text.strip() in ("{", "}"):
            depth += 1 if stmt.text.strip() == "{" else -1
        # A scope's braces and the registers it declares (nvcc's f16 and f64 helpers:
        # { .reg .b32 %temp; mov.b64 {%temp, %hi}, %fd; }) are dropped by coarsen with the
        # body it rewrites: every register the body writes gets a fresh, typed name.
        if isinstance(stmt, Directive) and not (stmt.keyword == ".reg" and depth > 0):
            return f"a {stmt.keyword} directive inside the body"
        if isinstance(stmt, Instruction):
            seq.append(i)
    if stop is None:
        return "no exit (ret or label) after the body"
    branches = [i for i in seq if body[i].stmt.op in ("bra", "brx", "exit")]
    if len(branches) > 1:
        return "more than one branch (the body is not straight-line)"
    guard = branches[0] if branches else None
    mid = [i for i in seq if guard is not None and i < guard]
    rest = [i for i in seq if guard is None or i > guard]
    # The tail: [ret]  (no guard)  or  [ret] EXIT: ret  (guard; a body may end in ret).
    tail = [(i, ln.stmt) for i, ln in enumerate(body) if i >= stop
            and isinstance(ln.stmt, (Instruction, Label))]
    if guard is not None:
        ins = body[guard].stmt
        if ins.op != "bra" or not ins.pred:
            return "the only branch is not a conditional bra"
        target = ins.operands[0].strip()
        if isinstance(tail[0][1], Instruction) and not tail[0][1].pred and len(tail) > 1:
            tail = tail[1:]  # the body's own final ret, before the exit label
        if not isinstance(tail[0][1], Label) or tail[0][1].name != target:
            return "the bounds check does not branch to the exit block"
        exit_at, tail = tail[0][0], tail[1:]
    else:
        exit_at = tail[0][0]
    if len(tail) != 1 or not isinstance(tail[0][1], Instruction) or tail[0][1].op != "ret" \
            or tail[0][1].pred:
        return "the exit block does more than ret (it would run once per thread)"
    shape = StraightBody(index, mid, guard, rest, exit_at)
    if guard is not None:
        pred = body[guard].stmt.pred
        shape.negated = pred.startswith("@!")
        shape.skip_pred = pred.lstrip("@!")
        if not any(shape.skip_pred in body[m].stmt.defs() for m in mid):
            return "the bounds check's predicate is not computed after the global index"
        for m in mid:
            if not _pure(body[m].stmt):
                return f"{body[m].stmt.opcode} before the bounds check"
    for b in rest:
        ins = body[b].stmt
        if ins.space == "local" or ins.op in ("trap", "brkpt"):
            return f"{ins.opcode} in the body"
    return shape


def _pure(ins: Instruction) -> bool:
    """No side effect and no memory access but a parameter load."""
    from genomes.memory import effect

    if ins.op == "ld":
        return ins.space == "param"
    return effect(ins) == "alu" and ins.op not in _COLLECTIVES
