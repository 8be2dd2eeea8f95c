"""fp8 buffers (e4m3 and e5m2, as PyTorch's float8_e4m3fn and float8_e5m2), kept as bits.

NumPy and CuPy have no 8-bit float, so an ``f8e4m3`` or ``f8e5m2`` buffer lives as
``uint8`` bits, as ``bf16`` lives as uint16 (``harness.dtypes.bf16``; ``harness.dtypes.encodings`` says
which dtypes are kept so). Converting is by table: each of the 256 bit patterns has one
value, and rounding a float to the nearest pattern is a search among the finite values
(ties to the even pattern, as PTX's ``cvt.rn`` and torch do). Overflow is what torch's
``.to()`` gives: NaN for e4m3 (it has no infinity), infinity for e5m2.

The formats (OCP 8-bit floating point, as PTX's ``e4m3``/``e5m2`` and Triton's
``fp8e4nv``/``fp8e5``): a sign bit, then 4 exponent bits (bias 7) and 3 significand bits,
NaN at S.1111.111 and no infinity; or 5 exponent bits (bias 15) and 2 significand bits,
IEEE-like (infinity and NaNs at exponent 31).
"""

from __future__ import annotations

import numpy as np


class Fp8Format:
    """One fp8 format: its bits' values and the conversions ``harness.dtypes.encodings`` needs."""

    def __init__(self, name: str, exponent_bits: int, significand_bits: int, ieee: bool):
        self.name = name
        self.exponent_bits, self.significand_bits = exponent_bits, significand_bits
        self.bias = 2 ** (exponent_bits - 1) - 1
        self.ieee = ieee  # infinity and NaNs at the top exponent (e5m2), else NaN only at all ones
        self.table = np.array([self._value(b) for b in range(256)], dtype=np.float32)
        finite = np.isfinite(self.table[:128])
        self.max_bits = int(np.flatnonzero(finite)[-1])  # the largest finite: 0x7E, 0x7B
        self.MAX = float(self.table[self.max_bits])
        self.QUIET_NAN = 0x7F if not ieee else 0x7E
        self.overflow_bits = self.max_bits + 1  # what rounds past the largest: NaN, or +inf
        # rtol: one unit in the last place at the bottom of a binade (2**-3, 2**-2), so that
        # a kernel rounding once differently passes and one two units off does not; atol:
        # the smallest subnormal
        self.TOLERANCE = (2.0 ** -significand_bits, float(self.table[1]))
        # the non-negative finite values in bit order (increasing), and the first value
        # past them (where rounding overflows), to search for the nearest
        ulp_at_max = self.MAX - float(self.table[self.max_bits - 1])
        self._ladder = np.append(self.table[: self.max_bits + 1], np.float32(self.MAX + ulp_at_max))

    def _value(self, bits: int) -> float:
        sign = -1.0 if bits & 0x80 else 1.0
        e = (bits >> self.significand_bits) & ((1 << self.exponent_bits) - 1)
        m = bits & ((1 << self.significand_bits) - 1)
        top = (1 << self.exponent_bits) - 1
        if self.ieee and e == top:
            return sign * np.inf if m == 0 else np.nan
        if not self.ieee and e == top and m == (1 << self.significand_bits) - 1:
            return np.nan
        if e == 0:  # subnormal
            return sign * m * 2.0 ** (1 - self.bias - self.significand_bits)
        return sign * (1 + m / 2 ** self.significand_bits) * 2.0 ** (e - self.bias)

    def to_float(self, bits):
        """float32 values of fp8 ``bits`` (any uint8 array, NumPy or CuPy; exact)."""
        xp = _xp(bits)
        table = xp.asarray(self.table)
        return table[xp.ascontiguousarray(bits).view(np.uint8)]

    def from_float(self, values, xp=None):
        """fp8 bits (uint8) of ``values`` rounded to nearest, ties to the even pattern;
        past the largest finite: NaN (e4m3) or infinity (e5m2); NaN stays NaN."""
        xp = xp or _xp(values)
        f = xp.ascontiguousarray(xp.asarray(values, dtype=np.float32))
        a = xp.abs(f)
        ladder = xp.asarray(self._ladder)
        hi = xp.clip(xp.searchsorted(ladder, a, side="left"), 1, len(self._ladder) - 1)
        lo = hi - 1
        below, above = a - ladder[lo], ladder[hi] - a
        pick = xp.where((below < above) | ((below == above) & (lo % 2 == 0)), lo, hi)
        pick = xp.where(a > ladder[-1], self.overflow_bits, pick)  # beyond the first past the max
        bits = pick.astype(np.uint8) | xp.where(xp.signbit(f), np.uint8(0x80), np.uint8(0))
        return xp.where(xp.isnan(f), np.uint8(self.QUIET_NAN), bits).astype(np.uint8)

    def neighbour(self, bits):
        """Bits one pattern away from ``bits`` that are not NaN where ``bits`` is not:
        the lowest bit flipped, or the pattern below where flipping it would make a NaN."""
        xp = _xp(bits)
        flipped = bits ^ np.uint8(1)
        nan_made = xp.isnan(self.to_float(flipped)) & ~xp.isnan(self.to_float(bits))
        return xp.where(nan_made, bits - np.uint8(1), flipped).astype(np.uint8)

    def c_value(self) -> str:
        """C for ``evo_val(v)``: an element (its uint8 bits) as a double, for
        ``harness.gpu.gate_device``'s kernels."""
        e_mask, m_bits = (1 << self.exponent_bits) - 1, self.significand_bits
        m_mask = (1 << m_bits) - 1
        special = (f"if (e == {e_mask}) x = m ? nan(\"\") : (double)__int_as_float(0x7f800000); else "
                   if self.ieee else
                   f"if (e == {e_mask} && m == {m_mask}) x = nan(\"\"); else ")
        return ("template <typename T> __device__ double evo_val(T v) {\n"
                f"  unsigned int b = (unsigned int)v & 0xFFu;\n"
                f"  int e = (b >> {m_bits}) & {e_mask}, m = b & {m_mask};\n"
                "  double x;\n"
                f"  {special}if (e == 0) x = ldexp((double)m, {1 - self.bias - m_bits});\n"
                f"  else x = ldexp(1.0 + m / {float(1 << m_bits)}, e - {self.bias});\n"
                "  return (b & 0x80u) ? -x : x; }\n")


def _xp(array):
    from harness.gpu.gate import array_module

    return array_module(array)


E4M3 = Fp8Format("f8e4m3", 4, 3, ieee=False)
E5M2 = Fp8Format("f8e5m2", 5, 2, ieee=True)
