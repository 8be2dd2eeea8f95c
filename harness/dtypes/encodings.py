"""The float dtypes that NumPy and CuPy have no type for, kept in buffers as their bits:
bf16 as uint16 (``harness.dtypes.bf16``), fp8 e4m3 and e5m2 as uint8 (``harness.dtypes.fp8``).

Each encoding converts between its bits and float32 (``to_float``, ``from_float``, for
NumPy or CuPy arrays), knows its largest finite value (``MAX``), the tolerance its
rounding needs (``TOLERANCE``: rtol, atol), a neighbouring pattern (``neighbour``: one unit
in the last place away), and the C that reads an element as a double on the GPU
(``c_value``, for ``harness.gpu.gate_device``). The gate, the fills and the references ask
``of(dtype)`` and handle every encoding alike.
"""

from __future__ import annotations

from harness.dtypes import bf16, fp8

ENCODED = {"bf16": bf16, "f8e4m3": fp8.E4M3, "f8e5m2": fp8.E5M2}


def of(dtype: str):
    """The encoding of a spec dtype kept as bits ("bf16", "f8e4m3", "f8e5m2"), else None."""
    return ENCODED.get(dtype)
