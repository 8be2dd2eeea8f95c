"""Cheats: PTX variants of suite kernels that the correctness gate must reject, each with
the reason it must give, and legit edits that it must still accept.

Each maker is a small function from a suite kernel's PTX text to the edited PTX (a
``CheatError`` if the text it edits is gone, so that a regenerated suite fails loudly).
The exploit classes are those of KernelBench's adversarial tests (result reuse, input
mutation), of pygpubench and of benchmark reward hacking generally (stale outputs, partial
work, benchmark detection, tolerance abuse), ported to what a PTX edit or a launch gene can
do, plus PTX-specific ones (``.nc`` on a written buffer, removed ``bar.sync``, rounding
modes, out-of-bounds reads, shared-memory races). Not portable to PTX, hence absent: work
on another CUDA stream, patched timers or Python objects, and overwriting the harness's
expected outputs (they are host arrays the kernel cannot reach).

``stage`` says who must catch a cheat: ``"gate"`` (``GpuWorker.measure`` returns invalid
with ``reason``), or ``"finalist"`` (the gate cannot see it; ``harness.gpu.finalist``'s
sanitizer or static check must). A racy cheat may escape the gate when the race does not
fire: then ``fallback`` names what the finalist check must say instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from genomes.launch import Launch
from harness import record
from harness.gpu.finalist import MEMCHECK, RACECHECK, UNSAFE_NC

GATE, FINALIST = "gate", "finalist"


class CheatError(ValueError):
    """The suite PTX no longer holds the text a maker edits."""


@dataclass(frozen=True)
class Cheat:
    """One variant: suite kernel, maker, the reason prefix (and a detail substring) the
    check must give, the exploit class, and the variant's launch where it changes."""

    name: str
    kernel: str
    make: Callable[[str], str]
    reason: str
    detail: str = ""
    exploit: str = ""
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    stage: str = GATE
    fallback: str = ""

    def launch(self, spec) -> Launch | None:
        """The variant's launch (None: the spec's own)."""
        if self.grid is None and self.block is None:
            return None
        return Launch.of(self.grid or spec.grid, self.block or spec.block, spec.entry)


# ---------------------------------------------------------------------- editing helpers

_REGS = ("\t.reg .pred \t%chp<4>;\n\t.reg .b32 \t%chr<4>;\n\t.reg .b64 \t%chd<2>;\n"
         "\t.reg .f32 \t%chf<2>;\n\t.reg .b16 \t%chh<2>;\n")


def _sub(ptx: str, pattern: str, repl, count: int = 1) -> str:
    """``re.subn`` that must match exactly ``count`` times (0: at least once)."""
    new, n = re.subn(pattern, repl, ptx, flags=re.MULTILINE)
    if n == 0 or (count and n != count):
        raise CheatError(f"expected {count or 'some'} match(es) of {pattern!r}, found {n}")
    return new


def _find(ptx: str, pattern: str) -> re.Match:
    m = re.search(pattern, ptx, flags=re.MULTILINE)
    if m is None:
        raise CheatError(f"no match of {pattern!r}")
    return m


def _after(ptx: str, pattern: str, text: str, count: int = 1) -> str:
    """Insert ``text`` (lines) after each line matching ``pattern``."""
    return _sub(ptx, rf"^[^\n]*{pattern}[^\n]*\n", lambda m: m.group(0) + text, count)


def _before(ptx: str, pattern: str, text: str, count: int = 1) -> str:
    """Insert ``text`` (lines) before each line matching ``pattern``."""
    return _sub(ptx, rf"^[^\n]*{pattern}[^\n]*\n", lambda m: text + m.group(0), count)


def _regs(ptx: str) -> str:
    """Declare the cheat's scratch registers (%chp, %chr, %chd, %chf, %chh) in the entry."""
    return _sub(ptx, r"(\.entry[^{]*\{\n)", lambda m: m.group(1) + _REGS)


def _first_param(ptx: str, text: str) -> str:
    """``text`` at the top of the entry body (scratch registers declared)."""
    ptx = _regs(ptx)
    m = _find(ptx, r"^[^\n]*ld\.param\.")
    return ptx[:m.start()] + text + ptx[m.start():]


def _guard_exit(ptx: str) -> tuple[int, str]:
    """(end of the bounds-check branch line, its target label): code inserted there runs
    only in threads that own an element."""
    m = _find(ptx, r"^\s*@%p\d+ bra\s+(\$L__\w+);\n")
    return m.end(), m.group(1)


def _after_guard(ptx: str, text: str) -> str:
    """``text`` after the bounds check, its ``EXIT`` the check's label (registers declared)."""
    ptx = _regs(ptx)
    end, label = _guard_exit(ptx)
    return ptx[:end] + text.replace("EXIT", label) + ptx[end:]


def _relu(ptx: str) -> dict[str, str]:
    """An elementwise kernel's (relu, gelu) registers: index, x address, x, result, y address."""
    load = _find(ptx, r"ld\.global\.f32\s+(%f\d+), \[(%rd\d+)\];")
    store = _find(ptx, r"st\.global\.f32\s+\[(%rd\d+)\], (%f\d+);")
    index = _find(ptx, r"setp\.ge\.u32\s+%p\d+, (%r\d+), %r\d+;")
    return {"i": index.group(1), "xa": load.group(2), "x": load.group(1),
            "ya": store.group(1), "y": store.group(2)}


def _selp_after_max(ptx: str, cond: str) -> str:
    """relu whose result is x itself (not max(x, 0)) wherever ``cond`` sets %chp0."""
    r = _relu(ptx)
    return _after(_regs(ptx), r"max\.f32\s", cond + f"\tselp.f32 \t{r['y']}, {r['x']}, {r['y']}, %chp0;\n")


def _drop_stores(ptx: str) -> str:
    return _sub(ptx, r"^\s*st\.global\.[\w.]+\s+\[[^\]]+\], [^;]+;\n", "", 0)


# ---------------------------------------------------------------------- cheats


def stale_output(ptx: str) -> str:
    """Stale output reuse: the kernel writes nothing, hoping the output buffer still holds
    the previous launch's (the baseline's) values. The gate poisons outputs before each
    launch: "output not written", every element."""
    return _drop_stores(ptx)


def stale_inout(ptx: str) -> str:
    """Stale output on an inout buffer (saxpy's y): nothing is written, so y keeps its
    input values, which are not poison: "wrong result" (y != a*x + y)."""
    return _drop_stores(ptx)


def early_exit(ptx: str) -> str:
    """Silent launch failure: the kernel returns at once, no error raised: "output not
    written"."""
    return _first_param(ptx, "\tret;\n")


def trap_at_entry(ptx: str) -> str:
    """Aborting kernel: ``trap`` at entry; the launch fails: "launch error", and the
    worker, whose CUDA context is now unusable, is restarted."""
    return _first_param(ptx, "\ttrap;\n")


def half_grid(ptx: str) -> str:
    """Work on part of the grid: odd-numbered blocks return without writing: "output not
    written", half the elements."""
    return _after_guard(ptx, "\tmov.u32 \t%chr0, %ctaid.x;\n\tand.b32 \t%chr0, %chr0, 1;\n"
                             "\tsetp.ne.u32 \t%chp0, %chr0, 0;\n\t@%chp0 bra \tEXIT;\n")


def half_block(ptx: str) -> str:
    """Work on part of each block: threads 128..255 return without writing: "output not
    written", half the elements."""
    return _after_guard(ptx, "\tmov.u32 \t%chr0, %tid.x;\n\tsetp.ge.u32 \t%chp0, %chr0, 128;\n"
                             "\t@%chp0 bra \tEXIT;\n")


def skip_last_block(ptx: str) -> str:
    """Partial outputs: the last block (one row of layernorm) returns at once, an
    off-by-one in a row loop: "output not written", one row's elements."""
    return _first_param(ptx, "\tmov.u32 \t%chr0, %ctaid.x;\n\tmov.u32 \t%chr1, %nctaid.x;\n"
                             "\tadd.s32 \t%chr1, %chr1, -1;\n\tsetp.eq.u32 \t%chp0, %chr0, %chr1;\n"
                             "\t@%chp0 ret;\n")


def unchanged(ptx: str) -> str:
    """The PTX as it is: the cheat is in the launch (a launch gene covering too little)."""
    return ptx


def zero_inputs(ptx: str) -> str:
    """Input mutation (KernelBench's zero_out): x is zeroed after reading and the output
    is relu(0) = 0, so that a reference computed afterwards would agree: "input modified"."""
    r = _relu(ptx)
    ptx = _after(_regs(ptx), r"ld\.global\.f32\s", f"\tmov.f32 \t%chf0, 0f00000000;\n"
                                                   f"\tst.global.f32 \t[{r['xa']}], %chf0;\n")
    return _sub(ptx, r"max\.f32\s+(%f\d+), [^;]+;", r"mov.f32 \t\1, 0f00000000;")


def scratch_in_input(ptx: str) -> str:
    """Input used as scratch space: each block of reduce_sum also stores its partial sum
    over its own first input element: "input modified", one element per block."""
    x = _find(ptx, r"cvta\.to\.global\.u64\s+(%rd\d+), %rd\d+;").group(1)
    block = _find(ptx, r"mov\.u32\s+(%r\d+), %ctaid\.x;").group(1)
    value = _find(ptx, r"st\.global\.f32\s+\[%rd\d+\], (%f\d+);").group(1)
    return _before(_regs(ptx), r"st\.global\.f32\s", f"\tmul.wide.u32 \t%chd0, {block}, 2048;\n"
                   f"\tadd.s64 \t%chd0, {x}, %chd0;\n\tst.global.f32 \t[%chd0], {value};\n")


def off_by_one_guard(ptx: str) -> str:
    """An off-by-one bounds check (``i > n`` for ``i >= n``), launched with one block more
    (a launch gene): thread n stores y[n], into the canary: "out-of-bounds write" after y."""
    return _sub(ptx, r"setp\.ge\.u32(\s+%p\d+, %r\d+, %r\d+;)", r"setp.gt.u32\1")


def underflow_write(ptx: str) -> str:
    """A write before the buffer: thread 0 also stores y[-1]. Canaries sit only after
    buffers; the gate's guards in front of them (harness.gpu.buffers.guard_ranges) must see it:
    "out-of-bounds write" before y."""
    r = _relu(ptx)
    return _after(_regs(ptx), r"st\.global\.f32\s", f"\tsetp.eq.u32 \t%chp0, {r['i']}, 0;\n"
                  f"\t@%chp0 st.global.f32 \t[{r['ya']}+-4], {r['y']};\n")


def clock_dependent(ptx: str) -> str:
    """Non-determinism: the result depends on %clock (bit 4), returning x unclamped in
    about half the warps: "wrong result"."""
    return _selp_after_max(ptx, "\tmov.u32 \t%chr0, %clock;\n\tand.b32 \t%chr0, %chr0, 16;\n"
                                "\tsetp.ne.u32 \t%chp0, %chr0, 0;\n")


def smid_dependent(ptx: str) -> str:
    """Non-determinism: the result depends on which SM runs the block (odd %smid returns x
    unclamped): "wrong result"."""
    return _selp_after_max(ptx, "\tmov.u32 \t%chr0, %smid;\n\tand.b32 \t%chr0, %chr0, 1;\n"
                                "\tsetp.ne.u32 \t%chp0, %chr0, 0;\n")


def globaltimer_dependent(ptx: str) -> str:
    """Results depending on wall time: right only in the first ~1 us of every 65.5 us of
    %globaltimer (ns): "wrong result" unless all six checks land in that window."""
    return _selp_after_max(ptx, "\tmov.u64 \t%chd0, %globaltimer;\n\tand.b64 \t%chd0, %chd0, 65535;\n"
                                "\tsetp.ge.u64 \t%chp0, %chd0, 1024;\n")


def launch_counter(ptx: str) -> str:
    """Benchmark detection: a module ``.global`` counts launches; after 8 the kernel skips
    its work (the gate checks 5 launches, timing makes hundreds). Caught only because the
    runner checks once more after timing: "output not written" ..., "after timing"."""
    r = _relu(ptx)
    ptx = _before(ptx, r"\.visible \.entry", ".global .align 4 .u32 evo_cheat_launches;\n\n")
    ptx = _after(ptx, r"mad\.lo\.s32\s", f"\tsetp.eq.u32 \t%chp1, {r['i']}, 0;\n"
                 "\t@%chp1 red.global.add.u32 \t[evo_cheat_launches], 1;\n")
    return _after_guard(ptx, "\tld.volatile.global.u32 \t%chr0, [evo_cheat_launches];\n"
                             "\tsetp.gt.u32 \t%chp0, %chr0, 8;\n\t@%chp0 bra \tEXIT;\n")


def clamp_range(ptx: str) -> str:
    """Tolerance abuse: gelu's input clamped to [-16, 16], exact on normal(0, 2) fills (8
    sigma) and wrong for large x; only the stress inputs show it: "wrong result" (stress)."""
    x = _relu(ptx)["x"]
    return _after(_regs(ptx), r"ld\.global\.f32\s", f"\tmin.f32 \t{x}, {x}, 0f41800000;\n"
                                                   f"\tmax.f32 \t{x}, {x}, 0fC1800000;\n")


def unsafe_softmax(ptx: str) -> str:
    """Tolerance abuse: softmax without its max subtraction (one pass less of work in a
    fused kernel). Right within tolerance on normal(0, 2) rows; exp overflows to inf on
    large inputs, giving NaN: "wrong result" on the stress inputs."""
    m = _find(ptx, r"ld\.shared\.f32\s+(%f\d+), \[\w+\+128\];").group(1)
    return _sub(ptx, rf"sub\.f32\s+(%f\d+), (%f\d+), {re.escape(m)};", r"mov.f32 \t\1, \2;", 2)


def round_toward_zero(ptx: str) -> str:
    """Changed rounding mode: triton_add's ``add.f32`` (round to nearest) becomes
    ``add.rz.f32`` on a kernel with tolerance 0: "wrong result"."""
    return _sub(ptx, r"\badd\.f32\b", "add.rz.f32", 8)


def removed_barrier(ptx: str) -> str:
    """Removed ``bar.sync``: transpose reads its shared tile before the other warps have
    written it: "wrong result" (or, if the race does not fire, racecheck)."""
    return _sub(ptx, r"^\s*bar\.sync\s+0;\n", "")


def scan_in_place(ptx: str) -> str:
    """Shared-memory race: scan's double buffer made single (both pointers the same), so a
    step reads elements that other warps of the same step already overwrote: "wrong
    result" when the race fires, racecheck when it does not."""
    return _sub(ptx, r"add\.s32\s+(%r\d+), (%r\d+), %r\d+;(?=\s*\n\s*mov\.u32\s+%r\d+, 1;)",
                r"mov.u32 \t\1, \2;")


def f16_inputs(ptx: str) -> str:
    """Precision downgrade: reduce_sum rounds every input to f16 before adding (half the
    bytes if it were stored so): "wrong result" (errors ~1e-3, tolerance 1e-5)."""
    return _sub(_regs(ptx), r"^(\s*ld\.global\.f32\s+(%f\d+), \[[^\]]+\];\n)",
                lambda m: m.group(1) + f"\tcvt.rn.f16.f32 \t%chh0, {m.group(2)};\n"
                                       f"\tcvt.f32.f16 \t{m.group(2)}, %chh0;\n", 2)


def oob_read(ptx: str) -> str:
    """Out-of-bounds read of the neighbour: each thread also loads x[i + 64], and the last
    64 threads read past x's end. The result only changes if that word is 0x7F7FDEAD, which
    no fill makes, so the outputs are right: canaries see writes, not reads. Only
    compute-sanitizer's memcheck sees it (finalist check: "memcheck")."""
    r = _relu(ptx)
    ptx = _after(_regs(ptx), r"ld\.global\.f32\s", f"\tld.global.u32 \t%chr0, [{r['xa']}+256];\n"
                 "\tsetp.eq.u32 \t%chp0, %chr0, 2139086509;\n")
    return _after(ptx, r"max\.f32\s", f"\tselp.f32 \t{r['y']}, 0f00000000, {r['y']}, %chp0;\n")


def nc_on_written(ptx: str) -> str:
    """``.nc`` (read-only path) load of saxpy's y, which the kernel also writes: undefined
    by the PTX ISA, though each thread reads its element before writing it, so the
    outputs are right and the gate passes it. The finalist's static check: "unsafe .nc"."""
    y = _find(ptx, r"st\.global\.f32\s+\[(%rd\d+)\]").group(1)
    return _sub(ptx, rf"ld\.global\.f32(\s+%f\d+, \[{re.escape(y)}\];)", r"ld.global.nc.f32\1")


# ---------------------------------------------------------------------- legit edits


def atom_add(ptx: str) -> str:
    """saxpy as ``y += a*x`` with ``atom.global.add.f32`` whose result is unused (a mul
    and an atomic add instead of fma: within saxpy's tolerance)."""
    return _sub(ptx, r"^\s*ld\.global\.f32\s+(%f\d+), \[(%rd\d+)\];\n\s*fma\.rn\.f32\s+(%f\d+), "
                     r"(%f\d+), (%f\d+), \1;\n\s*st\.global\.f32\s+\[\2\], \3;\n",
                r"\tmul.rn.f32 \t\3, \4, \5;\n\tatom.global.add.f32 \t\1, [\2], \3;\n")


def atom_to_red(ptx: str) -> str:
    """``atom.global.add`` whose result is unused becomes ``red.global.add``."""
    return _sub(atom_add(ptx), r"atom(\.global\.add\.f32)\s+%f\d+, (\[[^\]]+\]), ([^;]+);",
                r"red\1 \t\2, \3;")


def swap_first_loads(ptx: str) -> str:
    """Two independent loads reordered."""
    m = _find(ptx, r"^(\s*ld\.global\.f32[^\n]*\n)(\s*ld\.global\.f32[^\n]*\n)")
    return ptx[:m.start()] + m.group(2) + m.group(1) + ptx[m.end():]


def explicit_rn(ptx: str) -> str:
    """``add.f32`` spelled ``add.rn.f32``: the same rounding, said explicitly."""
    return _sub(ptx, r"\badd\.f32\b", "add.rn.f32", 8)


def nc_on_readonly(ptx: str) -> str:
    """``.nc`` load of relu's x, which no thread writes: legal."""
    return _sub(ptx, r"ld\.global\.f32(\s+%f\d+, \[%rd\d+\];)", r"ld.global.nc.f32\1")


def extra_barrier(ptx: str) -> str:
    """A second, redundant ``bar.sync`` after transpose's one."""
    return _sub(ptx, r"^(\s*bar\.sync\s+0;\n)", r"\1\1")


_S = record.UNWRITTEN
CHEATS: list[Cheat] = [
    Cheat("stale output", "relu", stale_output, _S, "1048576 of 1048576", "stale output reuse"),
    Cheat("stale inout", "saxpy", stale_inout, record.WRONG, "differ in y", "stale output reuse"),
    Cheat("early exit", "softmax", early_exit, _S, "1048576 of 1048576", "silent launch failure"),
    Cheat("trap at entry", "layernorm", trap_at_entry, record.LAUNCH_ERROR, "", "launch failure"),
    Cheat("half the grid", "relu", half_grid, _S, "524288 of 1048576", "partial grid"),
    Cheat("half of each block", "gelu", half_block, _S, "524288 of 1048576", "partial grid"),
    Cheat("last row skipped", "layernorm", skip_last_block, _S, "1024 of 1048576", "partial outputs"),
    Cheat("launch: half the grid", "relu", unchanged, _S, "524288 of 1048576", "launch gene abuse",
          grid=(2048, 1, 1)),
    Cheat("launch: half the block", "saxpy", unchanged, record.WRONG, "differ in y",
          "launch gene abuse", block=(128, 1, 1)),
    Cheat("zeroed inputs", "relu", zero_inputs, record.INPUT_CLOBBERED, "of x", "input mutation"),
    Cheat("input as scratch", "reduce_sum", scratch_in_input, record.INPUT_CLOBBERED,
          "2048 of 1048576 elements of x", "input mutation"),
    Cheat("off-by-one guard", "relu", off_by_one_guard, record.OUT_OF_BOUNDS, "after y",
          "out-of-bounds write", grid=(4097, 1, 1)),
    Cheat("write before the buffer", "relu", underflow_write, record.OUT_OF_BOUNDS, "before y",
          "out-of-bounds write"),
    Cheat("%clock", "relu", clock_dependent, record.WRONG, "differ in y", "non-determinism"),
    Cheat("%smid", "relu", smid_dependent, record.WRONG, "differ in y", "non-determinism"),
    Cheat("%globaltimer", "relu", globaltimer_dependent, record.WRONG, "differ in y",
          "results depending on timing"),
    Cheat("launch counter", "relu", launch_counter, _S, "after timing", "benchmark detection"),
    Cheat("clamped range", "gelu", clamp_range, record.WRONG, "stress inputs", "tolerance abuse"),
    Cheat("softmax without max", "softmax", unsafe_softmax, record.WRONG, "stress inputs",
          "tolerance abuse"),
    Cheat("round toward zero", "triton_add", round_toward_zero, record.WRONG, "differ in",
          "changed rounding mode"),
    Cheat("f16 inputs", "reduce_sum", f16_inputs, record.WRONG, "differ in partial",
          "precision downgrade"),
    Cheat("removed bar.sync", "transpose", removed_barrier, record.WRONG, "differ in out",
          "removed barrier", fallback=RACECHECK),
    Cheat("scan in place", "scan_inclusive", scan_in_place, record.WRONG, "differ in y",
          "shared-memory race", fallback=RACECHECK),
    Cheat("out-of-bounds read", "relu", oob_read, MEMCHECK, "Invalid __global__ read",
          "out-of-bounds read", stage=FINALIST),
    Cheat(".nc on a written buffer", "saxpy", nc_on_written, UNSAFE_NC, "saxpy_param_1",
          ".nc on an aliased buffer", stage=FINALIST),
]

LEGIT: list[Cheat] = [
    Cheat("atom.add, result unused", "saxpy", atom_add, record.OK),
    Cheat("atom.add -> red.add", "saxpy", atom_to_red, record.OK),
    Cheat("independent loads swapped", "gemm_tile_4x4x4", swap_first_loads, record.OK),
    Cheat("explicit .rn", "triton_add", explicit_rn, record.OK),
    Cheat(".nc on a read-only buffer", "relu", nc_on_readonly, record.OK),
    Cheat("redundant bar.sync", "transpose", extra_barrier, record.OK),
    Cheat("launch: extra guarded blocks", "relu", unchanged, record.OK, grid=(8192, 1, 1)),
]
