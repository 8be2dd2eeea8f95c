"""bfloat16 buffers, kept as their bits.

Neither NumPy nor CuPy has a bfloat16 array type, and the gate runs on both (CuPy for the
kernels it judges on the GPU), so a spec's ``bf16`` buffer lives as ``uint16`` bits
(``harness.kernels.spec.numpy_dtype("bf16")``) and is converted where values are needed: drawing
inputs (``from_float``: float32 rounded to nearest even, as PTX's ``cvt.rn.bf16.f32`` and
torch do), comparing outputs and running references (``to_float``: exact, bf16 is the top
half of a float32). Both take ``xp`` (NumPy or CuPy) arrays and run where they are.
"""

from __future__ import annotations

import numpy as np

MAX = 3.3895313892515355e38  # the largest finite bf16 (bits 0x7F7F)
QUIET_NAN = 0x7FC0
TOLERANCE = (1.6e-2, 1e-5)
"""rtol, atol for bf16 outputs where the spec sets none: two units in the last place of
bf16's 8-bit significand (2**-7 = 0.78 % apart at worst), as torch.testing uses; a kernel
that sums in float32 in another order and rounds once differs by one."""


def _xp(array):
    from harness.gpu.gate import array_module

    return array_module(array)


def to_float(bits):
    """float32 values of bf16 ``bits`` (any uint16 array; exact)."""
    xp = _xp(bits)
    bits = xp.ascontiguousarray(bits).view(np.uint16)
    if xp is not np:  # one fused kernel: each CuPy operator would be one more to compile
        return _device_kernels(xp)[0](bits)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def from_float(values, xp=None):
    """bf16 bits (uint16) of ``values`` rounded to nearest, ties to even; NaN stays NaN."""
    xp = xp or _xp(values)
    f = xp.ascontiguousarray(xp.asarray(values, dtype=np.float32))
    if xp is not np:
        return _device_kernels(xp)[1](f)
    u = f.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    return xp.where(xp.isnan(f), np.uint32(QUIET_NAN), rounded).astype(np.uint16)


def neighbour(bits):
    """Bits one unit in the last place from ``bits``: the lowest significand bit flipped."""
    return bits ^ np.uint16(1)


def c_value() -> str:
    """C for ``evo_val(v)``: an element (its uint16 bits) as a double, the float its bits
    are the top half of (``harness.gpu.gate_device``'s kernels)."""
    return ("template <typename T> __device__ double evo_val(T v) {\n"
            "  return (double)__uint_as_float(((unsigned int)v) << 16); }\n")


_DEVICE: dict = {}


def _device_kernels(cupy):
    """(bits -> float32, float32 -> bits) as CuPy elementwise kernels, made once: one
    compile each way instead of one per CuPy operator (NVRTC, ~0.35 s each on first use
    with an empty kernel cache; H200, BENCHMARKS.md session 13)."""
    if not _DEVICE:
        _DEVICE["to"] = cupy.ElementwiseKernel(
            "uint16 b", "float32 f", "f = __uint_as_float(((unsigned int)b) << 16)", "evo_bf16_to_f32")
        _DEVICE["from"] = cupy.ElementwiseKernel(
            "float32 f", "uint16 b",
            "unsigned int u = __float_as_uint(f);"
            f"b = isnan(f) ? {QUIET_NAN} : (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)",
            "evo_f32_to_bf16")
    return _DEVICE["to"], _DEVICE["from"]
