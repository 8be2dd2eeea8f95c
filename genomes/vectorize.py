"""Rules shared by the vectorizing transforms (vec_ld, vec_st): element sizes, which
lines pin code in place, where a provably aligned vector may start, and vector opcodes."""

from __future__ import annotations

from genomes.alignment import address_alignment
from genomes.memory import PointerInfo, basic_blocks
from genomes.ptx import Address, Directive, Instruction, Line, Other

MAX_VECTOR_BYTES = 16  # v4 of 4-byte or v2 of 8-byte elements
# 1- and 2-byte elements (int8 data; nvcc moves f16/bf16 values as u16/b16) form v2 and
# v4 too: ptxas (CUDA 13.0, sm_90) makes ld.global.v4.u8 one 32-bit LDG and a PRMT per
# byte, where four scalar loads were four LDG.U8; each element is widened into its
# register as the scalar load widened it
SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2,
         "f32": 4, "b32": 4, "u32": 4, "s32": 4, "f64": 8, "b64": 8, "u64": 8, "s64": 8}


def blocks_motion(stmt) -> bool:
    """Non-instruction lines that pin code: scope braces (registers declared inside a
    ``{ }`` do not exist outside it) and directives. Blank lines and ``.loc`` do not."""
    if isinstance(stmt, Directive):
        return True
    return isinstance(stmt, Other) and stmt.text.strip() in ("{", "}")


def group_start(offset: int, size: int, n: int, base: str, info: PointerInfo) -> int | None:
    """The offset of the n-element vector that holds element ``offset`` and whose address
    is provably aligned to n·size bytes, or None. The base itself need not be aligned
    (``%rd5 = A+4``): the candidates are tried by their full address."""
    span = n * size
    for k in range(n):
        start = offset - k * size
        if address_alignment(Address(base, start), info) >= span:
            return start
    return None


def vector_opcode(ins: Instruction, n: int) -> str:
    """``ld.global.nc.f32`` -> ``ld.global.nc.v4.f32``: the vector size goes before the type."""
    *head, type_ = ins.opcode.split(".")
    return ".".join([*head, f"v{n}", type_])


def plan_groups(fn, candidates: dict, width: int, size_of, try_group, last_first: bool = False):
    """Choose the vector groups of one function: for each basic block and each width (4,
    then 2 when ``width`` is 4), every not yet used candidate is an anchor; ``try_group``
    returns the members of its aligned vector or None. Returns (groups, used indices).

    Loads anchor on the first of a group (later ones are hoisted up to it); stores on the
    last (earlier ones sink down to it): ``last_first`` walks a block backwards.
    """
    used: set[int] = set()
    groups: list[tuple] = []
    widths = (4, 2) if int(width) == 4 else (2,)
    for block in basic_blocks(fn):
        indices = reversed(block) if last_first else block
        in_block = [candidates[i] for i in indices if i in candidates]
        for want in widths:
            for anchor in in_block:
                n = min(want, MAX_VECTOR_BYTES // size_of(anchor))
                if anchor.index in used or n < 2:
                    continue
                group = try_group(block, anchor, n, used)
                if group is not None:
                    used.update(m.index for m in group)
                    groups.append((anchor, group))
    return groups, used


def rewrite_body(fn, replace: dict, used: set[int]) -> None:
    """Put each anchor's vector instruction in its place and drop the other members."""
    new_body = []
    for i, line in enumerate(fn.body):
        if i in replace:
            new_body.append(Line(replace[i], line.before, line.after))
        elif i not in used:
            new_body.append(line)
    fn.body[:] = new_body
