"""Prefetch: issue ``prefetch.global.L1/L2 [addr]`` for global loads as early as possible.

For each basic block, every global load whose address register is ready before the load
itself gets a prefetch of its cache line placed right after the address becomes
available (the definition of its base register, or the top of the block when it is
defined earlier). One prefetch per 128-byte line per block; a prefetch has no effect on
results, so it is always safe.
"""

from __future__ import annotations

from genomes.memory import PointerInfo, access_of, basic_blocks, effect
from genomes.ptx import Instruction, Label, Line, Module
from genomes.transforms.base import Param, Transform

LINE_BYTES = 128


def apply(module: Module, level: str) -> int:
    added = 0
    for fn in module.functions:
        info = PointerInfo(fn)
        inserts: dict[int, list[Instruction]] = {}
        for block in basic_blocks(fn):
            start = next((i for i in block if isinstance(fn.body[i].stmt, Instruction)), None)
            if start is None:
                continue
            seen_lines: set[tuple[str, int]] = set()
            for i in block:
                ins = fn.body[i].stmt
                if not (isinstance(ins, Instruction) and ins.op == "ld"
                        and ins.space == "global" and effect(ins) == "load" and not ins.pred):
                    continue
                addr = ins.address()
                acc = access_of(ins)
                if addr is None or acc is None or not addr.base.startswith("%"):
                    continue
                base, offset = info.resolve(acc)
                key = (base, offset // LINE_BYTES)
                if key in seen_lines:
                    continue
                seen_lines.add(key)
                at = _ready_position(fn, block, start, i, addr.base)
                if at is not None and at < i:
                    pf = Instruction(f"prefetch.global.{level}", (addr.render(),))
                    inserts.setdefault(at, []).append(pf)
        for at in sorted(inserts, reverse=True):
            indent = fn.body[at].before if at < len(fn.body) else "\t"
            indent = "\t" if "\n" in indent else indent
            fn.body[at:at] = [Line(pf, indent, "\n") for pf in inserts[at]]
            added += len(inserts[at])
    return added


def _ready_position(fn, block: range, start: int, load_at: int, reg: str) -> int | None:
    """Body index where a prefetch of ``reg`` can go: after its last def before the load."""
    at = start
    for j in range(block.start, load_at):
        stmt = fn.body[j].stmt
        if isinstance(stmt, Label):
            return None
        if isinstance(stmt, Instruction) and reg in stmt.defs():
            at = j + 1
    return at


TRANSFORM = Transform(
    name="prefetch",
    group="prefetch",
    summary="prefetch global load lines into L1 or L2 as soon as their address is known",
    applies_when="global loads whose address is computed before the load in its block",
    params=(Param("level", default="L2", choices=("L1", "L2")),),
    apply=apply,
)
