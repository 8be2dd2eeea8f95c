"""harness.gpu.gate_device's one-pass reductions decide exactly what the gate's array code
decides: for every dtype, on outputs with planted faults (poison left, values just inside
and just outside the tolerance, NaN, infinities, a clobbered input), the verdict on CuPy
arrays equals the verdict of the NumPy path on host copies, and the largest errors agree.

Run with ``python3 -m pytest -m gpu -x -q tests/test_gate_fused_gpu.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.dtypes import encodings
from harness.gpu import gate
from harness import record
from harness.kernels.spec import BufferParam, Tolerance
from harness.kernels.suite import find_kernel

pytestmark = pytest.mark.gpu

N = 1 << 16
FLOATS = ("f32", "f64", "f16", "bf16", "f8e4m3", "f8e5m2")
INTS = ("i32", "u32", "i64", "u64", "i8", "u8")


def _spec(dtype: str, rtol: float = 1e-3, atol: float = 1e-5):
    params = (BufferParam("x", dtype, N, "in"), BufferParam("y", dtype, N, "out"))
    return dataclasses.replace(find_kernel("relu"), params=params, tolerance=Tolerance(rtol, atol))


def _reference(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    if encodings.of(dtype):
        return encodings.of(dtype).from_float(rng.normal(0, 3, N).astype(np.float32))
    if dtype in INTS:
        info = np.iinfo(gate._dtype(dtype))
        return rng.integers(max(info.min, -1000), min(info.max, 1000), N).astype(gate._dtype(dtype))
    return rng.normal(0, 3, N).astype(gate._dtype(dtype))


def _faults(dtype: str) -> dict[str, callable]:
    """name -> a function making the variant's output from the reference (host arrays)."""
    poison = gate.poison_value(dtype)

    def at(i, value):
        def make(ref):
            out = ref.copy()
            out[i] = value(ref[i]) if callable(value) else value
            return out
        return make

    faults = {"identical": lambda ref: ref.copy(),
              "one element unwritten": at(N // 3, poison),
              "last element unwritten": at(N - 1, poison)}
    if dtype in INTS:
        faults["one element off by one"] = at(5, lambda v: v + 1 if v < 100 else v - 1)
        return faults
    encoding = encodings.of(dtype)
    if encoding is not None:  # bits: bf16, fp8
        # 5 % is outside bf16's rounding, inside fp8's: 40 % is outside both
        factor = 1.05 if dtype == "bf16" else 1.4
        up = lambda v: encoding.from_float(np.float32(encoding.to_float(np.array([v]))[0] * factor))[0]
        faults["one element off"] = at(9, up)
        faults["one element one unit off"] = at(10, lambda v: encoding.neighbour(np.array([v]))[0])
        faults["one element NaN"] = at(11, encoding.QUIET_NAN)
        return faults
    dt = gate._dtype(dtype)
    faults.update({
        "within tolerance": at(5, lambda v: v * dt.type(1 + 5e-4)),
        "outside tolerance": at(6, lambda v: v * dt.type(1.01) + dt.type(0.01)),
        "one element NaN": at(7, dt.type(np.nan)),
        "one element inf": at(8, dt.type(np.inf)),
    })
    return faults


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("stress", [False, True])
def test_device_verdicts_equal_the_array_code_on_planted_faults(dtype, stress):
    import cupy

    spec = _spec(dtype)
    ref = _reference(dtype)
    if dtype not in INTS and not encodings.of(dtype):  # the reference itself holds NaN, inf, poison
        ref[100], ref[101], ref[102] = np.nan, np.inf, -np.inf
        ref[103] = gate.poison_value(dtype)
    seen = set()
    for name, make in _faults(dtype).items():
        out = make(ref)
        host = gate.compare({"y": out}, {"y": ref}, spec, stress=stress)
        dev_out, dev_ref = cupy.asarray(out), cupy.asarray(ref)
        device = gate.compare({"y": dev_out}, {"y": dev_ref}, spec, stress=stress)
        assert device[0] == host[0], (name, host, device)
        if not host[0]:
            assert device[1].split(":")[0] == host[1].split(":")[0], (name, host, device)
        assert gate._passes_on_device({"y": dev_out}, {"y": dev_ref}, spec, stress, cupy) == host[0]
        seen.add(host[0])
        # The poison check alone (the baseline's own check, reference None).
        assert gate.compare({"y": dev_out}, None, spec)[0] == gate.compare({"y": out}, None, spec)[0]
        if dtype not in INTS:
            want = gate.max_error({"y": out}, {"y": ref}, spec)
            got = gate.max_error({"y": dev_out}, {"y": dev_ref}, spec)
            assert got == pytest.approx(want, rel=1e-12, abs=0), name
    assert seen == {True, False}  # the faults planted both verdicts


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f8e4m3", "u8"])
def test_a_clobbered_input_is_seen_and_an_untouched_one_passes(dtype):
    import cupy

    spec = _spec(dtype)
    x = _reference(dtype)
    out = _reference(dtype)
    after = {"x": cupy.asarray(x), "y": gate.with_canary(cupy.asarray(out))}
    ok, _ = gate.check_launch(spec, {"x": cupy.asarray(x)}, after, {"y": cupy.asarray(out)})
    assert ok
    clobbered = x.copy()
    clobbered.view(np.uint8)[-1] ^= 1  # one bit of the last element
    after["x"] = cupy.asarray(clobbered)
    ok, reason = gate.check_launch(spec, {"x": cupy.asarray(x)}, after, {"y": cupy.asarray(out)})
    assert not ok and reason.startswith(record.INPUT_CLOBBERED) and f"x[{N - 1}]" in reason


def test_guard_compare_finds_one_changed_byte_anywhere_in_a_range():
    import cupy

    from harness.gpu.gate_device import any_ne

    arena = cupy.full(1 << 20, gate.CANARY_BYTE, dtype=cupy.uint8)
    word = np.uint64(int.from_bytes(bytes([gate.CANARY_BYTE]) * 8, "little"))
    assert not any_ne(arena.view(cupy.uint64), word)
    for where in (0, 7, 4095, (1 << 20) - 1):
        arena[where] = 0
        assert any_ne(arena.view(cupy.uint64), word), where
        arena[where] = gate.CANARY_BYTE
    assert not any_ne(arena[3:5], np.uint8(gate.CANARY_BYTE))


def test_one_launch_guard_compare_sees_each_byte_of_its_ranges_and_none_outside():
    """gate_device.any_guard_changed (every guard range in one kernel): a changed byte at
    each end of each range, and inside, is seen; one just outside every range is not, for
    ranges with unaligned ends, ranges shorter than a word and a range of one byte."""
    import cupy

    from harness.gpu.gate_device import any_guard_changed, guard_table

    size = 1 << 20
    arena = cupy.full(size, gate.CANARY_BYTE, dtype=cupy.uint8)
    ranges = [(0, 4099), (4101, 4105), (4107, 4108), (8195, 70001), (70003, size)]
    table = guard_table(ranges)
    assert not any_guard_changed(arena, table, gate.CANARY_BYTE)
    outside = [4099, 4100, 4105, 4106, 4108, 8194, 70001, 70002]
    for where in outside:
        arena[where] = 0
    assert not any_guard_changed(arena, table, gate.CANARY_BYTE), "a byte outside the ranges"
    inside = sorted({i for lo, hi in ranges for i in (lo, lo + 1, (lo + hi) // 2, hi - 2, hi - 1)
                     if lo <= i < hi})
    for where in inside:
        before = int(arena[where])
        arena[where] = before ^ 1
        assert any_guard_changed(arena, table, gate.CANARY_BYTE), where
        arena[where] = before
    assert not any_guard_changed(arena, guard_table([]), gate.CANARY_BYTE)
