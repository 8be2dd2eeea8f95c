"""Thread coarsening: each thread does the work of k threads, and the grid shrinks by k.

Applies to kernels of the shape ``genomes.thread_index.straight_body`` recognizes (a global
index G = ctaid.x*ntid.x+tid.x that alone ties threads to the launch, an optional bounds
check, a straight-line body, an exit that only returns) in a one-dimensional launch,
once short forward branches in the body are predicated (``genomes.if_convert``: the
branches libdevice leaves in erff, logf, log1pf, tanhf, early returns, short if/else).
The new thread t runs the body for k values of G:

- ``contiguous``: G = k·t, k·t+1, ..., k·t+k-1. Accesses whose address is affine in G are
  rewritten to copy 0's address plus a constant, and then merged into v2/v4 accesses
  where alignment is provable (``vec_ld``/``vec_st``): 4 floats in one 16-byte access;
- ``strided``: G = t, t+T, ..., t+(k-1)T with T the launch's thread count: every copy's
  accesses stay coalesced across the warp.

Code, for a kernel with a bounds check ``@P bra EXIT``:

    head (once); G_0..G_k-1; the bounds check of each copy -> P_0..P_k-1
    if any copy is out of bounds: bra SLOW
    the k bodies interleaved instruction by instruction (independent work side by side)
    bra EXIT
    SLOW: each copy in turn, behind its own bounds check
    EXIT: ret

Why interleaving is sound: the copies are what k distinct threads of the original launch
did. In a kernel without data races (threads of the original never write what another
reads or writes; this kernel shape has no barrier or shared memory to order them), their
accesses touch disjoint memory, so any interleaving gives the same result. Each copy gets
fresh registers, so no copy sees another's values. The grid becomes ceil(grid / k); where
k does not divide the grid, the last copies run for G values the old launch did not have,
which the bounds check keeps out (a kernel without one needs k to divide its grid). The
correctness gate checks each variant on the GPU all the same.
"""

from __future__ import annotations

import re

from genomes.if_convert import if_convert
from genomes.launch import Launch
from genomes.ptx import Address, Directive, Instruction, Label, Line, Module
from genomes.thread_index import (StraightBody, declared_registers, global_index,
                                  one_d_index_kernel, register_type, straight_body)
from genomes.transforms.base import NotApplicable, Param, Transform

FACTORS = (2, 4, 8)
FORMS = ("contiguous", "strided")
_PREFIX = "%evc_"  # fresh registers: %evc_f32_0, ... (declared as %evc_f32_<N>)
_LABEL = "$L__evc_"
_MOVABLE = {"pred", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32",
            "f64"}
_REG = re.compile(r"%[A-Za-z_$][\w$]*")


class _Fresh:
    """Fresh registers by type, declared at the end as ``.reg .T %evc_T_<N>``."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def reg(self, type_: str) -> str:
        n = self.counts.get(type_, 0)
        self.counts[type_] = n + 1
        return f"{_PREFIX}{type_}_{n}"

    def declarations(self) -> list[Line]:
        return [Line(Directive(f".reg .{t} \t{_PREFIX}{t}_<{n}>;"))
                for t, n in sorted(self.counts.items())]


class _Copy:
    """One copy of a thread's work: the current name of each original register."""

    def __init__(self, names: dict[str, str]):
        self.names = dict(names)

    def clone(self) -> _Copy:
        return _Copy(self.names)


class _Renamer:
    def __init__(self, fn, fresh: _Fresh, head_end: int):
        self.declared = declared_registers(fn)
        self.fresh = fresh
        # registers the lines kept above the new body write (parameters, %tid, ...)
        self.head = {r for ln in fn.body[:head_end] if isinstance(ln.stmt, Instruction)
                     for r in ln.stmt.defs()}

    def type_of(self, reg: str) -> str:
        t = register_type(reg, self.declared)
        if t is None or t not in _MOVABLE:
            raise NotApplicable(f"register {reg} has no declared type evo can copy")
        return t

    def rename(self, ins: Instruction, copy: _Copy, out: list,
               address: Address | None = None) -> None:
        """Append ``ins`` as ``copy`` runs it to ``out``: reads use the copy's names,
        writes go to fresh registers (a guarded write first copies the old value in, so
        that a write that does not happen leaves it). ``address`` replaces the memory
        operand."""
        def read(text: str) -> str:
            return _REG.sub(lambda m: copy.names.get(m.group(0), m.group(0)), text)

        defs = ins.defs()
        pred = None
        if ins.pred:
            bang = "@!" if ins.pred.startswith("@!") else "@"
            pred = bang + copy.names.get(ins.pred.lstrip("@!"), ins.pred.lstrip("@!"))
        operands = list(ins.operands)
        start = 1 if defs else 0
        for i in range(start, len(operands)):
            if address is not None and operands[i].strip().startswith("["):
                operands[i] = address.render()
            else:
                operands[i] = read(operands[i])
        if defs:
            # Every write goes to a fresh register, never over an earlier one: another
            # copy may still read this copy's earlier value (a moved address reads copy
            # 0's registers), and one definition per register keeps alignment provable.
            target: dict[str, str] = {}
            for reg in defs:
                new = self.fresh.reg(self.type_of(reg))
                # a write that may not happen keeps the value before it, if there is one
                # (if-converted blocks write registers first under a guard)
                if ins.pred and (reg in copy.names or reg in self.head):
                    out.append(Instruction(f"mov.{self.type_of(reg)}",
                                           (new, copy.names.get(reg, reg))))
                target[reg] = new
            operands[0] = _REG.sub(lambda m: target.get(m.group(0), m.group(0)), operands[0])
            copy.names.update(target)
        out.append(ins.with_(operands=tuple(operands), pred=pred))


def _affine_step(ins: Instruction, coef: dict) -> object:
    """How the value ``ins`` defines moves when G moves by one, as far as provable:
    an int (bytes per step, exact modulo 2^64), "G" (G itself), or None (unknown).
    Registers not in ``coef`` do not depend on G (step 0)."""
    def step(operand: str):
        operand = operand.strip()
        if not operand.startswith("%"):
            return 0  # an immediate
        return coef.get(operand, 0)

    if ins.pred or len(ins.defs()) != 1:
        return None
    ops = ins.operands[1:]
    steps = [step(o) for o in ops]
    if all(s == 0 for s in steps):
        return 0
    imm = [_imm(o) for o in ops]
    op, mods = ins.op, ins.mods
    if op == "mov" and len(ops) == 1:
        return steps[0]
    if op in ("cvt", "mul") and "G" in steps:
        # G widened exactly to 64 bits: G stays below the bound (< 2^32), so G_j = G_0 + j.
        if op == "cvt" and mods[-2:] in (("u64", "u32"), ("s64", "s32")):
            return 1
        if op == "mul" and "wide" in mods and len(ops) == 2:
            other = imm[1] if steps[0] == "G" else imm[0]
            return other if other is not None else None
        return None
    if "G" in steps or not any(m in ("u64", "s64", "b64") for m in mods):
        return None  # only 64-bit arithmetic is exact modulo 2^64 (addresses are 64-bit)
    if op == "cvta" and len(ops) == 1:
        return steps[0]
    if op in ("add", "sub") and len(ops) == 2 and None not in steps:
        return steps[0] + steps[1] if op == "add" else steps[0] - steps[1]
    if op == "shl" and len(ops) == 2 and imm[1] is not None and steps[0] is not None:
        return steps[0] << imm[1]
    if op == "mul" and "lo" in mods and len(ops) == 2:
        for s, other in ((steps[0], imm[1]), (steps[1], imm[0])):
            if s not in (None, 0) and other is not None:
                return s * other
    return None


def _is_64_bit(type_: str) -> bool:
    return type_ in ("b64", "u64", "s64")


def _imm(operand: str) -> int | None:
    try:
        return int(operand.strip(), 0)
    except ValueError:
        return None


def _coarsened(fn, shape: StraightBody, k: int, form: str) -> tuple[list[Line], list[Line]]:
    """(register declarations, the new lines between G's definition and the exit block)."""
    fresh = _Fresh()
    renamer = _Renamer(fn, fresh, shape.index.def_line)
    G = shape.index.reg
    body = [fn.body[i].stmt for i in shape.body]
    mid = [fn.body[i].stmt for i in shape.mid]
    out: list = []
    bits = "64" if _is_64_bit(renamer.type_of(G)) else "32"  # a 64-bit G: int64 indexing
    gs = [fresh.reg("b" + bits) for _ in range(k)]
    if form == "contiguous":
        out.append(Instruction(f"mul.lo.s{bits}", (gs[0], G, str(k))))
        out += [Instruction(f"add.s{bits}", (gs[j], gs[0], str(j))) for j in range(1, k)]
    else:
        ntid, nctaid, total = fresh.reg("b32"), fresh.reg("b32"), fresh.reg("b" + bits)
        out += [Instruction("mov.u32", (ntid, "%ntid.x")),
                Instruction("mov.u32", (nctaid, "%nctaid.x")),
                Instruction("mul.wide.u32" if bits == "64" else "mul.lo.s32",
                            (total, ntid, nctaid)),
                Instruction(f"mov.b{bits}", (gs[0], G))]
        out += [Instruction(f"add.s{bits}", (gs[j], gs[j - 1], total)) for j in range(1, k)]
    copies = [_Copy({G: g}) for g in gs]
    for c in copies:  # each copy's bounds check
        for ins in mid:
            renamer.rename(ins, c, out)
    if shape.guard is not None:
        preds = [c.names[shape.skip_pred] for c in copies]
        acc = preds[0]
        for p in preds[1:]:  # any copy out of bounds -> the slow path
            new = fresh.reg("pred")
            out.append(Instruction("and.pred" if shape.negated else "or.pred", (new, acc, p)))
            acc = new
        out.append(Instruction("bra", (_LABEL + "slow",), pred=("@!" if shape.negated else "@") + acc))
    fast = [c.clone() for c in copies]
    # G_j = G_0 + j: exact in 64 bits, so a 64-bit G steps by 1 like any 64-bit value; a
    # 32-bit G is exact only once widened (``_affine_step``)
    coef: dict[str, object] = {G: 1 if bits == "64" else "G"}
    for ins in mid:
        for reg in ins.defs():
            coef[reg] = _affine_step(ins, coef)
    for ins in body:
        addr = ins.address()
        step = coef.get(addr.base, 0) if addr is not None and addr.base.startswith("%") else None
        base0 = fast[0].names.get(addr.base, addr.base) if addr is not None else None
        for j, c in enumerate(fast):
            moved = None
            if form == "contiguous" and j and isinstance(step, int) and step:
                moved = Address(base0, addr.offset + step * j)
            renamer.rename(ins, c, out, moved)
        for reg in ins.defs():
            coef[reg] = _affine_step(ins, coef)
    if shape.guard is not None:
        exit_label = fn.body[shape.exit].stmt.name
        out.append(Instruction("bra.uni", (exit_label,)))
        out.append(Label(_LABEL + "slow"))
        for j, c in enumerate(copies):
            skip = f"{_LABEL}next{j}"
            out.append(Instruction("bra", (skip,), pred=("@" if not shape.negated else "@!")
                                   + c.names[shape.skip_pred]))
            slow = c.clone()
            for ins in body:
                renamer.rename(ins, slow, out)
            out.append(Label(skip))
    lines = [Line(s, "" if isinstance(s, Label) else "\t", "\n") for s in out]
    return fresh.declarations(), lines


def _exit_labels(fn) -> frozenset[str]:
    """Labels that only return (the bounds check's target): not branches to if-convert."""
    exits, body = set(), fn.body
    for i, line in enumerate(body):
        if isinstance(line.stmt, Label):
            nxt = next((ln.stmt for ln in body[i + 1:] if isinstance(ln.stmt, Instruction)),
                       None)
            if nxt is not None and nxt.op == "ret" and not nxt.pred:
                exits.add(line.stmt.name)
    return frozenset(exits)


def apply(module: Module, launch: Launch, k: int, form: str) -> tuple[int, Launch]:
    found = one_d_index_kernel(module, launch)
    if isinstance(found, str):
        raise NotApplicable(found)
    fn, index = found
    if any(name.startswith(_PREFIX) for name in declared_registers(fn)):
        raise NotApplicable("already coarsened")
    # short branches (libdevice's, early returns, if/else) become predication, the bounds
    # check's branch to the exit block excepted (genomes.if_convert)
    if if_convert(fn, index.def_line + 1, _exit_labels(fn)):
        index = global_index(fn)  # lines moved (the new predicates' declaration)
        if isinstance(index, str):
            raise NotApplicable(index)
    shape = straight_body(fn, index)
    if isinstance(shape, str):
        raise NotApplicable(shape)
    grid = launch.grid[0]
    if shape.guard is None and grid % k:
        raise NotApplicable(f"no bounds check, and {k} does not divide the grid of {grid}")
    if grid < k:
        raise NotApplicable(f"the grid has fewer than {k} blocks")
    decls, lines = _coarsened(fn, shape, k, form)
    fn.body[index.def_line + 1:shape.exit] = lines
    last_decl = max((i for i, ln in enumerate(fn.body[:index.def_line + 1])
                     if isinstance(ln.stmt, Directive) and ln.stmt.keyword == ".reg"), default=-1)
    fn.body[last_decl + 1:last_decl + 1] = decls
    if form == "contiguous":  # the point of this form: k neighbours in one wide access
        from genomes.transforms import vec_ld, vec_st

        vec_ld.apply(Module([fn]), width=4)  # this kernel only: a module of its function
        vec_st.apply(Module([fn]), width=4)
    return 1, launch.with_shape((-(-grid // k), 1, 1), launch.block)


TRANSFORM = Transform(
    name="coarsen",
    group="coarsen",
    summary="each thread does the work of k threads (k neighbours, vectorized, or k strided); "
            "the grid shrinks by k",
    applies_when="1-D launches of kernels indexed by ctaid.x*ntid.x+tid.x alone, with a "
                 "body behind an optional bounds check that is straight once its short "
                 "forward branches are predicated",
    params=(Param("k", default=4, choices=FACTORS),
            Param("form", default="contiguous", choices=FORMS)),
    apply=apply,
    edits_launch=True,
)
