"""Integer index arithmetic evaluated exactly for every thread of a launch.

Some facts about addresses are hard to prove symbolically but easy to check by
exhaustion: Triton computes each element's address of a tile on its own, through divisions
and remainders by constants that LLVM lowers to ``mul.hi``/shift/sign-fix sequences, and
whether eight such addresses are consecutive depends on the values the thread indices
take. ``evaluate`` runs the instructions that compute the asked registers (their backward
slice) with NumPy, for every thread of ``launch`` in chunks, with PTX's wrap-around
semantics of each integer type; the caller checks its fact on every chunk.

What can be evaluated: registers defined once, unguarded, by integer ``mov``/``add``/
``sub``/``mul``/``mad`` (``lo``, ``hi`` up to 32 bits, ``wide``)/``shl``/``shr``/``and``/
``or``/``xor``/``not``/``neg``/``min``/``max``/``div``/``rem``/``cvt``/``setp``/``selp``/
``bfe`` (immediate fields) from immediates and the special registers a launch fixes (``%tid``, ``%ntid``, ``%ctaid``,
``%nctaid``). A 64-bit pointer parameter is a symbol: a ``Pointer`` is that parameter plus
a byte offset, which only ``add``/``sub``/``mad.wide``/``cvta``/``mov`` may move. Anything
else in the slice -- a scalar parameter (its value is not the launch's), a loaded value, a
register defined twice or under a guard, a float -- raises ``Unsupported``: nothing is
guessed. The result is exact for this launch; a caller's conclusion holds for the launch
it evaluated and no other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from genomes.memory import PointerInfo
from genomes.ptx import Function, Instruction

CHUNK = 1 << 18  # threads a chunk: ~2 MB an array, a few dozen live at once
_WIDTH = {"8": 8, "16": 16, "32": 32, "64": 64}
_SPECIAL = ("%tid", "%ntid", "%ctaid", "%nctaid")
# special registers a launch does not fix: where a warp or block runs, clocks, ...
_OTHER_SPECIAL = ("%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid", "%clock",
                  "%globaltimer", "%lanemask", "%pm", "%envreg", "%cluster", "%nclusterid",
                  "%is_explicit_cluster", "%dynamic_smem_size", "%total_smem_size",
                  "%aggr_smem_size", "%reserved_smem", "%current_graph_exec")


class Unsupported(Exception):
    """The slice holds something ``evaluate`` does not model; the reason says what."""


@dataclass
class Pointer:
    """A pointer parameter's value plus ``offset`` bytes (an array over the threads)."""

    param: str
    offset: np.ndarray


def backward_slice(fn: Function, registers, info: PointerInfo | None = None) -> list[Instruction]:
    """The instructions that compute ``registers``, in program order; every register on
    the way must have one unguarded definition (else ``Unsupported``)."""
    info = info or PointerInfo(fn)
    order = {id(line.stmt): i for i, line in enumerate(fn.body)}
    seen: dict[str, Instruction] = {}
    todo = [r for r in registers if not r.startswith(_SPECIAL)]
    while todo:
        reg = todo.pop()
        if reg in seen:
            continue
        if reg.startswith(_OTHER_SPECIAL):
            raise Unsupported(f"special register {reg} is not the launch's")
        ins = info.single_def(reg)
        if ins is None or ins.pred:
            raise Unsupported(f"{reg} is defined {len(info.defs.get(reg, []))} times or "
                              "under a guard")
        seen[reg] = ins
        todo.extend(r for r in _operand_registers(ins) if r not in seen)
    unique = {id(ins): ins for ins in seen.values()}
    return sorted(unique.values(), key=lambda ins: order[id(ins)])


def evaluable(fn: Function, registers, info: PointerInfo | None = None) -> list[str]:
    """Those of ``registers`` that ``evaluate`` models (each tried alone on one thread: what
    is unsupported is a matter of instructions, not of values)."""
    out = []
    for reg in registers:
        try:
            next(evaluate(fn, [reg], (1, 1, 1), (1, 1, 1), info=info))
        except Unsupported:
            continue
        out.append(reg)
    return out


def modelled(fn: Function, info: PointerInfo | None = None) -> set[str]:
    """Every register ``evaluate`` can model, in one pass in program order (``evaluable``
    tries each register alone, which is slow for hundreds): defined once, unguarded, by a
    modelled instruction from immediates, special registers the launch fixes and
    registers already found."""
    info = info or PointerInfo(fn)
    found: set[str] = set()
    for ins in fn.instructions():
        defs = ins.defs()
        if len(defs) != 1 or ins.pred or info.single_def(defs[0]) is not ins:
            continue
        try:
            _check_modelled(ins)
        except Unsupported:
            continue
        if ins.op == "ld":
            addr = ins.address()
            if ins.mods[-1] not in ("b64", "u64") or addr is None or addr.offset:
                continue
        elif not all(_readable(t, found) for t in ins.operands[1:]):
            continue
        found.add(defs[0])
    return found


def _readable(text: str, found: set[str]) -> bool:
    """Whether ``_value`` reads the operand: a register found so far, a special register
    the launch fixes, an integer immediate."""
    text = text.strip()
    if text.startswith("%"):
        return text in found or text.startswith(_SPECIAL)
    try:
        int(text, 0)
    except ValueError:
        return False
    return True


def thread_chunks(grid, block, size: int = CHUNK, ctas=None) -> Iterator[dict[str, np.ndarray]]:
    """The special registers of every thread of a launch (``ctas``: of those blocks
    only, linear block numbers), ``size`` threads at a time:
    ``{"%tid.x": array, ..., "%ntid.x": scalar, ...}``."""
    gx, gy, gz = grid
    bx, by, bz = block
    per_block = bx * by * bz
    blocks = None if ctas is None else np.asarray(ctas, dtype=np.int64)
    total = per_block * (gx * gy * gz if blocks is None else len(blocks))
    fixed = {"%ntid.x": bx, "%ntid.y": by, "%ntid.z": bz,
             "%nctaid.x": gx, "%nctaid.y": gy, "%nctaid.z": gz}
    for start in range(0, total, size):
        t = np.arange(start, min(start + size, total), dtype=np.int64)
        thread, cta = t % per_block, t // per_block
        if blocks is not None:
            cta = blocks[cta]
        yield {**fixed, "%tid.x": thread % bx, "%tid.y": (thread // bx) % by,
               "%tid.z": thread // (bx * by), "%ctaid.x": cta % gx,
               "%ctaid.y": (cta // gx) % gy, "%ctaid.z": cta // (gx * gy)}


def evaluate(fn: Function, registers, grid, block, limit: float = 4e9,
             info: PointerInfo | None = None, ctas=None) -> Iterator[dict]:
    """For each chunk of the launch's threads (``ctas``: of those blocks only), ``{register:
    value}`` for ``registers``:
    an array of the register's bits as the signed integer dtype of its width (view it
    unsigned where that is meant), a bool array (predicates) or a ``Pointer``. Raises ``Unsupported`` before the first chunk when the
    slice cannot be modelled or when threads x slice length exceeds ``limit``."""
    code = backward_slice(fn, registers, info)
    threads = (math.prod(grid) if ctas is None else len(ctas)) * math.prod(block)
    if threads * max(len(code), 1) > limit:
        raise Unsupported(f"{threads} threads x {len(code)} instructions is over the "
                          f"check's limit of {limit:.0e}")
    for ins in code:
        _check_modelled(ins)
    last_use = {}
    for i, ins in enumerate(code):
        for reg in _operand_registers(ins):
            last_use[reg] = i
    wanted = set(registers)
    for specials in thread_chunks(grid, block, ctas=ctas):
        env: dict = {}
        for i, ins in enumerate(code):
            with np.errstate(all="ignore"):  # wrap-around is the semantics, not an error
                env[ins.defs()[0]] = _step(ins, env, specials)
            for reg in _operand_registers(ins):  # free what no later instruction reads
                if last_use.get(reg) == i and reg not in wanted:
                    env.pop(reg, None)
        yield {r: (env[r] if r in env else _special(r, specials)) for r in registers}


# ------------------------------------------------------------------------- semantics

_ALU = {"mov", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "neg",
        "min", "max", "div", "rem", "cvt", "cvta", "setp", "selp", "ld", "bfe"}


def _operand_registers(ins: Instruction) -> list[str]:
    return [r for r in ins.uses() if not r.startswith(_SPECIAL)]


def _check_modelled(ins: Instruction) -> None:
    if (ins.op not in _ALU or len(ins.defs()) != 1 or "|" in ins.operands[0]
            or {"sat", "cc"} & set(ins.mods)
            or (ins.op == "setp" and len(ins.operands) != 3)
            or (ins.op == "selp" and len(ins.operands) != 4)):
        raise Unsupported(f"{ins.render().strip()} is not modelled")
    if ins.op == "ld" and ins.mods[:1] != ("param",):
        raise Unsupported(f"{ins.render().strip()} reads memory")
    if ins.op == "cvt" and any(m[0] == "f" or m in ("sat", "rn", "rz", "rm", "rp", "rni",
                                                      "rzi", "rmi", "rpi") for m in ins.mods):
        raise Unsupported(f"{ins.render().strip()} is a float or saturating conversion")
    if ins.op not in ("cvta", "ld") and not _int_type(ins.mods[-1]):
        raise Unsupported(f"{ins.render().strip()} is not integer arithmetic")


def _int_type(mod: str) -> bool:
    return mod == "pred" or (mod[:1] in "usb" and mod[1:] in _WIDTH)


def _width(mod: str) -> int:
    return 1 if mod == "pred" else _WIDTH[mod[1:]]


_SIGNED = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _as(value, w: int, signed: bool) -> np.ndarray:
    """``value``'s low ``w`` bits as a signed or unsigned array of that width (a value of
    another width is truncated or extended as its own dtype says: what ``cvt`` does)."""
    if isinstance(value, Pointer):
        raise Unsupported("a pointer in integer arithmetic")
    if isinstance(value, int):  # an immediate: its two's complement bits
        value = np.array(value & ((1 << 64) - 1), dtype=np.uint64)
    v = np.asarray(value)
    if v.dtype.itemsize * 8 != w:
        v = v.astype(_SIGNED[v.dtype.itemsize * 8] if v.dtype.kind == "i"
                     else _UNSIGNED[v.dtype.itemsize * 8]).astype(_UNSIGNED[w])
    return v.view(_SIGNED[w] if signed else _UNSIGNED[w])


def _store(v: np.ndarray, w: int) -> np.ndarray:
    """The bits of ``v`` kept as the signed dtype of width ``w``."""
    v = np.asarray(v)
    if v.dtype.itemsize * 8 != w:
        v = v.astype(_UNSIGNED[w] if v.dtype.kind == "u" else _SIGNED[w])
    return v.view(_SIGNED[w])


def _special(text: str, specials: dict):
    if text not in specials:
        raise Unsupported(f"special register {text} is not the launch's")
    return _store(np.asarray(specials[text], dtype=np.int64), 32)


def _value(text: str, env: dict, specials: dict):
    text = text.strip()
    if text.startswith(_SPECIAL):
        return _special(text, specials)
    if text.startswith("%"):
        if text not in env:
            raise Unsupported(f"{text} is read before it is written")
        return env[text]
    if text.lower().startswith(("0f", "0d")):
        raise Unsupported(f"float immediate {text}")
    try:
        return int(text, 0)
    except ValueError:
        raise Unsupported(f"operand {text} is not modelled") from None


def _step(ins: Instruction, env: dict, specials: dict):
    """The value ``ins`` writes, from ``env``."""
    op, mods = ins.op, ins.mods
    if op == "ld":  # ld.param.b64/.u64 of a pointer parameter (checked modelled above)
        addr = ins.address()
        if mods[-1] not in ("b64", "u64") or addr is None or addr.offset:
            raise Unsupported(f"{ins.render().strip()}: a scalar parameter's value")
        return Pointer(addr.base, np.int64(0))
    args = [_value(t, env, specials) for t in ins.operands[1:]]
    type_ = mods[-1]
    if op in ("cvta", "mov") and len(args) == 1:
        if isinstance(args[0], Pointer) or type_ == "pred":
            return args[0]
        return _store(_as(args[0], _width(type_), False), _width(type_))
    w, signed = _width(type_), type_.startswith("s")
    if any(isinstance(a, Pointer) for a in args):
        return _pointer_step(ins, args, w, signed)
    if type_ == "pred":
        if op == "selp":
            raise Unsupported("selp of predicates is not modelled")
        return {"and": lambda: args[0] & args[1], "or": lambda: args[0] | args[1],
                "xor": lambda: args[0] ^ args[1], "not": lambda: ~args[0]}[op]()
    if op == "setp":
        return _compare(mods[0], _as(args[0], w, signed), _as(args[1], w, signed))
    if op == "selp":
        return _store(np.where(args[2], _as(args[0], w, False), _as(args[1], w, False)), w)
    if op == "cvt":
        src = mods[-1]
        return _store(_as(args[0], _width(src), src.startswith("s")), _width(mods[-2]))
    if op in ("mul", "mad"):
        return _multiply(op, mods, args, w, signed)
    if op == "bfe":
        return _extract(ins, args, w, signed)
    a = _as(args[0], w, signed)
    if op == "not":
        return _store(~a, w)
    if op == "neg":
        return _store(-a, w)
    if op in ("shl", "shr"):
        b = _as(args[1], 32, False).astype(np.int64)
        clipped = np.minimum(b, w - 1).astype(a.dtype)
        if op == "shr" and signed:  # arithmetic: a shift past the width leaves the sign
            return _store(a >> clipped, w)
        moved = (a << clipped) if op == "shl" else (a.view(_UNSIGNED[w]) >> clipped.view(
            _UNSIGNED[w]))
        return _store(np.where(b >= w, np.zeros((), a.dtype), moved.view(a.dtype)), w)
    b = _as(args[1], w, signed)
    if op in ("div", "rem"):
        if np.any(b == 0):
            raise Unsupported(f"{ins.render().strip()} divides by zero on some thread")
        if w == 64 and not signed:
            q = a // b
        else:  # PTX truncates toward zero; exact in int64 below 64 bits
            a64, b64 = a.astype(np.int64), b.astype(np.int64)
            q = np.sign(a64) * np.sign(b64) * (np.abs(a64) // np.abs(b64))
            q = q if op == "div" else a64 - q * b64
            return _store(q.astype(a.dtype), w)
        return _store(q if op == "div" else a - q * b, w)
    result = {"add": np.add, "sub": np.subtract, "and": np.bitwise_and,
              "or": np.bitwise_or, "xor": np.bitwise_xor, "min": np.minimum,
              "max": np.maximum}[op](a, b)
    return _store(result, w)


def _extract(ins: Instruction, args, w: int, signed: bool) -> np.ndarray:
    """``bfe``: ``len`` bits from ``pos``, sign-extended from the field's top bit for a
    signed type; only immediate positions and lengths inside the value (what compilers
    emit for index bits), whose meaning no corner of the ISA's rule touches."""
    pos, length = args[1], args[2]
    if not (isinstance(pos, int) and isinstance(length, int) and 0 < length
            and 0 <= pos and pos + length <= w):
        raise Unsupported(f"{ins.render().strip()}: a field outside the value or not immediate")
    field = (_as(args[0], w, False) >> _UNSIGNED[w](pos)) & _UNSIGNED[w]((1 << length) - 1)
    field = field.astype(np.int64) if w < 64 else field
    if signed:
        top = 1 << (length - 1)
        field = (field ^ top) - top  # sign-extends from bit length-1
    return _store(np.asarray(field).astype(_SIGNED[w] if signed else _UNSIGNED[w]), w)


def _compare(cmp: str, a, b) -> np.ndarray:
    table = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
             "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
             "hi": np.greater, "hs": np.greater_equal}
    if cmp not in table:
        raise Unsupported(f"comparison {cmp} is not modelled")
    return table[cmp](a, b)


def _multiply(op: str, mods, args, w: int, signed: bool) -> np.ndarray:
    kind = mods[0]
    if kind not in ("lo", "hi", "wide"):
        raise Unsupported(f"{op}.{kind} is not modelled")
    if kind != "lo" and w > 32:
        raise Unsupported(f"{op}.{kind} of 64-bit values is not modelled")
    a, b = _as(args[0], w, signed), _as(args[1], w, signed)
    if kind == "lo":
        product, out_w = a * b, w
    else:  # exact in 64 bits: both factors have 32 or fewer
        wide = (np.int64 if signed else np.uint64)
        exact = a.astype(wide) * b.astype(wide)
        product, out_w = (exact >> wide(w), w) if kind == "hi" else (exact, 2 * w)
        product = _as(_store(product.astype(wide), 64), out_w, signed)
    if op == "mul":
        return _store(product, out_w)
    c = _as(args[2], out_w, signed)
    return _store(product.astype(c.dtype) + c, out_w)


def _pointer_step(ins: Instruction, args, w: int, signed: bool) -> Pointer:
    """A pointer moved by an integer: ``add``/``sub`` of one, ``mad.wide`` (a * b + ptr)."""
    op = ins.op
    if op == "add" and len(args) == 2:
        p, n = (args[0], args[1]) if isinstance(args[0], Pointer) else (args[1], args[0])
        return Pointer(p.param, p.offset + _as(n, 64, True))
    if op == "sub" and isinstance(args[0], Pointer) and not isinstance(args[1], Pointer):
        return Pointer(args[0].param, args[0].offset - _as(args[1], 64, True))
    if op == "mad" and ins.mods[0] == "wide" and w <= 32 and isinstance(args[2], Pointer) \
            and not any(isinstance(a, Pointer) for a in args[:2]):
        wide = np.int64 if signed else np.uint64
        product = _as(args[0], w, signed).astype(wide) * _as(args[1], w, signed).astype(wide)
        return Pointer(args[2].param, args[2].offset + product.astype(np.int64))
    raise Unsupported(f"{ins.render().strip()}: a pointer moved by something other than an "
                      "added integer")
