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

from genomes.if_convert import exit_labels, if_convert
from genomes.launch import Launch
from genomes.ptx import Address, Directive, Instruction, Label, Line, Module
from genomes.thread_copies import PREFIX, Copy, FreshRegisters, Renamer
from genomes.thread_index import (StraightBody, declared_registers, global_index,
                                  one_d_index_kernel, straight_body)
from genomes.transforms.base import NotApplicable, Param, Transform

FACTORS = (2, 4, 8)
FORMS = ("contiguous", "strided")
_LABEL = "$L__evc_"


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
    fresh = FreshRegisters()
    renamer = Renamer(fn, fresh, shape.index.def_line)
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
    copies = [Copy({G: g}) for g in gs]
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


def apply(module: Module, launch: Launch, k: int, form: str) -> tuple[int, Launch]:
    found = one_d_index_kernel(module, launch)
    if isinstance(found, str):
        raise NotApplicable(found)
    fn, index = found
    if any(name.startswith(PREFIX) for name in declared_registers(fn)):
        raise NotApplicable("already coarsened")
    # short branches (libdevice's, early returns, if/else) become predication, the bounds
    # check's branch to the exit block excepted (genomes.if_convert)
    if if_convert(fn, index.def_line + 1, exit_labels(fn)):
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
