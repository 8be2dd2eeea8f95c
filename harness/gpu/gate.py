"""The correctness gate's numerics: poison, canaries and output comparison.

The GPU worker launches a variant on fresh inputs and reads every buffer back; these
functions decide whether the launch was correct, and why not. They are written against
NumPy and tested on CPU; the judging functions (``check_launch``, ``compare``,
``max_error``, ``is_poison``, ``split_canary``) take CuPy arrays as well and then run on
the GPU (``array_module``): the worker judges kernels of tens of millions of elements
where their buffers are, since host copies and comparisons of 64M elements take seconds.

* Inputs come from ``harness.gpu.input_sets`` (one set per seed, stress sets among them).
* Before each launch the worker fills ``out`` buffers with ``poisoned(param)``: a NaN with
  a payload no kernel computes (GPUs produce the canonical NaN), or all-ones bits for ints.
  An element still holding those exact bits afterwards was never written.
* Each output buffer is allocated ``CANARY_BYTES`` larger and uploaded as
  ``with_canary(array)``; a changed byte past the end means the kernel wrote out of bounds.
* ``check_launch`` turns the read-back images into ``(ok, reason)``, the reason starting
  with one of ``harness.record``'s constants so that reports can count them.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from harness.dtypes import encodings
from harness import record
from harness.kernels.spec import DTYPES, BufferParam, KernelSpec, is_int_dtype, numpy_dtype

CANARY_BYTES = 256
"""Bytes of fixed pattern after each output buffer."""

CANARY_BYTE = 0xA5
"""The canary pattern byte: alternating bits, unlike 0, -1 or any small float's bytes."""

SPEEDUP_REVIEW_FACTOR = 10.0
SPEEDUP_REVIEW = "speedup over 10x: review"

# Quiet NaNs (top mantissa bit set, so no FP unit "quiets" them) with a recognisable payload.
_NAN_BITS = {2: 0x7E5A, 4: 0x7FC0DEAD, 8: 0x7FF8DEADDEADDEAD}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def array_module(array):
    """CuPy for a CuPy array (found among the loaded modules: this module never imports
    it), else NumPy: the functions below compute where their arrays are."""
    if type(array).__module__.split(".", 1)[0] == "cupy":
        import sys
        return sys.modules["cupy"]
    return np


def _device(xp):
    """``harness.gpu.gate_device`` when ``xp`` is CuPy (its one-pass kernels decide whether a
    launch passed; the array code below says why not), else None."""
    if xp is np:
        return None
    from harness.gpu import gate_device
    return gate_device


def _dtype(dtype) -> np.dtype:
    """A NumPy dtype from a spec dtype name ("f32") or anything ``np.dtype`` accepts."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return numpy_dtype(dtype)
    return np.dtype(dtype)


def _poison_bits(dtype: np.dtype) -> int:  # bf16 (uint16 bits): all ones, a NaN there too
    if dtype.kind == "f":
        return _NAN_BITS[dtype.itemsize]
    return (1 << (8 * dtype.itemsize)) - 1  # all ones: -1 signed, the maximum unsigned


def values(array, dtype: str):
    """``array`` (a buffer's elements, bits for bf16 and fp8) as numbers to compare:
    float32 for those (``harness.dtypes.encodings``), else the dtype's own type."""
    xp = array_module(array)
    encoding = encodings.of(dtype)
    if encoding is not None:
        return encoding.to_float(xp.asarray(array, dtype=_dtype(dtype)).ravel())
    return xp.asarray(array, dtype=_dtype(dtype)).ravel()


# --------------------------------------------------------------------------- poison


def poison_value(dtype) -> np.generic:
    """The poison scalar of ``dtype``: a NaN with payload (0x7FC0DEAD for f32), or all-ones ints."""
    dt = _dtype(dtype)
    return np.array([_poison_bits(dt)], dtype=_UINT[dt.itemsize]).view(dt)[0]


def poisoned(param: BufferParam, xp=np) -> np.ndarray:
    """A full buffer of ``param``'s poison, built from bits so that the NaN payload survives
    (made by ``xp``: NumPy, or CuPy on the GPU)."""
    dt = _dtype(param.dtype)
    return xp.full(param.count, _poison_bits(dt), dtype=_UINT[dt.itemsize]).view(dt)


def fill_poison(param: BufferParam, raw) -> None:
    """Write ``param``'s poison over the first ``param.nbytes`` of ``raw`` (a uint8 array,
    NumPy or CuPy, whose length is a multiple of the element size there), in place."""
    dt = _dtype(param.dtype)
    raw[:param.nbytes].view(_UINT[dt.itemsize]).fill(_poison_bits(dt))


def is_poison(array, dtype) -> np.ndarray:
    """Boolean mask of the elements whose BIT pattern is the poison's.

    Compared as bits, so a NaN the kernel computed (any other payload) is a value, not
    an unwritten element.
    """
    dt = _dtype(dtype)
    arr = array_module(array).ascontiguousarray(array, dtype=dt)
    return arr.view(_UINT[dt.itemsize]) == _poison_bits(dt)


# --------------------------------------------------------------------------- canaries


def with_canary(arr) -> np.ndarray:
    """The uint8 host image to upload: the buffer's bytes, then ``CANARY_BYTES`` of 0xA5."""
    xp = array_module(arr)
    data = xp.ascontiguousarray(arr).view(np.uint8).ravel()
    return xp.concatenate([data, xp.full(CANARY_BYTES, CANARY_BYTE, np.uint8)])


def split_canary(image, param: BufferParam) -> tuple[np.ndarray, bool]:
    """(the buffer as ``param``'s dtype, canary intact?) from an image read back after a launch.
    The buffer is a view of ``image`` (a 64M-element copy costs milliseconds on the GPU):
    copy it to keep it past the image's next use."""
    image = array_module(image).ascontiguousarray(image).view(np.uint8).ravel()
    if image.size != param.nbytes + CANARY_BYTES:
        raise ValueError(f"image of {param.name} has {image.size} bytes, expected "
                         f"{param.nbytes} + {CANARY_BYTES} canary bytes")
    data = image[:param.nbytes].view(_dtype(param.dtype))
    return data, bool((image[param.nbytes:] == CANARY_BYTE).all())


# --------------------------------------------------------------------------- comparison


def _unwritten(name: str, out: np.ndarray, ref: np.ndarray | None, dtype,
               refilled=None) -> str | None:
    mask = is_poison(out, dtype)
    if ref is not None and ref.size == out.size:
        mask &= ~is_poison(ref, dtype)  # the reference left it unwritten too: not a failure
    if refilled is not None:  # and still zero after a launch on zeros: never written
        dt = _dtype(dtype)
        again = array_module(out).ascontiguousarray(refilled, dtype=dt).ravel()
        mask &= again.view(_UINT[dt.itemsize]) == 0
    if not mask.any():
        return None
    first = int(array_module(mask).flatnonzero(mask)[0])
    return (f"{record.UNWRITTEN}: {int(mask.sum())} of {out.size} elements of {name} still hold "
            f"the poison; first {name}[{first}]")


def _mismatch(name: str, out: np.ndarray, ref: np.ndarray, param: BufferParam, spec,
              stress: bool = False) -> str | None:
    xp = array_module(out)
    if out.dtype.kind in "iu":
        bad = out != ref
        got, want = out.astype(np.float64), ref.astype(np.float64)
    else:
        tol = spec.tolerance_for(param)
        got, want = out.astype(np.float64), ref.astype(np.float64)
        atol = tol.atol
        if stress:  # norm-wise: rounding differences scale with the inputs, gross errors do not
            finite = xp.abs(want[xp.isfinite(want)])
            atol = max(atol, tol.rtol * float(finite.max())) if finite.size else atol
        bad = ~xp.isclose(got, want, rtol=tol.rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    first = int(xp.flatnonzero(bad)[0])
    with np.errstate(all="ignore"):
        abs_err = xp.abs(got[bad] - want[bad])
        rel_err = abs_err / xp.abs(want[bad])
    finite = xp.isfinite(abs_err)
    max_abs = float(abs_err[finite].max()) if finite.any() else math.nan
    max_rel = float(rel_err[finite].max()) if finite.any() else math.nan
    return (f"{record.WRONG}: {int(bad.sum())} of {out.size} elements differ in {name}; first "
            f"{name}[{first}] = {out[first]}, expected {ref[first]}; "
            f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}")


def compare(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray] | None,
            spec: KernelSpec, stress: bool = False,
            refilled: Mapping[str, np.ndarray] | None = None) -> tuple[bool, str]:
    """(True, "ok") if every output buffer matches the reference, else (False, reason).

    First every output is checked for surviving poison (``output not written``), then
    values: integers exactly, floats with ``np.isclose`` under the spec's tolerance, a NaN
    matching a NaN. With ``reference=None`` only the poison check runs.
    ``stress=True`` (outputs of ``stress_inputs``): floats are compared norm-wise, atol
    raised to rtol x the largest finite |reference| of the buffer, so that the rounding
    differences of a legit variant, which grow with the inputs, pass, while an overflow
    (inf, NaN) or a saturated value does not. Tolerance 0 stays exact.
    ``refilled``: outputs of a second launch on the same inputs whose outputs were zeroed
    instead of poisoned (the GPU runner's baseline check): an element is unwritten only
    where it holds the poison in one and zero in the other. For integers, whose poison
    (all ones, -1) is also a value a kernel computes (3a + b = -1 for a = -1, b = 2),
    that tells the two apart.
    """
    xp = array_module(next(iter(outputs.values()), None))
    if _passes_on_device(outputs, reference, spec, stress, xp):
        return True, record.OK
    for p in spec.outputs():
        ref = None if reference is None else xp.asarray(reference[p.name]).ravel()
        out = xp.asarray(outputs[p.name]).ravel()
        if ref is not None and out.size != ref.size:
            return False, f"{record.WRONG}: {p.name} has {out.size} elements, expected {ref.size}"
        reason = _unwritten(p.name, out, ref, p.dtype,
                            None if refilled is None else refilled.get(p.name))
        if reason:
            return False, reason
    if reference is not None:
        for p in spec.outputs():
            out = values(xp.asarray(outputs[p.name]), p.dtype)
            ref = values(xp.asarray(reference[p.name]), p.dtype)
            reason = _mismatch(p.name, out, ref, p, spec, stress)
            if reason:
                return False, reason
    return True, record.OK


def _passes_on_device(outputs, reference, spec, stress: bool, xp) -> bool:
    """True when ``compare`` would pass, decided by ``harness.gpu.gate_device``'s one-pass
    kernels (CuPy arrays only; False elsewhere, and wherever they cannot decide, so that
    ``compare``'s array code judges and, on a failure, says why)."""
    device = _device(xp)
    if device is None:
        return False
    for p in spec.outputs():
        dt = _dtype(p.dtype)
        uint = _UINT[dt.itemsize]
        out = xp.asarray(outputs[p.name]).ravel()
        if reference is None:  # only the poison check: no element may still hold it
            if device.any_eq(out.view(uint), _poison_bits(dt)):
                return False
            continue
        ref = xp.asarray(reference[p.name]).ravel()
        if ref.size != out.size or ref.dtype != out.dtype:
            return False
        if is_int_dtype(p.dtype):  # exact; an unwritten element differs from its reference
            if device.any_ne(out, ref):
                return False
            continue
        tol, encoding = spec.tolerance_for(p), p.dtype if encodings.of(p.dtype) else None
        atol = tol.atol
        if stress:  # compare's norm-wise rule
            atol = max(atol, tol.rtol * device.max_finite_abs(ref, encoding))
        if device.any_bad(out, ref, uint, _poison_bits(dt), tol.rtol, atol, encoding):
            return False
    return True


def max_error(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
              spec: KernelSpec) -> tuple[float, float]:
    """(max abs error, max rel error) of the float outputs against the reference, over
    elements where both are finite: what a variant that passed the gate still differs by
    (fast-math genes trade this for speed; reports quote it). (0, 0) without floats."""
    worst_abs = worst_rel = 0.0
    for p in spec.outputs():
        if is_int_dtype(p.dtype):
            continue
        xp = array_module(outputs[p.name])
        device = _device(xp)
        if device is not None:
            errs = device.max_errors(xp.asarray(outputs[p.name]).ravel(),
                                     xp.asarray(reference[p.name]).ravel(),
                                     p.dtype if encodings.of(p.dtype) else None)
            worst_abs, worst_rel = max(worst_abs, errs[0]), max(worst_rel, errs[1])
            continue
        got = values(outputs[p.name], p.dtype).astype(np.float64)
        want = values(xp.asarray(reference[p.name]), p.dtype).astype(np.float64)
        ok = xp.isfinite(got) & xp.isfinite(want)
        if not ok.any():
            continue
        err = xp.abs(got[ok] - want[ok])
        worst_abs = max(worst_abs, float(err.max()))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = err / xp.abs(want[ok])
        rel = rel[xp.isfinite(rel)]
        if rel.size:
            worst_rel = max(worst_rel, float(rel.max()))
    return worst_abs, worst_rel


def check_launch(spec: KernelSpec, inputs: Mapping, after: Mapping[str, np.ndarray],
                 reference: Mapping[str, np.ndarray] | None, stress: bool = False,
                 canary_only: frozenset[str] = frozenset(),
                 refilled: Mapping[str, np.ndarray] | None = None) -> tuple[bool, str]:
    """Judge one launch from host copies of its buffers; returns (ok, reason).

    ``inputs``: what was uploaded (``input_sets.make_inputs``; only role "in" buffers are used).
    ``after``: every buffer read back after the launch, by param name. Outputs (``out``,
    ``inout``) must be canary images (``with_canary`` layout, uint8); an input may be a
    canary image or a plain array of its dtype (then only modification is checked).
    ``reference``: expected outputs (baseline kernel or NumPy reference), or None.
    ``stress``: the inputs are stress inputs (``compare``'s norm-wise rule).
    ``canary_only``: buffers judged by their canary alone (an ``inout`` buffer after many
    launches holds no one launch's result).
    ``refilled``: ``compare``'s (outputs of the same launch made on zeroed outputs).
    All NumPy arrays, or all CuPy arrays (then the judging runs on the GPU).

    Precedence, so that a reason names the cause rather than a symptom: out-of-bounds
    write (a canary changed) > input modified > output not written > wrong result.
    """
    values: dict[str, np.ndarray] = {}
    xp = array_module(next(iter(after.values()), None))
    for p in spec.buffers():
        image = xp.ascontiguousarray(after[p.name])
        if p.is_output or image.nbytes == p.nbytes + CANARY_BYTES:
            data, canary_ok = split_canary(image, p)
            if not canary_ok:
                return False, (f"{record.OUT_OF_BOUNDS}: the {CANARY_BYTES} bytes after {p.name} "
                               f"({p.count} x {p.dtype}) changed")
        elif image.nbytes == p.nbytes:  # reinterpret, never convert: the bits are what count
            data = image.view(np.uint8).ravel().view(_dtype(p.dtype))
        else:
            raise ValueError(f"{p.name} read back as {image.nbytes} bytes, expected {p.nbytes} "
                             f"(or {p.nbytes + CANARY_BYTES} with its canary)")
        values[p.name] = data
    for p in spec.buffers():
        if p.is_output:
            continue
        before = xp.ascontiguousarray(inputs[p.name], dtype=_dtype(p.dtype)).ravel()
        uint = _UINT[before.itemsize]
        device = _device(xp)
        if device is not None and not device.any_ne(before.view(uint), values[p.name].view(uint)):
            continue  # unchanged, decided in one pass over both
        changed = before.view(uint) != values[p.name].view(uint)  # bits: NaN inputs compare equal
        if changed.any():
            first = int(xp.flatnonzero(changed)[0])
            return False, (f"{record.INPUT_CLOBBERED}: {int(changed.sum())} of {p.count} elements "
                           f"of {p.name} changed; first {p.name}[{first}]")
    judged = [p for p in spec.outputs() if p.name not in canary_only]
    if len(judged) < len(spec.outputs()):
        spec = _OutputsOnly(spec, judged)
    return compare({p.name: values[p.name] for p in judged}, reference, spec, stress, refilled)


class _OutputsOnly:
    """A spec seen through ``compare`` with some of its outputs left out."""

    def __init__(self, spec, outputs):
        self._spec, self._outputs = spec, outputs

    def outputs(self):
        return self._outputs

    def tolerance_for(self, param):
        return self._spec.tolerance_for(param)


def speedup_flags(baseline_cycles: float | None, cycles: float | None) -> list[str]:
    """``["speedup over 10x: review"]`` when a variant beats its baseline by more than 10x.

    Such a jump usually means the variant skips work the gate did not catch; a human looks.
    """
    if baseline_cycles is None or cycles is None or not math.isfinite(baseline_cycles):
        return []
    if cycles <= 0 or baseline_cycles / cycles > SPEEDUP_REVIEW_FACTOR:
        return [SPEEDUP_REVIEW]
    return []


__all__ = ["CANARY_BYTE", "CANARY_BYTES", "SPEEDUP_REVIEW", "array_module", "check_launch",
           "compare", "is_poison", "poison_value", "poisoned", "speedup_flags", "split_canary",
           "values", "with_canary"]
