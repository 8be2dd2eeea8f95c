"""Result-reuse cheats: a variant that remembers something across launches and, when it
is launched again on the same input, skips the work and leaves its last output there.
The timer repeats launches on the same buffers, so such a variant looks fast while every
output it is checked on may be right. Each maker (PTX text -> PTX text, a ``CheatError``
when the text it edits is gone) hides its memo in one of four channels, each closed by
its own defence:

* module state (``memo_pointer``, ``memo_values``, ``memo_count``): a ``.global`` the
  variant writes and the baseline lacks. The static check (``harness.hidden_state``)
  rejects it; measured without that check, the gate's checks (five seeds on one set of
  buffers) see the launch that a pointer memo or a counter skips; a memo keyed on input
  values passes them and reads fast (launches within a batch repeat one input): STATIC.
* memory past a buffer (``state_past_end``): the key 8 MiB past the output's start,
  mapped because buffers lie in one arena; the arena guard sees a write outside every
  buffer.
* the output's own contents (``skip_if_written``, ``output_marker``): stateless, keyed on
  what the outputs already hold (not poison; or a key in the low mantissa bits, within
  tolerance). The pre-filled check launch (outputs pre-filled with the variant's own
  results on other inputs) shows it where the marker matches other inputs' outputs
  (per element, on gelu); a marker keyed on one input value (gemm) passes it with odds
  15/16, and is made to do the work instead (WORKS): clock64 timing restores the outputs
  before every timed launch, so no timed launch finds its marker.
* the unused tail of an ``inout`` buffer longer than ``n`` (``tail_state``, specs from
  ``with_tail``): the whole-buffer comparison sees the tail differ from the baseline's.
  (An ``out`` buffer's tail cannot hold state: the baseline leaves it unwritten, and a
  baseline that leaves poison is itself rejected, "baseline failed", measured.)

Module-state and past-end memos use one slot per block (block index & 4095), read by
every thread before a ``bar.sync`` and written after it: with one slot for the grid, a
block that stored this launch's key would make blocks starting later in the same launch
skip, and the variant would fail as a partial grid, not as a memo. The legit edits (an
initialized read-only ``.global`` table; an output read that decides nothing) must pass.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable

from harness import record
from cheats import CheatError, _after, _after_guard, _before, _find, _regs, _relu, _sub
from harness.kernels.spec import BufferParam, KernelSpec

__all__ = ["STATIC", "WORKS", "REUSE_CHEATS", "REUSE_LEGIT", "ReuseCheat", "SLOTS", "TAIL", "CheatError",
           "with_tail"]

STATIC = "static"  # only the static check rejects it: measured directly it reads fast
WORKS = "works"  # passes the gate, but the timer makes it do the work: it reads no faster
SLOTS = 4096  # per-block memo slots: relu's and gelu's grids have 4096 blocks
PAST_END = 8388608  # 8 MiB: past the end of relu's 4 MiB y and gemm's 64-byte C
TAIL = 2 * SLOTS + 2  # f32 words tail_state needs after n: one u64 per block, 8-aligned


@dataclass(frozen=True)
class ReuseCheat:
    """One variant: suite kernel, maker, whether the static check must reject it, what the
    GPU gate must say measuring it directly (a record reason, STATIC or WORKS), a detail
    substring, and how many elements ``with_tail`` adds to its outputs (0: none)."""

    name: str
    kernel: str
    make: Callable[[str], str]
    hidden_state: bool
    expect: str
    detail: str = ""
    tail: int = 0

    def spec(self) -> KernelSpec:
        """The spec it is measured on: the suite's, lengthened by ``tail``."""
        from harness.kernels.suite import find_kernel

        spec = find_kernel(self.kernel)
        return with_tail(spec, self.tail) if self.tail else spec


def with_tail(spec: KernelSpec, extra: int = 1024) -> KernelSpec:
    """``spec`` with every out/inout buffer ``extra`` elements longer and its scalars (n)
    unchanged: the kernel leaves the tail alone, and the gate compares all of it."""
    params = tuple(dataclasses.replace(p, count=p.count + extra)
                   if isinstance(p, BufferParam) and p.is_output else p for p in spec.params)
    return dataclasses.replace(spec, params=params)


# ---------------------------------------------------------------------- editing helpers

_MORE = "\t.reg .b64 \t%mrd<4>;\n"  # beside cheats' scratch registers


def _decl(ptx: str) -> str:
    """Scratch registers: cheats' (%chp, %chr, %chd, %chf) and %mrd0..3."""
    return _sub(_regs(ptx), r"(\.entry[^{]*\{\n)", lambda m: m.group(1) + _MORE)


def _module(ptx: str, decl: str) -> str:
    """A module-scope declaration before the entry."""
    return _before(ptx, r"\.visible \.entry", decl + "\n\n")


def _ptrs(ptx: str) -> list[str]:
    """Registers holding the u64 (pointer) params, in param order: the first is the
    first input's, the last the output's (relu, gelu, saxpy, gemm_tile)."""
    regs = re.findall(r"ld\.param\.u64\s+(%rd\d+), \[\w+_param_\d+\];", ptx)
    if len(regs) < 2:
        raise CheatError(f"expected two or more pointer params, found {len(regs)}")
    return regs


def _at_top(ptx: str, text: str) -> str:
    """``text`` after the entry's last ``ld.param`` (every param in a register)."""
    last = list(re.finditer(r"^[^\n]*ld\.param\.[^\n]*\n", ptx, flags=re.MULTILINE))
    if not last:
        raise CheatError("no ld.param in the entry")
    return ptx[:last[-1].end()] + text + ptx[last[-1].end():]


def _exit(ptx: str) -> tuple[str, str]:
    """(ptx, label of the final ``ret``): the label already there (relu's bounds-check
    target, which every path reaches), else one added (gemm_tile's straight line)."""
    ret = list(re.finditer(r"^[ \t]*ret;\n", ptx, flags=re.MULTILINE))
    if not ret:
        raise CheatError("no ret in the entry")
    start = ret[-1].start()
    label = re.search(r"(\$L__\w+):\s*\n$", ptx[:start])
    if label:
        return ptx, label.group(1)
    return ptx[:start] + "$L__cheat_exit:\n" + ptx[start:], "$L__cheat_exit"


def _memo(ptx: str, base: str, width: int, key: str, kind: str, old: str, setup: str = "") -> str:
    """At entry: ``setup``, then this block's slot (%mrd1 = %mrd0 + block * width, %mrd0
    set by ``base``) is loaded; all threads read it before any writes it (bar.sync). Equal
    to ``key``: branch to the exit, writing nothing; else store ``key`` and compute."""
    ptx, exit_ = _exit(_decl(ptx))
    return _at_top(ptx, setup + base + f"\tmov.u32 \t%chr3, %ctaid.x;\n\tand.b32 \t%chr3, %chr3, {SLOTS - 1};\n"
                   f"\tmul.wide.u32 \t%mrd1, %chr3, {width};\n\tadd.s64 \t%mrd1, %mrd0, %mrd1;\n"
                   f"\tld.volatile.global.{kind} \t{old}, [%mrd1];\n\tsetp.eq.{kind} \t%chp0, {old}, {key};\n"
                   f"\tbar.sync \t0;\n\t@!%chp0 st.global.{kind} \t[%mrd1], {key};\n\t@%chp0 bra \t{exit_};\n")


def _tile(ptx: str) -> dict[str, str]:
    """gemm_tile's registers: A[0]'s value, C's global address and C[0]'s value."""
    a0 = _find(ptx, r"ld\.global\.f32\s+(%f\d+), \[%rd\d+\];").group(1)
    store = _find(ptx, r"st\.global\.f32\s+\[(%rd\d+)\], (%f\d+);")
    return {"a0": a0, "c": store.group(1), "c0": store.group(2)}


def _after_c(ptx: str, text: str) -> str:
    """``text`` once C's address is known (after its cvta, before B is loaded and any
    fma): a branch there skips the whole tile's work, not just its stores."""
    c = re.escape(_tile(ptx)["c"])
    return _after(ptx, rf"cvta\.to\.global\.u64\s+{c}, ", text)


def _y_address(ptx: str) -> str:
    """%chd0 = &y[i] in an elementwise kernel (y's address is computed only later)."""
    return (f"\tcvta.to.global.u64 \t%chd0, {_ptrs(ptx)[-1]};\n\tmul.wide.u32 \t%chd1, {_relu(ptx)['i']}, 4;\n"
            "\tadd.s64 \t%chd0, %chd0, %chd1;\n")


_MARK = ("\tmov.b32 \t%chr1, {v};\n\tand.b32 \t%chr1, %chr1, -16;\n"
         "\tor.b32 \t%chr1, %chr1, %chr0;\n\tmov.b32 \t{v}, %chr1;\n")  # low 4 bits := key
_HAS_MARK = ("\tmov.b32 \t%chr1, %chf0;\n\tand.b32 \t%chr1, %chr1, 15;\n\tsetp.eq.u32 \t%chp0, %chr1, %chr0;\n"
             "\ttestp.number.f32 \t%chp1, %chf0;\n\tand.pred \t%chp0, %chp0, %chp1;\n"
             "\t@%chp0 bra \tEXIT;\n")  # the output (%chf0) carries key %chr0 and is no NaN


# ---------------------------------------------------------------------- cheats


def memo_pointer(ptx: str) -> str:
    """Memo keyed on the first input's address: launched again on the same buffer, the
    block returns at once. Static check: writes ``evo_memo_ptr``; timed on changing
    inputs it never hits."""
    ptx = _module(ptx, f".global .align 8 .u64 evo_memo_ptr[{SLOTS}];")
    return _memo(ptx, "\tmov.u64 \t%mrd0, evo_memo_ptr;\n", 8, _ptrs(ptx)[0], "u64", "%mrd2")


def memo_values(ptx: str) -> str:
    """Memo keyed on the first input's element 0 (x[0], A[0]): the same value seen last
    launch, the block returns. Static check: writes ``evo_memo_x0``."""
    ptx = _module(ptx, f".global .align 4 .f32 evo_memo_x0[{SLOTS}];")
    setup = f"\tcvta.to.global.u64 \t%mrd3, {_ptrs(ptx)[0]};\n\tld.global.f32 \t%chf0, [%mrd3];\n"
    return _memo(ptx, "\tmov.u64 \t%mrd0, evo_memo_x0;\n", 4, "%chf0", "f32", "%chf1", setup)


def memo_count(ptx: str) -> str:
    """Launch parity: thread 0 of each block counts the block's launches (atom.add on
    ``evo_memo_launches``); every thread reads the count first and, odd, returns: every
    second launch writes nothing. The gate checks several launches: "output not written"."""
    ptx, exit_ = _exit(_decl(_module(ptx, f".global .align 4 .u32 evo_memo_launches[{SLOTS}];")))
    return _at_top(ptx, "\tmov.u64 \t%mrd0, evo_memo_launches;\n\tmov.u32 \t%chr3, %ctaid.x;\n"
                   f"\tand.b32 \t%chr3, %chr3, {SLOTS - 1};\n\tmul.wide.u32 \t%mrd1, %chr3, 4;\n"
                   "\tadd.s64 \t%mrd1, %mrd0, %mrd1;\n\tld.volatile.global.u32 \t%chr0, [%mrd1];\n"
                   "\tand.b32 \t%chr0, %chr0, 1;\n\tsetp.ne.u32 \t%chp0, %chr0, 0;\n\tbar.sync \t0;\n"
                   "\tmov.u32 \t%chr1, %tid.x;\n\tsetp.eq.u32 \t%chp1, %chr1, 0;\n"
                   "\t@%chp1 atom.global.add.u32 \t%chr2, [%mrd1], 1;\n"
                   f"\t@%chp0 bra \t{exit_};\n")


def state_past_end(ptx: str) -> str:
    """No module state: the key (the first input's address) kept 8 MiB past the output's
    start, far past its end but mapped (the buffers' arena). The arena guard sees a write
    outside every buffer: "out-of-bounds write"."""
    out = _ptrs(ptx)[-1]
    base = f"\tcvta.to.global.u64 \t%mrd0, {out};\n\tadd.s64 \t%mrd0, %mrd0, {PAST_END};\n"
    return _memo(ptx, base, 8, _ptrs(ptx)[0], "u64", "%mrd2")


def tail_state(ptx: str) -> str:
    """The key (x's address) kept in the output's unused tail, at y[n] (rounded up to 8
    bytes) + 8 * block, on a spec whose y is longer than n (``with_tail``): the gate
    compares the whole buffer, tail too: "wrong result" in y."""
    n = _find(ptx, r"setp\.ge\.u32\s+%p\d+, %r\d+, (%r\d+);").group(1)
    base = (f"\tcvta.to.global.u64 \t%mrd0, {_ptrs(ptx)[-1]};\n\tmul.wide.u32 \t%mrd2, {n}, 4;\n"
            "\tadd.s64 \t%mrd2, %mrd2, 7;\n\tand.b64 \t%mrd2, %mrd2, -8;\n\tadd.s64 \t%mrd0, %mrd0, %mrd2;\n")
    return _memo(ptx, base, 8, _ptrs(ptx)[0], "u64", "%mrd2")


def skip_if_written(ptx: str) -> str:
    """Stateless: each thread reads its y[i] first and, if it is not a NaN (the poison),
    returns: a launch after a launch finds real values. The pre-filled check launch (the
    variant's own results on other inputs) shows it: "wrong result"."""
    text = _y_address(ptx) + ("\tld.global.f32 \t%chf0, [%chd0];\n\ttestp.number.f32 \t%chp0, %chf0;\n"
                              "\t@%chp0 bra \tEXIT;\n")
    return _after_guard(ptx, text)


def skip_if_written_tile(ptx: str) -> str:
    """``skip_if_written`` on gemm_tile: C[0] not a NaN, the whole tile is skipped."""
    ptx, exit_ = _exit(_decl(ptx))
    c = _tile(ptx)["c"]
    return _after_c(ptx, f"\tld.global.f32 \t%chf0, [{c}];\n\ttestp.number.f32 \t%chp0, %chf0;\n"
                         f"\t@%chp0 bra \t{exit_};\n")


def output_marker(ptx: str) -> str:
    """A memo in gelu's rounding slack: key = the low 4 bits of x's bits; y[i] already
    carrying that key (and no NaN) returns, else y is stored with its low 4 bits replaced
    by the key (<= 15 ulp, ~1.8e-6 relative: within rtol 1e-5). Pre-filled check: "wrong
    result"."""
    r = _relu(ptx)
    ptx, exit_ = _exit(_decl(ptx))
    check = (f"\tmov.b32 \t%chr0, {r['x']};\n\tand.b32 \t%chr0, %chr0, 15;\n" + _y_address(ptx)
             + "\tld.global.f32 \t%chf0, [%chd0];\n" + _HAS_MARK.replace("EXIT", exit_))
    ptx = _after(ptx, r"ld\.global\.f32\s", check)
    return _before(ptx, r"st\.global\.f32\s", _MARK.format(v=r["y"]))


def output_marker_tile(ptx: str) -> str:
    """``output_marker`` on gemm_tile: key from A[0], marker in C[0], the whole tile
    skipped when it matches. The pre-filled check misses a one-value key with odds 15/16;
    the timer restores C before every timed launch, so the tile is computed each time
    (WORKS)."""
    t = _tile(ptx)
    ptx, exit_ = _exit(_decl(ptx))
    check = (f"\tmov.b32 \t%chr0, {t['a0']};\n\tand.b32 \t%chr0, %chr0, 15;\n"
             f"\tld.global.f32 \t%chf0, [{t['c']}];\n" + _HAS_MARK.replace("EXIT", exit_))
    ptx = _after_c(ptx, check)
    return _before(ptx, rf"st\.global\.f32\s+\[{re.escape(t['c'])}\], ", _MARK.format(v=t["c0"]))


# ---------------------------------------------------------------------- legit edits


def const_table(ptx: str) -> str:
    """An initialized read-only ``.global`` (1.0f) that scales A[0]: module memory the
    kernel reads and never writes, so no state carries from launch to launch."""
    ptx = _module(_regs(ptx), ".global .align 4 .b8 evo_scale[4] = {0, 0, 128, 63};")
    a0 = _tile(ptx)["a0"]
    return _after(ptx, rf"ld\.global\.f32\s+{re.escape(a0)}, ",
                  f"\tld.global.f32 \t%chf0, [evo_scale];\n\tmul.rn.f32 \t{a0}, {a0}, %chf0;\n")


def read_output_first(ptx: str) -> str:
    """Each thread reads its y[i] into an unused register before computing: a read of an
    output that decides nothing (no branch, no select) is legal."""
    return _after_guard(ptx, _y_address(ptx) + "\tld.global.f32 \t%chf0, [%chd0];\n")


_G, _W = "gemm_tile_4x4x4", record.WRONG
REUSE_CHEATS: list[ReuseCheat] = [
    ReuseCheat("memo pointer (gemm)", _G, memo_pointer, True, record.UNWRITTEN),
    ReuseCheat("memo pointer (relu)", "relu", memo_pointer, True, record.UNWRITTEN),
    ReuseCheat("memo values (gemm)", _G, memo_values, True, STATIC),
    ReuseCheat("memo values (relu)", "relu", memo_values, True, STATIC),
    ReuseCheat("memo count (gemm)", _G, memo_count, True, record.UNWRITTEN),
    ReuseCheat("memo count (relu)", "relu", memo_count, True, record.UNWRITTEN),
    ReuseCheat("state past end (gemm)", _G, state_past_end, False, record.OUT_OF_BOUNDS, "outside"),
    ReuseCheat("state past end (relu)", "relu", state_past_end, False, record.OUT_OF_BOUNDS, "outside"),
    ReuseCheat("skip if written (gemm)", _G, skip_if_written_tile, False, _W, "pre-filled"),
    ReuseCheat("skip if written (relu)", "relu", skip_if_written, False, _W, "pre-filled"),
    ReuseCheat("output marker (gemm)", _G, output_marker_tile, False, WORKS),
    ReuseCheat("output marker (gelu)", "gelu", output_marker, False, _W, "pre-filled"),
    ReuseCheat("tail state (saxpy)", "saxpy", tail_state, False, _W, "differ in y", tail=TAIL),
]

REUSE_LEGIT: list[ReuseCheat] = [
    ReuseCheat("constant table", _G, const_table, False, record.OK),
    ReuseCheat("output read first", "relu", read_output_first, False, record.OK),
]
