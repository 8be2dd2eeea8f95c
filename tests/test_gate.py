"""Tests for harness.gpu.gate: inputs, poison, canaries, comparison and launch checks (NumPy only)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness import record
from harness.gpu.gate import (
                              CANARY_BYTES, SPEEDUP_REVIEW, check_launch, compare, is_poison, poison_value, poisoned,
                              speedup_flags, split_canary, with_canary,
                              )
from harness.gpu.input_sets import make_inputs, reference_outputs
from harness.kernels.spec import BufferParam, KernelSpec, ScalarParam, Tolerance
from harness.kernels.suite import find_kernel

PARAMS = (
    BufferParam("x", "f32", 64, "in", "normal", mean=1.0, std=2.0),
    BufferParam("u", "f16", 32, "in", "uniform", low=-1.0, high=1.0),
    BufferParam("idx", "i32", 500, "in", "int", low=-3, high=4),
    BufferParam("b", "u8", 300, "in", "int", low=250, high=256),
    BufferParam("c", "f64", 8, "in", "const", value=2.5),
    BufferParam("acc", "f32", 16, "inout", "normal"),
    BufferParam("y", "f32", 24, "out"),
    BufferParam("k", "i32", 4, "out"),
    ScalarParam("n", "u32", 24),
    ScalarParam("eps", "f32", 1e-5),
)
SPEC = KernelSpec(name="mix", entry="mix", ptx_path=Path("mix.ptx"), grid=(1, 1, 1), block=(32, 1, 1),
                  params=PARAMS, tolerance=Tolerance(rtol=1e-3, atol=1e-6))


def _param(name: str) -> BufferParam:
    return SPEC.param(name)


# --------------------------------------------------------------------------- inputs


def test_make_inputs_is_deterministic_per_seed():
    a, b, c = make_inputs(SPEC, 7), make_inputs(SPEC, 7), make_inputs(SPEC, 8)
    assert set(a) == {p.name for p in PARAMS}
    for name in ("x", "u", "idx", "acc"):
        assert a[name].tobytes() == b[name].tobytes()
        assert a[name].tobytes() != c[name].tobytes()


def test_make_inputs_dtypes_and_ranges():
    v = make_inputs(SPEC, 1)
    for p in PARAMS:
        assert v[p.name].dtype == SPEC.numpy_dtype(p.dtype), p.name
        if isinstance(p, BufferParam):
            assert v[p.name].shape == (p.count,)
    assert isinstance(v["n"], np.uint32) and v["n"] == 24
    assert isinstance(v["eps"], np.float32)
    assert v["idx"].min() == -3 and v["idx"].max() == 3  # high is exclusive, as in NumPy
    assert v["b"].min() == 250 and v["b"].max() == 255
    assert (v["c"] == 2.5).all()
    assert (np.abs(v["u"]) <= 1).all()
    assert abs(float(v["x"].mean()) - 1.0) < 1.0


# --------------------------------------------------------------------------- poison


def test_poison_values_have_distinctive_bits():
    assert poison_value("f32").view(np.uint32) == 0x7FC0DEAD
    assert poison_value("f16").view(np.uint16) == 0x7E5A
    assert poison_value("f64").view(np.uint64) == 0x7FF8DEADDEADDEAD
    assert poison_value("i32") == -1 and poison_value("u8") == 255
    assert np.isnan(poison_value(np.float32))


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_computed_nan_is_not_poison(dtype):
    p = BufferParam("z", dtype, 5, "out")
    arr = poisoned(p)
    assert arr.dtype == SPEC.numpy_dtype(dtype) and is_poison(arr, dtype).all()
    arr[1] = np.nan  # what a kernel computes: the canonical NaN
    arr[3] = 0.0
    assert is_poison(arr, dtype).tolist() == [True, False, True, False, True]


def test_int_poison_is_all_ones():
    arr = poisoned(BufferParam("k", "i32", 3, "out"))
    assert arr.tolist() == [-1, -1, -1]
    arr[0] = 0
    assert is_poison(arr, "i32").tolist() == [False, True, True]


# --------------------------------------------------------------------------- canaries


def test_canary_round_trip_and_detection():
    p = _param("y")
    data = np.arange(24, dtype=np.float32)
    image = with_canary(data)
    assert image.dtype == np.uint8 and image.size == p.nbytes + CANARY_BYTES
    back, ok = split_canary(image, p)
    assert ok and back.dtype == np.float32 and (back == data).all()
    image[p.nbytes + 100] ^= 1
    assert split_canary(image, p)[1] is False
    with pytest.raises(ValueError, match="bytes"):
        split_canary(image[:-1], p)


# --------------------------------------------------------------------------- compare


def _outputs(y, k=(1, 2, 3, 4)):
    return {"acc": np.arange(16, dtype=np.float32), "y": np.asarray(y, np.float32),
            "k": np.asarray(k, np.int32)}


REF = _outputs(np.linspace(-2, 2, 24))


def test_compare_ok_and_exact_ints():
    assert compare(REF, REF, SPEC) == (True, record.OK)
    ok, reason = compare(_outputs(REF["y"], (1, 2, 4, 4)), REF, SPEC)
    assert not ok and reason == (f"{record.WRONG}: 1 of 4 elements differ in k; first k[2] = 4, "
                                 "expected 3; max abs error 1, max rel error 0.333")


def test_compare_float_tolerance_edges():
    ref = _outputs(np.full(24, 1.5))
    # |got - want| <= atol + rtol * |want|: 1e-6 + 1.5e-3, in float64 arithmetic
    edge = np.float32(1.5 + 1.4e-3)
    assert compare(_outputs(np.full(24, edge)), ref, SPEC)[0]
    y = np.full(24, 1.5, np.float32)
    y[5] = 1.25
    ok, reason = compare(_outputs(y), ref, SPEC)
    assert not ok
    assert reason.startswith(f"{record.WRONG}: 1 of 24 elements differ in y; first y[5] = 1.25, expected 1.5")
    assert "max abs error 0.25" in reason
    y[5] = np.float32(1.5 + 1.6e-3)  # just beyond
    assert not compare(_outputs(y), ref, SPEC)[0]
    exact = replace(SPEC, tolerance=Tolerance(rtol=0.0, atol=0.25))  # representable bounds
    y[5] = 1.25
    assert compare(_outputs(y), ref, exact)[0]  # |d| == atol passes
    y[5] = np.nextafter(np.float32(1.25), np.float32(0))
    assert not compare(_outputs(y), ref, exact)[0]


def test_compare_nan_and_inf():
    ref_y = np.linspace(-2, 2, 24).astype(np.float32)
    ref_y[[2, 3]] = [np.nan, np.inf]
    ref = _outputs(ref_y)
    assert compare(_outputs(ref_y.copy()), ref, SPEC)[0]  # NaN == NaN, inf == inf
    y = ref_y.copy()
    y[2] = 0.0
    ok, reason = compare(_outputs(y), ref, SPEC)
    assert not ok and "first y[2] = 0.0, expected nan" in reason
    y = ref_y.copy()
    y[7] = np.nan
    assert not compare(_outputs(y), ref, SPEC)[0]


def test_unwritten_is_reported_as_unwritten_not_wrong():
    y = REF["y"].copy()
    y[[4, 9]] = poison_value("f32")
    ok, reason = compare(_outputs(y, (0, 0, 0, 0)), REF, SPEC)  # k is also wrong: unwritten first
    assert not ok
    assert reason == f"{record.UNWRITTEN}: 2 of 24 elements of y still hold the poison; first y[4]"
    # the reference left that element unwritten too (e.g. padding): not a failure
    ref_y = REF["y"].copy()
    ref_y[[4, 9]] = poison_value("f32")
    assert compare(_outputs(y), _outputs(ref_y), SPEC) == (True, record.OK)
    # without a reference only the poison check runs
    assert compare(_outputs(y), None, SPEC)[0] is False
    assert compare(REF, None, SPEC) == (True, record.OK)


# --------------------------------------------------------------------------- check_launch


def _launch(**faults):
    """Host images after a simulated launch, with the named faults injected."""
    inputs = make_inputs(SPEC, 3)
    reference = {"acc": inputs["acc"] * 2, "y": np.full(24, 0.5, np.float32), "k": np.arange(4, dtype=np.int32)}
    out = {name: arr.copy() for name, arr in reference.items()}
    if faults.get("wrong"):
        out["k"][1] = 99
    if faults.get("unwritten"):
        out["y"][3] = poison_value("f32")
    after = {name: with_canary(arr) for name, arr in out.items()}
    after.update({p.name: inputs[p.name].copy() for p in SPEC.buffers() if not p.is_output})
    if faults.get("clobber"):
        after["idx"][17] += 1
    if faults.get("oob"):
        after["y"][SPEC.param("y").nbytes] = 0
    return inputs, after, reference


def test_check_launch_precedence():
    faults = {"oob": record.OUT_OF_BOUNDS, "clobber": record.INPUT_CLOBBERED,
              "unwritten": record.UNWRITTEN, "wrong": record.WRONG}
    active = dict.fromkeys(faults, True)
    for name, reason in faults.items():  # drop the winning fault each time
        ok, got = check_launch(SPEC, *_launch(**active))
        assert not ok and got.startswith(reason + ":"), (name, got)
        active[name] = False
    assert check_launch(SPEC, *_launch()) == (True, record.OK)


def test_check_launch_names_the_buffer():
    assert "after y " in check_launch(SPEC, *_launch(oob=True))[1]
    assert "first idx[17]" in check_launch(SPEC, *_launch(clobber=True))[1]


def test_check_launch_accepts_input_images_with_canary_and_nan_inputs():
    inputs, after, reference = _launch()
    inputs["x"][0] = np.nan
    after["x"] = with_canary(inputs["x"])
    assert check_launch(SPEC, inputs, after, reference) == (True, record.OK)
    after["x"][-1] = 0
    assert check_launch(SPEC, inputs, after, reference)[1].startswith(record.OUT_OF_BOUNDS)
    after["x"] = inputs["x"][:10]
    with pytest.raises(ValueError, match="x read back"):
        check_launch(SPEC, inputs, after, reference)


# --------------------------------------------------------------------------- reference, flags


def test_reference_outputs_for_gemm_are_a_times_b():
    spec = find_kernel("gemm_tile_4x6x8")
    inputs = make_inputs(spec, 0)
    ref = reference_outputs(spec, inputs)
    assert set(ref) == {"C"} and ref["C"].dtype == np.float32 and ref["C"].shape == (24,)
    expected = inputs["A"].reshape(4, 8).astype(np.float64) @ inputs["B"].reshape(8, 6).astype(np.float64)
    assert np.array_equal(ref["C"], expected.astype(np.float32).ravel())
    assert np.allclose(ref["C"], (inputs["A"].reshape(4, 8) @ inputs["B"].reshape(8, 6)).ravel(), rtol=1e-5)
    assert reference_outputs(SPEC, make_inputs(SPEC, 0)) is None  # names no reference


def test_speedup_flags():
    assert speedup_flags(1952, 697) == []
    assert speedup_flags(1952, 195.2) == []
    assert speedup_flags(1952, 150) == [SPEEDUP_REVIEW]
    assert speedup_flags(1952, 0) == [SPEEDUP_REVIEW]
    assert speedup_flags(None, 100) == [] and speedup_flags(float("inf"), 100) == []


# --------------------------------------------------------------------------- on a GPU


def _gate_on_gpu(spec, ptx: str, seed: int = 0) -> tuple[bool, str]:
    """What the worker does: poison and canary the outputs, launch once, judge the images."""
    import tempfile

    import cupy

    from harness.compile import compile_ptx

    result = compile_ptx(ptx)
    assert result.ok, result.error
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(result.cubin)
        f.flush()
        kernel = cupy.RawModule(path=f.name).get_function(spec.entry)
    inputs = make_inputs(spec, seed)
    dev = {}
    for p in spec.params:
        if p.kind == "scalar":
            dev[p.name] = inputs[p.name]
        else:
            host = poisoned(p) if p.role == "out" else inputs[p.name]
            dev[p.name] = cupy.asarray(with_canary(host) if p.is_output else host)
    kernel(spec.grid, spec.block, tuple(dev[p.name] for p in spec.params))
    cupy.cuda.Device().synchronize()
    after = {p.name: dev[p.name].get() for p in spec.buffers()}
    return check_launch(spec, inputs, after, reference_outputs(spec, inputs))


@pytest.mark.gpu
def test_gate_on_gpu_catches_broken_variants():
    spec = find_kernel("gemm_tile_4x6x8")
    base = spec.ptx_text()
    last_store = "st.global.f32 \t[%rd6+92], %f272;"
    assert last_store in base
    assert _gate_on_gpu(spec, base) == (True, record.OK)
    variants = {
        record.UNWRITTEN: base.replace(last_store, ""),
        record.OUT_OF_BOUNDS: base.replace(last_store, last_store.replace("+92", "+96")),
        record.WRONG: base.replace(last_store, last_store.replace("%f272", "%f1")),
    }
    for reason, ptx in variants.items():
        ok, got = _gate_on_gpu(spec, ptx)
        assert not ok and got.startswith(reason + ":"), got


def test_an_integer_output_of_minus_one_is_written_when_a_launch_on_zeros_wrote_it_too():
    """All ones is the int poison and also a value (3a + b = -1): an element is unwritten
    only where a second launch, on zeroed outputs, left zero."""
    spec = replace(find_kernel("relu"), params=(
        BufferParam("x", "i32", 4, "in"), BufferParam("y", "i32", 4, "out")))
    out = np.array([-1, 5, -1, 7], dtype=np.int32)
    ok, reason = compare({"y": out}, None, spec)
    assert not ok and reason.startswith(record.UNWRITTEN) and "2 of 4" in reason
    # The second launch wrote -1 at 0 and 2 again: both are values.
    assert compare({"y": out}, None, spec, refilled={"y": out.copy()}) == (True, record.OK)
    # It left element 2 at zero: never written, and named.
    again = np.array([-1, 5, 0, 7], dtype=np.int32)
    ok, reason = compare({"y": out}, None, spec, refilled={"y": again})
    assert not ok and "1 of 4" in reason and "y[2]" in reason
