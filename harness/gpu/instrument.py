"""clock64 instrumentation (the Chronos method): time a single-block kernel from inside.

``instrument(ptx, entry)`` returns PTX in which ``entry`` takes one extra, last parameter
``.param .u64 __evo_clock`` (a pointer to ``clock_words(spec)`` u64 words, filled with
``CLOCK_POISON`` by the caller). Every thread reads ``%clock64`` once at entry, before the
kernel's first instruction, and again at every ``ret`` / ``exit`` of the entry; it then
stores the two values to words ``2*t`` and ``2*t + 1`` where
``t = tid.x + ntid.x * (tid.y + ntid.y * tid.z)`` is its linear index in the block.

Design choices:

* One private pair of words per thread, plain stores, no atomics and no shared address:
  threads never serialize on the timer (DESIGN.md, "Timing").
* Everything after the end read (the param load, the thread index, the stores) is outside
  the timed region, so it is computed there even for one-thread kernels: it costs nothing
  that is measured, and one code path serves every block shape.
* A predicated ``@%p ret;`` becomes ``@!%p bra $L__evo_skip_N; <epilogue> ret;
  $L__evo_skip_N:`` -- the epilogue sits inline, behind a branch on the negated guard, so
  it runs exactly for the threads that return there and its own instructions need no guard.
* New registers are ``%evoclk<4>`` (b64: start, end, address, offset) and ``%evotid<6>``
  (b32: thread index); labels are ``$L__evo_skip_N``. ``instrument`` refuses PTX that
  already uses the ``evoclk`` / ``evotid`` / ``__evo_`` names, so they cannot clash (and a
  kernel cannot be instrumented twice).
* Only the entry's own ``ret`` / ``exit`` are instrumented: a ``ret`` in a ``.func`` returns
  to the caller, and an ``exit`` inside a ``.func`` leaves its thread's words poisoned, which
  ``cycles_from_clock`` reports as an error rather than a wrong number.
* A body that can fall off its end (no final unconditional ``ret``/``exit``/``bra``) gets an
  epilogue appended there too.

``%clock64`` reads are volatile to ptxas; tests/test_instrument.py checks in the SASS that
the reads stay before the first load and after the last store of the kernel.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from genomes.errors import EvoError
from genomes.ptx import Directive, Function, Instruction, Label, Line, Module, Param, parse

CLOCK_PARAM = "__evo_clock"
"""Name of the u64 pointer param appended to an instrumented entry."""

CLOCK_ENTRY_SUFFIX = "__evo_clock"
"""``with_clock_twin`` names the instrumented copy of entry ``k`` ``k__evo_clock``."""

CLOCK_POISON = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
"""What the clock buffer holds before the launch; a word still equal to it was not written."""

_START, _END, _ADDR, _OFFSET = "%evoclk0", "%evoclk1", "%evoclk2", "%evoclk3"
_DECLS = (".reg .b64 \t%evoclk<4>;", ".reg .b32 \t%evotid<6>;")
_RESERVED = re.compile(r"%evoclk|%evotid|__evo_")
_TERMINATORS = ("ret", "exit")


class InstrumentError(EvoError):
    """PTX that cannot be instrumented: no such entry, or evo's reserved names already used."""


def _line(stmt, before: str = "\t") -> Line:
    return Line(stmt, before, "\n")


def _ins(opcode: str, *operands: str, pred: str | None = None) -> Instruction:
    return Instruction(opcode, tuple(operands), pred)


def _epilogue() -> list[Instruction]:
    """End read, then (untimed) the thread's word address and the two stores."""
    t = [f"%evotid{i}" for i in range(6)]
    return [
        _ins("mov.u64", _END, "%clock64"),
        _ins("ld.param.u64", _ADDR, f"[{CLOCK_PARAM}]"),
        _ins("cvta.to.global.u64", _ADDR, _ADDR),
        _ins("mov.u32", t[0], "%tid.x"),
        _ins("mov.u32", t[1], "%tid.y"),
        _ins("mov.u32", t[2], "%tid.z"),
        _ins("mov.u32", t[3], "%ntid.x"),
        _ins("mov.u32", t[4], "%ntid.y"),
        _ins("mad.lo.u32", t[5], t[2], t[4], t[1]),  # tid.y + ntid.y * tid.z
        _ins("mad.lo.u32", t[5], t[5], t[3], t[0]),  # tid.x + ntid.x * (...)
        _ins("mul.wide.u32", _OFFSET, t[5], "16"),  # two u64 words per thread
        _ins("add.s64", _ADDR, _ADDR, _OFFSET),
        _ins("st.global.u64", f"[{_ADDR}]", _START),
        _ins("st.global.u64", f"[{_ADDR}+8]", _END),
    ]


def _blank_comments(text: str) -> str:
    """``text`` with comments replaced by spaces, so that indices still line up."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def _add_param(signature: str, has_params: bool) -> str:
    """The entry header with ``.param .u64 __evo_clock`` appended as the last param."""
    code = _blank_comments(signature)
    new = f"\t.param .u64 {CLOCK_PARAM}"
    if has_params:
        # After the last declaration's own text, so a trailing comment is never extended.
        last = list(re.finditer(r"\.param\b[^,)]*?(?=\s*\))", code))
        if not last:
            raise InstrumentError("cannot find the end of the entry's parameter list")
        at = last[-1].end()
        indent = re.match(r"[ \t]*", code[code.rfind("\n", 0, last[-1].start()) + 1:]).group(0)
        return signature[:at] + f",\n{indent or chr(9)}.param .u64 {CLOCK_PARAM}" + signature[at:]
    close = code.rfind(")")
    if close < 0:  # ".entry k" with no parameter list at all
        return signature + f"(\n{new}\n)"
    return signature[:close] + f"\n{new}\n" + signature[close:]


def _falls_through(body: list[Line]) -> bool:
    """True if control can run off the end of the body: the last instruction is not an
    unconditional jump/return, or a label after it is a branch target. (Triton ends a
    body with debug labels such as ``$L__func_end0:`` that nothing jumps to.)"""
    targets = {op for ln in body if isinstance(ln.stmt, Instruction) and ln.stmt.op in ("bra", "brx")
               for op in ln.stmt.operands}
    for ln in reversed(body):
        if isinstance(ln.stmt, Label) and ln.stmt.name in targets:
            return True
        if isinstance(ln.stmt, Instruction):
            last = ln.stmt
            return last.pred is not None or last.op not in (*_TERMINATORS, "bra", "trap", "brx")
    return True


def _negate(pred: str) -> str:
    return "@" + pred[2:] if pred.startswith("@!") else "@!" + pred[1:]


def instrument(ptx_text: str, entry: str) -> str:
    """PTX where ``entry`` records each thread's ``%clock64`` at entry and at every return.

    The entry gains a last parameter ``__evo_clock`` (u64 pointer); thread ``t`` stores its
    start and end reads to words ``2*t`` and ``2*t+1``. Other functions are unchanged.
    Raises InstrumentError if there is no such entry or the PTX already uses evo's names.
    """
    module, fn = _module_and_entry(ptx_text, entry)
    _instrument_entry(fn)
    return module.render()


def _module_and_entry(ptx_text: str, entry: str) -> tuple[Module, Function]:
    """The parsed PTX and its ``entry``; InstrumentError if evo's names are taken or there
    is no such entry."""
    clash = _RESERVED.search(ptx_text)
    if clash:
        raise InstrumentError(f"PTX already uses the name {clash.group(0)!r} reserved for "
                              "clock64 instrumentation (instrumented twice?)")
    module = parse(ptx_text)
    try:
        return module, module.entry(entry)
    except KeyError:
        names = ", ".join(f.name for f in module.entries) or "none"
        raise InstrumentError(f"no entry {entry!r} in the PTX (entries: {names})") from None


def _instrument_entry(fn: Function) -> None:
    """Instrument ``fn`` in place: new body, signature and params (the old lists are
    not mutated, so a shallow copy of a Function can be instrumented alone)."""
    body: list[Line] = []
    skips = 0
    for line in fn.body:
        stmt = line.stmt
        if not (isinstance(stmt, Instruction) and stmt.op in _TERMINATORS):
            body.append(line)
            continue
        epilogue = [_line(i) for i in _epilogue()]
        if stmt.pred is None:
            body += [Line(epilogue[0].stmt, line.before, "\n"), *epilogue[1:], Line(stmt, "\t", line.after)]
        else:
            skip = f"$L__evo_skip_{skips}"
            skips += 1
            body += [Line(_ins("bra", skip, pred=_negate(stmt.pred)), line.before, "\n"), *epilogue,
                     _line(stmt.with_(pred=None)), Line(Label(skip), "", line.after)]
    if _falls_through(body):
        tail = len(body)
        while tail and not isinstance(body[tail - 1].stmt, (Instruction, Label, Directive)):
            tail -= 1  # keep closing whitespace / comments last
        body[tail:tail] = [_line(i) for i in _epilogue()]

    # Declarations and the start read go after the leading directives (.reg, .shared, ...),
    # right before the first instruction or label, so nothing of the kernel runs before it.
    first = next((i for i, ln in enumerate(body) if not isinstance(ln.stmt, Directive)), len(body))
    gap = body[first].before if first < len(body) else "\n\t"
    if first < len(body):  # the blank line stays above the start read, the indent with the code
        head, _, indent = gap.rpartition("\n")
        gap = head + "\n\t" if "\n" in gap else gap
        body[first] = Line(body[first].stmt, indent, body[first].after)
    body[first:first] = [_line(Directive(d), "\t" if first else "\n\t") for d in _DECLS] + [
        _line(_ins("mov.u64", _START, "%clock64"), gap)]

    fn.body = body
    fn.signature = _add_param(fn.signature, bool(fn.params))
    fn.params = [*fn.params, Param(CLOCK_PARAM, ".u64", True)]


def clock_entry_name(entry: str) -> str:
    return entry + CLOCK_ENTRY_SUFFIX


def with_clock_twin(ptx_text: str, entry: str) -> str:
    """PTX holding ``entry`` unchanged and, right after it, its instrumented twin
    ``clock_entry_name(entry)`` (``instrument``'s version of it, renamed).

    One ptxas run then assembles both, instead of two runs (~10 ms of process start-up
    each). ptxas compiles every entry on its own, so the variant's machine code is the
    same as when assembled alone (checked for the suite, tests/test_instrument.py): its
    store key (``cubin_text_hash(cubin, [entry])``) does not change. Labels and
    registers are scoped to their function, so the copy needs no other renaming.
    """
    module, fn = _module_and_entry(ptx_text, entry)  # one parse serves both entries
    twin = dataclasses.replace(fn)
    _instrument_entry(twin)
    renamed = clock_entry_name(entry)
    signature, count = re.subn(rf"(?<![\w$]){re.escape(entry)}(?=\s*\()", renamed,
                               twin.signature, count=1)
    if count != 1:
        raise InstrumentError(f"cannot find the name of entry {entry!r} in its signature")
    twin.name, twin.signature = renamed, signature
    at = next(i for i, part in enumerate(module.parts) if part is fn) + 1
    module.parts[at:at] = ["\n\n", twin]
    return module.render()


def clock_words(spec) -> int:
    """Length in u64 words of the clock buffer for ``spec``: start and end per thread."""
    return 2 * spec.threads_per_block


def clock_buffer(spec) -> np.ndarray:
    """A host clock buffer for ``spec`` filled with ``CLOCK_POISON``, ready to upload."""
    return np.full(clock_words(spec), CLOCK_POISON, dtype=np.uint64)


def cycles_from_clock(words) -> int:
    """Cycles of one launch: max(end) - min(start) over the block's threads.

    All threads of one block run on one SM and read one counter, so the span from the
    first start to the last end is the block's time. Raises ValueError if any thread left
    its words at ``CLOCK_POISON`` (it never reached an instrumented return) or the counter
    ran backwards.
    """
    words = np.asarray(words).astype(np.uint64, copy=False).ravel()
    if words.size == 0 or words.size % 2:
        raise ValueError(f"clock buffer must hold 2 words per thread, got {words.size} words")
    pairs = words.reshape(-1, 2)
    unwritten = np.flatnonzero((pairs == CLOCK_POISON).any(axis=1))
    if unwritten.size:
        raise ValueError(f"{unwritten.size} of {len(pairs)} threads did not write their clock "
                         f"words (first thread {unwritten[0]})")
    start, end = pairs[:, 0], pairs[:, 1]
    if (end < start).any():
        bad = int(np.flatnonzero(end < start)[0])
        raise ValueError(f"thread {bad}'s end clock {end[bad]} is before its start {start[bad]}")
    return int(end.max()) - int(start.min())


__all__ = ["CLOCK_PARAM", "CLOCK_POISON", "InstrumentError", "clock_buffer", "clock_words",
           "cycles_from_clock", "instrument"]
