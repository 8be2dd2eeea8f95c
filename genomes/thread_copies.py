"""Copies of one thread's work inside one thread, for the coarsening transforms: each copy
reads its own names of the original registers and writes fresh ones, so that copies can be
interleaved instruction by instruction without seeing each other's values.
"""

from __future__ import annotations

import re

from genomes.ptx import Address, Directive, Instruction, Line
from genomes.thread_index import declared_registers, register_type
from genomes.transforms.base import NotApplicable

PREFIX = "%evc_"  # fresh registers: %evc_f32_0, ... (declared as %evc_f32_<N>)
_MOVABLE = {"pred", "b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32",
            "f64"}
_REG = re.compile(r"%[A-Za-z_$][\w$]*")


class FreshRegisters:
    """Fresh registers by type, declared at the end as ``.reg .T %evc_T_<N>``."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def reg(self, type_: str) -> str:
        n = self.counts.get(type_, 0)
        self.counts[type_] = n + 1
        return f"{PREFIX}{type_}_{n}"

    def declarations(self) -> list[Line]:
        return [Line(Directive(f".reg .{t} \t{PREFIX}{t}_<{n}>;"))
                for t, n in sorted(self.counts.items())]


class Copy:
    """One copy of a thread's work: the current name of each original register."""

    def __init__(self, names: dict[str, str]):
        self.names = dict(names)

    def clone(self) -> Copy:
        return Copy(self.names)


class Renamer:
    def __init__(self, fn, fresh: FreshRegisters, head_end: int):
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

    def rename(self, ins: Instruction, copy: Copy, out: list,
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
