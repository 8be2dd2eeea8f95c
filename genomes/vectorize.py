"""Rules shared by the vectorizing transforms (vec_ld, vec_st): element sizes, which
lines pin code in place, where a provably aligned vector may start, and vector opcodes."""

from __future__ import annotations

from genomes.alignment import address_alignment
from genomes.memory import PointerInfo
from genomes.ptx import Address, Directive, Instruction, Other

SIZES = {"f32": 4, "b32": 4, "u32": 4, "s32": 4, "f64": 8, "b64": 8, "u64": 8, "s64": 8}


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
