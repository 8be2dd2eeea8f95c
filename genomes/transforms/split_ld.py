"""Split vector global loads into scalar loads: the inverse of ``vec_ld``.

Rule: ``ld.global[.mods].vn.T {%d0, ..., %dn-1}, [%base+k]`` becomes n loads
``ld.global[.mods].T %di, [%base+k+i·s]`` (s = sizeof T) in element order, at the same
place and under the same guard. Sink elements (``_``) get no load. Always legal for
memory: the loads read the same bytes at the same point, and a global load's result does
not depend on whether it was vectorized. A load one of whose destinations is also its
base or guard register is left alone, since the first scalar load would change the
address or guard of the next ones. Only ``.global`` loads are touched (Triton-style and
hand-vectorized ``float4`` code, and the output of ``vec_ld``).
"""

from __future__ import annotations

import re

from genomes.memory import effect, element_type
from genomes.ptx import Address, Instruction, Line, Module, registers_in
from genomes.transforms.base import Transform

_SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
          "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
          "b64": 8, "u64": 8, "s64": 8, "f64": 8}


def _split(ins: Instruction) -> list[Instruction] | None:
    """The scalar loads equivalent to the vector load ``ins``, or None if not splittable."""
    if ins.op != "ld" or ins.space != "global" or effect(ins) != "load":
        return None
    vec = [m for m in ins.mods if re.fullmatch(r"v\d+", m)]
    type_ = element_type(ins)
    if len(vec) != 1 or type_ not in _SIZES or len(ins.operands) != 2:
        return None  # a third operand is an L2 cache-policy register: keep it whole
    dest, addr = ins.operands[0].strip(), ins.address()
    if addr is None or not (dest.startswith("{") and dest.endswith("}")):
        return None
    elements = [e.strip() for e in dest[1:-1].split(",")]
    if len(elements) != int(vec[0][1:]):
        return None
    pinned = set(registers_in(ins.operands[1])) | set(registers_in(ins.pred or ""))
    if any(e in pinned for e in elements) or all(e == "_" for e in elements):
        return None
    opcode = ".".join([ins.op, *(m for m in ins.mods if m != vec[0])])
    size = _SIZES[type_]
    return [ins.with_(opcode=opcode,
                      operands=(e, Address(addr.base, addr.offset + k * size).render()))
            for k, e in enumerate(elements) if e != "_"]


def apply(module: Module) -> int:
    """Split every vector global load; returns the number of vector loads split."""
    changed = 0
    for fn in module.functions:
        new_body: list[Line] = []
        for line in fn.body:
            parts = _split(line.stmt) if isinstance(line.stmt, Instruction) else None
            if parts is None:
                new_body.append(line)
                continue
            changed += 1
            # The first load keeps the leading text, the last the trailing comment.
            for k, part in enumerate(parts):
                before = line.before if k == 0 else "\t"
                after = line.after if k == len(parts) - 1 else "\n"
                new_body.append(Line(part, before, after))
        fn.body[:] = new_body
    return changed


TRANSFORM = Transform(
    name="split_ld",
    group="ld_width",
    summary="split ld.global.v2/.v4 vector loads into scalar loads at consecutive offsets",
    applies_when="the kernel has vector global loads (hand-vectorized float4, Triton, vec_ld)",
    params=(),
    apply=apply,
)
