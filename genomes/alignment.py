"""Provable alignment of registers and addresses, for the vectorizing transforms.

``known_alignment(reg, info)`` is the largest power of two (at most ``MAX_ALIGN``) that
divides the register's value on every execution. Internally each register gets a
congruence ``value ≡ r (mod m)`` (m a power of two), so that ``%rd5 = A + 4`` still makes
``[%rd5+4]`` 8-aligned. It starts from the one stated assumption in ``genomes.memory``
(a pointer parameter is ``PARAM_ALIGN``-aligned) and follows single definitions through
integer arithmetic:

- ``ld.param`` (64-bit) of a parameter the function uses as a pointer: ``≡ 0 mod PARAM_ALIGN``;
- ``cvta``, ``mov``: the operand's congruence; integer ``cvt``: the same, truncated;
- ``add``/``sub``: residues add/subtract modulo the smaller modulus;
- ``mul.lo``/``mul.wide`` and the multiply of ``mad.lo``/``mad.wide``: the product rule;
- ``shl`` by an immediate n: modulus and residue times 2^n;
- ``and``/``or``/``xor``: bitwise on the known low bits (and ``x & -16`` is 16-aligned
  whatever x is); ``selp``: the low bits both choices are known to share.

An immediate is known exactly (modulo a large power of two). Anything else -- a register
defined more than once or under a guard, a special register, a value loaded from
memory -- is unknown (mod 1). Nothing here is a guess: a wrong answer would make a
vector access fault with a misaligned address.
"""

from __future__ import annotations

import re
import weakref

from genomes.memory import PARAM_ALIGN, PointerInfo, access_size
from genomes.ptx import Address, Instruction

# No vector access is wider than 16 bytes, so more is never needed by callers.
MAX_ALIGN = 16
# Moduli are kept up to this, so that e.g. ``(x * 32) << 2`` is not cut short early.
_MOD = 1 << 12
_MAX_DEPTH = 128
_INT_TYPE = re.compile(r"[usb](8|16|32|64)$")
_UNKNOWN = (1, 0)

# Per-PointerInfo memo: the param symbols used as pointers, and congruences found so far.
_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def known_alignment(reg: str, info: PointerInfo) -> int:
    """The largest power of two (≤ MAX_ALIGN) that provably divides ``reg``'s value."""
    return min(_alignment(_congruence(reg, info, 0)), MAX_ALIGN)


def address_alignment(addr: Address, info: PointerInfo) -> int:
    """The provable alignment (≤ MAX_ALIGN) of the byte address ``[base+offset]``.

    A symbol base (a shared array, a global variable) counts as unknown: its ``.align``
    lives in the module text, which PointerInfo does not see.
    """
    base = _congruence(addr.base, info, 0) if addr.base.startswith("%") else _UNKNOWN
    return min(_alignment(_add(base, _const(addr.offset))), MAX_ALIGN)


# --- congruences: (m, r) means value ≡ r (mod m), m a power of two, 0 ≤ r < m ---------


def _const(value: int) -> tuple[int, int]:
    return _MOD, value % _MOD


def _alignment(c: tuple[int, int]) -> int:
    m, r = c
    return m if r == 0 else r & -r


def _add(a: tuple[int, int], b: tuple[int, int], sign: int = 1) -> tuple[int, int]:
    m = min(a[0], b[0])
    return m, (a[1] + sign * b[1]) % m


def _mul(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    # (r1 + k1·m1)(r2 + k2·m2) = r1·r2 + k2·m2·r1 + k1·m1·r2 + k1·k2·m1·m2
    m = min(a[0] * _alignment(b), b[0] * _alignment(a), _MOD)
    return m, (a[1] * b[1]) % m


def _common(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """The low bits both are known to share (either value may be the result)."""
    m = min(a[0], b[0])
    while m > 1 and a[1] % m != b[1] % m:
        m //= 2
    return m, a[1] % m


def _bitwise(op: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """Bit ops are bit-local: the low bits known in both give the result's low bits. For
    ``and``, a zero low bit in either operand also stays zero (``x & -16``)."""
    m = min(a[0], b[0])
    r = {"and": a[1] & b[1], "or": a[1] | b[1], "xor": a[1] ^ b[1]}[op] % m
    if op == "and" and max(_alignment(a), _alignment(b)) > _alignment((m, r)):
        return max(_alignment(a), _alignment(b)), 0
    return m, r


def _imm(text: str) -> int | None:
    text = text.strip()
    if text.endswith(("U", "u")):
        text = text[:-1]
    try:
        return int(text, 0)
    except ValueError:
        return None


def _memo(info: PointerInfo) -> dict:
    memo = _MEMO.get(info)
    if memo is None:
        memo = {"pointers": _pointer_params(info), "known": {}}
        _MEMO[info] = memo
    return memo


def _pointer_params(info: PointerInfo) -> frozenset[str]:
    """Params whose value the function uses as an address (cvta'd or a load's base).

    A ``.u64`` param may as well be a size, whose value has no alignment at all, so a
    param only counts as a (PARAM_ALIGN-aligned) pointer on this evidence. A load's base
    may also be the param plus an offset computed from no address at all (``__ldg(x + i)``
    reads ``[x + 4i]`` with no cvta): one of the two addends is the pointer, and an
    integer made of indices and 32-bit params cannot be it.
    """
    found: set[str] = set()
    for instructions in info.defs.values():
        for ins in instructions:
            if ins.op == "cvta" and len(ins.operands) == 2:
                candidates = [ins.operands[1]]
            elif ins.op in ("ld", "ldu") and ins.space != "param":
                addr = ins.address()
                candidates = [addr.base] if addr else []
                if addr and ins.space == "global" and addr.base.startswith("%"):
                    candidates += _pointer_addend(addr.base, info)
            else:
                continue
            for reg in candidates:
                root = info.root(reg) if reg.startswith("%") else None
                if root is not None:
                    found.add(root.param)
    return frozenset(found)


def _pointer_addend(reg: str, info: PointerInfo) -> list[str]:
    """For ``reg = add.s64 a, b`` (its one definition, unguarded) with ``b`` an integer
    that is no address (``_no_address``), ``[a]``; else none."""
    ins = info.single_def(reg)
    if ins is None or ins.pred or ins.op != "add" or len(ins.operands) != 3:
        return []
    a, b = ins.operands[1], ins.operands[2]
    out = [ptr for ptr, offset in ((a, b), (b, a))
           if ptr.startswith("%") and _no_address(offset, info, 0)]
    return out if len(out) == 1 else []


def _no_address(operand: str, info: PointerInfo, depth: int) -> bool:
    """Whether ``operand`` is computed from immediates, special registers (``%tid.x``) and
    params of at most 32 bits alone, through arithmetic: then it holds no address (no
    64-bit param, no symbol's address, nothing loaded from memory)."""
    if not operand.startswith("%"):
        return _imm(operand) is not None  # a symbol (a variable's address) is an address
    defs = info.defs.get(operand)
    if defs is None:
        return "." in operand  # %tid.x, %ctaid.y, ...: never an address
    if depth > _MAX_DEPTH or len(defs) != 1:
        return False
    ins = defs[0]
    if ins.op == "ld":
        return ins.space == "param" and access_size(ins) <= 4
    return ins.op in ("mov", "cvt", "add", "sub", "mul", "mad", "shl", "and", "or") and all(
        _no_address(src, info, depth + 1) for src in ins.operands[1:])


def _operand(text: str, info: PointerInfo, depth: int) -> tuple[int, int]:
    text = text.strip()
    if text.startswith("%"):
        return _congruence(text, info, depth + 1)
    value = _imm(text)
    return _UNKNOWN if value is None else _const(value)


def _congruence(reg: str, info: PointerInfo, depth: int) -> tuple[int, int]:
    memo = _memo(info)
    known = memo["known"]
    if reg in known:
        return known[reg]
    if depth > _MAX_DEPTH:
        return _UNKNOWN  # not cached: a shallower query may still get the full answer
    ins = info.single_def(reg)
    result = _UNKNOWN if ins is None or ins.pred else _rule(ins, info, depth, memo["pointers"])
    known[reg] = result
    return result


def _rule(ins: Instruction, info: PointerInfo, depth: int,
          pointers: frozenset[str]) -> tuple[int, int]:
    """The congruence of the value ``ins`` writes, by the rules in the module docstring."""
    ops = ins.operands
    type_ = next((m for m in reversed(ins.mods) if _INT_TYPE.match(m)), None)

    def arg(i: int) -> tuple[int, int]:
        return _operand(ops[i], info, depth)

    if ins.op == "ld" and ins.space == "param" and len(ops) == 2:
        addr = ins.address()
        ok = (addr is not None and addr.offset == 0 and addr.base in pointers
              and type_ in ("u64", "b64", "s64"))
        return (PARAM_ALIGN, 0) if ok else _UNKNOWN
    if ins.op in ("cvta", "mov") and len(ops) == 2:
        return arg(1) if ops[1].strip().startswith("%") or _imm(ops[1]) is not None \
            else _UNKNOWN
    if type_ is None:  # float arithmetic says nothing about address bits
        return _UNKNOWN
    if "cc" in ins.mods or "hi" in ins.mods or "sat" in ins.mods:
        return _UNKNOWN
    if ins.op == "cvt" and len(ops) == 2 and all(_INT_TYPE.match(m) for m in ins.mods[-2:]):
        bits = int(_INT_TYPE.match(ins.mods[-2]).group(1))  # truncation keeps the low bits
        m, r = arg(1)
        m = min(m, 1 << min(bits, 12))
        return m, r % m
    if ins.op in ("add", "sub") and len(ops) == 3:
        return _add(arg(1), arg(2), 1 if ins.op == "add" else -1)
    if ins.op == "selp" and len(ops) == 4:
        return _common(arg(1), arg(2))
    if ins.op in ("and", "or", "xor") and len(ops) == 3:
        return _bitwise(ins.op, arg(1), arg(2))
    if ins.op == "mul" and len(ops) == 3 and ("lo" in ins.mods or "wide" in ins.mods):
        return _mul(arg(1), arg(2))
    if ins.op == "mad" and len(ops) == 4 and ("lo" in ins.mods or "wide" in ins.mods):
        return _add(_mul(arg(1), arg(2)), arg(3))
    if ins.op == "shl" and len(ops) == 3:
        shift = _imm(ops[2])
        if shift is not None and 0 <= shift < 64:
            m, r = arg(1)
            m2 = min(m << shift, _MOD)
            return m2, (r << shift) % m2
    return _UNKNOWN
