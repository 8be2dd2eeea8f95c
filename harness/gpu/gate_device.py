"""The gate's judgements in one pass over device memory: fused CuPy kernels.

``harness.gpu.gate`` judges CuPy arrays with the same array code as NumPy ones, and each of
its steps (``isclose``, ``isfinite``, masks, float64 copies) is a kernel that writes a
temporary as large as the buffer. On a 64M-element output that was ~40 ms to compare and
~40 ms for the largest errors, per seed (H200, ``harness.tools.bench_throughput --per-kernel``,
BENCHMARKS.md session 14). The kernels here read each buffer once and write nothing
but their result; ``gate`` uses them to decide *whether* a launch passed and keeps its
array code for *why not* (the reason's counts and first element), which runs only on a
failure. They compute the same predicates: a test on the GPU compares both on every dtype.
Each answers "does any element fail?" (the reason's counts come from the array code).

Imported only where CuPy arrays are judged (``gate`` finds CuPy among the loaded modules),
so a CPU machine never needs CuPy. Each kernel is compiled by CuPy once per dtype and kept
in its on-disk cache.
"""

from __future__ import annotations

import functools

import cupy
import numpy as np



def _value(encoding: str | None) -> str:
    """C for ``evo_val(v)``: an element as a double: the value, or for a dtype kept as its
    bits (bf16, fp8: ``harness.dtypes.encodings``) the float its bits encode."""
    if encoding is None:
        return "template <typename T> __device__ double evo_val(T v) { return (double)v; }\n"
    from harness.dtypes import encodings

    return encodings.of(encoding).c_value()


# numpy.isclose(equal_nan=True), elementwise: within tolerance where both are finite,
# else equal (infinities of one sign) or both NaN.
_CLOSE = ("__device__ bool evo_close(double o, double r, double rtol, double atol) {\n"
          "  if (isfinite(o) && isfinite(r)) return fabs(o - r) <= atol + rtol * fabs(r);\n"
          "  return o == r || (isnan(o) && isnan(r)); }\n")


# Every kernel below is an ElementwiseKernel (a grid-stride loop over all SMs). CuPy's
# ReductionKernel to a single value ran in one block: 1.2 s for the largest errors of 64M
# elements, 0.1 s for a guard compare of 256 MB (H200, session 14). So the verdicts set a
# flag (stored only where an element fails: nothing is written when all pass), and the
# maxima of non-negative doubles, whose bits order as unsigned integers, are kept with
# atomicMax, attempted only where an element beats the maximum already stored.

@functools.cache
def _flag(op: str):
    return cupy.ElementwiseKernel("T x, T y", "raw int32 flag", f"if (x {op} y) flag[0] = 1;",
                                  "evo_any_" + ("ne" if op == "!=" else "eq"))


@functools.cache
def _bad(encoding: str | None):
    # An element is bad when it still holds the poison (and the reference's does not), or
    # when its value is not close to the reference's. Bits come in as unsigned views.
    return cupy.ElementwiseKernel(
        "T out, T ref, U out_bits, U ref_bits, U poison, float64 rtol, float64 atol",
        "raw int32 flag",
        "if ((out_bits == poison && ref_bits != poison) || "
        "!evo_close(evo_val(out), evo_val(ref), rtol, atol)) flag[0] = 1;",
        "evo_any_bad" + _suffix(encoding), preamble=_value(encoding) + _CLOSE)


_RAISE = ("__device__ void evo_raise(unsigned long long* m, double v) {\n"
          "  unsigned long long bits = (unsigned long long)__double_as_longlong(v);\n"
          "  if (bits > *((volatile unsigned long long*)m)) atomicMax(m, bits); }\n")


@functools.cache
def _max_err(encoding: str | None):
    # Over elements where both are finite: |out - ref| into m[0], that over |ref| into
    # m[1] where it is finite (a zero reference's is left out).
    return cupy.ElementwiseKernel(
        "T out, T ref", "raw uint64 m",
        "double o = evo_val(out), r = evo_val(ref);\n"
        "if (isfinite(o) && isfinite(r)) {\n"
        "  double e = fabs(o - r), q = e / fabs(r);\n"
        "  if (isfinite(e)) evo_raise((unsigned long long*)&m[0], e);\n"
        "  if (isfinite(q)) evo_raise((unsigned long long*)&m[1], q); }",
        "evo_max_err" + _suffix(encoding), preamble=_value(encoding) + _RAISE)


@functools.cache
def _max_finite_abs(encoding: str | None):
    return cupy.ElementwiseKernel(
        "T x", "raw uint64 m",
        "double v = fabs(evo_val(x)); if (isfinite(v)) evo_raise((unsigned long long*)&m[0], v);",
        "evo_max_finite_abs" + _suffix(encoding), preamble=_value(encoding) + _RAISE)


def _maxima(kernel, arrays, count: int) -> list[float]:
    m = cupy.zeros(count, dtype=cupy.uint64)  # 0 is +0.0's bits: the identity
    kernel(*arrays, m)
    return m.get().view(np.float64).tolist()


def _any(kernel, *arrays) -> bool:
    flag = cupy.zeros(1, dtype=cupy.int32)
    kernel(*arrays, flag)
    return bool(flag.get()[0])


def _scalar(value, dtype):
    return cupy.asarray(np.asarray(value, dtype=dtype))  # a 0-d array: broadcast, any dtype


def any_ne(x, y) -> bool:
    """Whether any element has ``x != y`` (``y``: an array of x's shape and dtype, or a scalar)."""
    flag = new_flag()
    flag_ne(x, y, flag)
    return bool(flag.get()[0])


def new_flag():
    """A device flag for ``flag_ne``, cleared."""
    return cupy.zeros(1, dtype=cupy.int32)


def flag_ne(x, y, flag) -> None:
    """Set ``flag`` (from ``new_flag``) where any element has ``x != y``, without waiting:
    several checks share one flag and one read back."""
    if not isinstance(y, cupy.ndarray):
        y = _scalar(y, x.dtype)
    if x.size:
        _flag("!=")(x, y, flag)


# Every guard range of a checked launch in one kernel: a block row per range, each range's
# whole 8-byte words compared as words and its unaligned ends byte by byte. One CuPy
# elementwise call per piece (three a range, each with its scalar copied to the device)
# held the worker 0.3-0.6 ms a checked launch, seven launches a candidate: a fifth of a
# one-thread tile's measurement (BENCHMARKS.md, session 23).
_GUARDS_NE = r"""
extern "C" __global__ void evo_guards_ne(const unsigned char* arena, const long long* ranges,
                                         unsigned char byte, unsigned long long word, int* flag) {
    long long lo = ranges[2 * blockIdx.y], hi = ranges[2 * blockIdx.y + 1];
    long long wlo = (lo + 7) / 8 * 8, whi = hi / 8 * 8;
    if (wlo >= whi) { wlo = hi; whi = hi; }  // no whole word: [lo, hi) byte by byte
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    const unsigned long long* words = (const unsigned long long*)arena;
    for (long long i = wlo / 8 + t; i < whi / 8; i += stride)
        if (words[i] != word) { flag[0] = 1; return; }
    for (long long i = lo + t; i < wlo; i += stride)
        if (arena[i] != byte) { flag[0] = 1; return; }
    for (long long i = whi + t; i < hi; i += stride)
        if (arena[i] != byte) { flag[0] = 1; return; }
}
"""


@functools.cache
def _guards_kernel():
    return cupy.RawKernel(_GUARDS_NE, "evo_guards_ne")


def guard_table(ranges: list[tuple[int, int]]):
    """The (start, end) byte ranges of ``any_guard_changed`` as a device array (int64,
    flat): made once per layout by the caller and kept."""
    return cupy.asarray(np.asarray(ranges, dtype=np.int64).reshape(-1))


def any_guard_changed(arena, table, byte: int) -> bool:
    """Whether any byte of ``arena`` (a uint8 device array, 8-byte aligned) within the
    ranges of ``table`` (``guard_table``) differs from ``byte``: one launch, one read back."""
    flag = new_flag()
    flag_guard_changed(arena, table, byte, flag)
    return bool(flag.get()[0])


def flag_guard_changed(arena, table, byte: int, flag) -> None:
    """``any_guard_changed`` into ``flag`` (an int32 device array of one element, cleared
    by the caller) without waiting: set to 1 where a byte changed."""
    count = table.size // 2
    if not count:
        return
    word = np.uint64(int.from_bytes(bytes([byte]) * 8, "little"))
    blocks = 4 * _multiprocessors(cupy.cuda.runtime.getDevice())
    _guards_kernel()((blocks, count), (256,), (arena, table, np.uint8(byte), word, flag))


@functools.cache
def _multiprocessors(device: int) -> int:
    return cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount,
                                                device)


def any_eq(x, y) -> bool:
    """Whether any element has ``x == y`` (as ``any_ne``)."""
    if not isinstance(y, cupy.ndarray):
        y = _scalar(y, x.dtype)
    return bool(x.size) and _any(_flag("=="), x, y)


def any_bad(out, ref, uint, poison_bits: int, rtol: float, atol: float,
            encoding: str | None) -> bool:
    """Whether any element of the float output ``out`` fails ``gate.compare`` against ``ref``
    (same shape and dtype; ``encoding``: the dtype they hold as bits, bf16 or fp8, else
    None): still the poison where ``ref`` is not, or not ``isclose`` under (rtol, atol).
    ``uint``: the unsigned type of the elements' width."""
    if not out.size:
        return False
    return _any(_bad(encoding), out, ref, out.view(uint), ref.view(uint), _scalar(poison_bits, uint),
                _scalar(rtol, np.float64), _scalar(atol, np.float64))


def max_errors(out, ref, encoding: str | None) -> tuple[float, float]:
    """(max abs error, max rel error) over elements where both are finite (``gate.max_error``'s
    rule: a relative error that is not finite, from a zero reference, is left out)."""
    if not out.size:
        return 0.0, 0.0
    worst_abs, worst_rel = _maxima(_max_err(encoding), (out, ref), 2)
    return worst_abs, worst_rel


def max_finite_abs(x, encoding: str | None) -> float:
    """The largest |x| over finite elements (0 when none): ``gate.compare``'s stress atol."""
    return _maxima(_max_finite_abs(encoding), (x,), 1)[0] if x.size else 0.0


def _suffix(encoding: str | None) -> str:
    return "_" + encoding if encoding else ""
