"""Many launches of one small kernel judged at once on the host: the queued checks' fast pass.

The queued checks (``harness.gpu.queued_checks``) read every launch's buffers back in one
array, a row per launch (a staging slot: each buffer and its canary at a fixed offset).
Judged a launch at a time by ``gate.check_launch``, a one-thread tile's fourteen launches a
candidate (the baseline on eight seeds, the variant on six) cost ~40 us of NumPy calls each
on tiny arrays (measured on the CPU machine). ``rows_pass`` judges all rows in a few NumPy operations over the whole
array: every canary intact, every input as uploaded, no output element left holding the
poison, and, against a reference, integers equal and floats within the spec's tolerance
(``np.isclose`` as ``gate.compare`` calls it).

Only a pass is trusted. Where any row fails, or a buffer's dtype is one this pass does not
decode (bf16 and fp8, whose bits ``gate.values`` turns into floats) and its bits differ
from the reference's, it answers False and
the caller judges row by row with ``gate.check_launch``, whose first failure and reason
stand: so it can make the check faster, never more lenient (``rows_pass`` True implies
``check_launch`` passes on every row: tests/test_gate_rows.py).
"""

from __future__ import annotations

import numpy as np

from harness.gpu import gate


def row_layout(spec, sizes: list[int]) -> list[tuple]:
    """(param, offset in a row) of each buffer, rows laid out as ``sizes`` (bytes each buffer
    takes, canary included: ``queued_checks._slot_sizes``)."""
    out, offset = [], 0
    for p, size in zip(spec.buffers(), sizes):
        out.append((p, offset))
        offset += size
    return out


def rows_pass(spec, rows: np.ndarray, layout: list[tuple], inputs: list[dict],
              references: list[dict | None]) -> bool:
    """Whether every row of ``rows`` (uint8, a launch's buffers each, laid out as ``layout``)
    passes ``gate.check_launch`` against its row's ``inputs`` (what was uploaded) and
    ``references`` (the expected outputs, or None: only written, as the baseline is
    judged). False where any row fails or this pass cannot decide (module docstring)."""
    if rows.ndim != 2 or rows.shape[0] != len(inputs) or len(inputs) != len(references):
        return False
    have_ref = [ref is not None for ref in references]
    if any(have_ref) and not all(have_ref):
        return False
    for p, offset in layout:
        end = offset + p.nbytes
        if not (rows[:, end:end + gate.CANARY_BYTES] == gate.CANARY_BYTE).all():
            return False
        data = rows[:, offset:end]
        if not p.is_output:
            uploaded = np.stack([_bytes(inp[p.name], p) for inp in inputs])
            if uploaded.shape != data.shape or not (uploaded == data).all():
                return False
        elif not _output_rows_pass(spec, p, data, references):
            return False
    return True


def _bytes(array, p) -> np.ndarray:
    """``array`` as ``check_launch`` reads an input before comparing it: ``p``'s dtype,
    contiguous, then its bytes."""
    return np.ascontiguousarray(array, dtype=gate._dtype(p.dtype)).view(np.uint8).ravel()


def _output_rows_pass(spec, p, data: np.ndarray, references: list[dict | None]) -> bool:
    dt = gate._dtype(p.dtype)
    uint = gate._UINT[dt.itemsize]
    bits = np.ascontiguousarray(data).view(uint)  # (rows, elements)
    poison = gate._poison_bits(dt)
    if references[0] is None:  # only written: no element may still hold the poison
        return not (bits == poison).any()
    ref = np.stack([_bytes(r[p.name], p) for r in references])
    if ref.shape != data.shape:
        return False
    ref_bits = ref.view(uint)
    if (bits == ref_bits).all():  # the same bits pass under any tolerance, NaNs included
        return True
    if dt.kind != "f":  # integers differ: a failure; bf16 and fp8 (held as unsigned
        return False  # integers) are judged where gate.values decodes them
    if ((bits == poison) & (ref_bits != poison)).any():
        return False  # an output not written (isclose would pass it where the reference is another NaN)
    tol = spec.tolerance_for(p)
    got = bits.view(dt).astype(np.float64)
    want = ref_bits.view(dt).astype(np.float64)
    return bool(np.isclose(got, want, rtol=tol.rtol, atol=tol.atol, equal_nan=True).all())
