"""bf16 buffers (harness.dtypes.bf16): kept as bits, converted as ml_dtypes' independent bfloat16
converts; specs, fills, the gate's checks and references on bf16, and an nvcc-compiled
bf16 kernel (tests/data/bf16) through ptxas and the static backend."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from harness.dtypes import bf16
from harness.gpu import gate, input_sets
from harness import record
from harness.kernels.spec import SpecError, load_spec, read_param

DATA = Path(__file__).parent / "data" / "bf16"


@pytest.fixture(scope="module")
def spec():
    return load_spec(DATA / "bias_gelu.toml")


def _edges() -> np.ndarray:
    rng = np.random.default_rng(5)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-45, 3.3895e38, 3.4e38,
               -3.4e38, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 65504.0]  # ties round to even
    return np.concatenate([np.array(special, np.float32), rng.normal(0, 1, 50_000).astype(np.float32),
                           (rng.standard_cauchy(50_000) * 1e30).astype(np.float32),
                           rng.integers(0, 2 ** 32, 50_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])


def test_rounding_to_bf16_matches_ml_dtypes_bit_for_bit():
    x = _edges()
    ours = bf16.from_float(x)
    with np.errstate(invalid="ignore"):  # NaN to bf16 warns in ml_dtypes
        theirs = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(x)
    assert ours.dtype == np.uint16
    assert np.array_equal(ours[~nan], theirs[~nan])
    assert np.isnan(bf16.to_float(ours[nan])).all()  # a NaN stays a NaN (its payload is not kept)


def test_bf16_bits_read_back_as_ml_dtypes_reads_them():
    bits = np.arange(2 ** 16, dtype=np.uint16)
    ours, theirs = bf16.to_float(bits), bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_a_bf16_spec_reads_with_two_byte_buffers_and_bf16_tolerance(spec):
    assert spec.param("x").nbytes == 2 * spec.param("x").count
    tol = spec.tolerance_for(spec.param("y"))
    assert (tol.rtol, tol.atol) == bf16.TOLERANCE  # the spec's 1e-5 would fail a 1-ulp change


def test_a_bf16_scalar_is_refused_with_the_reason():
    with pytest.raises(SpecError, match="bf16 scalar is not supported: pass it as f32"):
        read_param({"name": "alpha", "kind": "scalar", "dtype": "bf16", "value": 1.0}, "t.toml")


@pytest.mark.parametrize("fill, opts, check", [
    ("normal", {"mean": 2.0, "std": 0.5}, lambda v: abs(v.mean() - 2) < 0.02 and abs(v.std() - 0.5) < 0.02),
    ("uniform", {"low": -3.0, "high": -1.0}, lambda v: v.min() >= -3 and v.max() <= -1 and v.std() > 0.5),
    ("int", {"low": 0, "high": 7}, lambda v: set(np.unique(v)) == set(range(7))),
    ("const", {"value": 0.1}, lambda v: (v == np.float32(0.10009765625)).all()),  # 0.1 in bf16
])
def test_fills_draw_bf16_values_as_the_fill_says(fill, opts, check):
    from harness.kernels.spec import KernelSpec

    p = read_param({"name": "x", "kind": "buffer", "dtype": "bf16", "count": 20_000,
                    "role": "in", "fill": fill, **opts}, "t.toml")
    s = KernelSpec(name="k", entry="k", ptx_path=Path("k.ptx"), grid=(1, 1, 1), block=(1, 1, 1),
                   params=(p,))
    x = input_sets.make_inputs(s, 3)["x"]
    assert x.dtype == np.uint16
    assert check(gate.values(x, "bf16")), gate.values(x, "bf16")[:8]


def test_other_inputs_differ_in_every_bf16_element_and_stress_inputs_stay_finite(spec):
    a = input_sets.make_inputs(spec, 4)
    b = input_sets.make_inputs(spec, 4 + input_sets.OTHER_INPUTS)
    for name in ("x", "bias"):
        assert (a[name] != b[name]).all()
        assert np.isfinite(gate.values(b[name], "bf16")).all()
    stress = gate.values(input_sets.make_inputs(spec, input_sets.stress_seed(4))["x"], "bf16")
    plain = gate.values(a["x"], "bf16")
    assert np.isfinite(stress).all() and np.abs(stress).max() > 50 * np.abs(plain).max()


def _images(spec, seed: int, y: np.ndarray) -> tuple[dict, dict]:
    inputs = input_sets.make_inputs(spec, seed)
    after = {p.name: gate.with_canary(y if p.name == "y" else inputs[p.name]) for p in spec.buffers()}
    return inputs, after


def _gelu_bits(inputs) -> np.ndarray:
    x = gate.values(inputs["x"], "bf16").astype(np.float64)
    v = x + np.tile(gate.values(inputs["bias"], "bf16"), x.size // 1024)
    y = 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v ** 3)))
    return bf16.from_float(y.astype(np.float32))


def test_the_gate_judges_bf16_outputs_by_value_within_bf16_tolerance(spec):
    inputs = input_sets.make_inputs(spec, 9)
    want = {"y": _gelu_bits(inputs)}
    one_ulp = want["y"] + np.uint16(1)  # the next bf16 up (positive or negative alike)
    for y, verdict in [(want["y"], record.OK), (one_ulp, record.OK)]:
        ok, reason = gate.check_launch(spec, inputs, _images(spec, 9, y)[1], want)
        assert (ok, reason) == (True, verdict)
    off = bf16.from_float(gate.values(want["y"], "bf16") * np.float32(1.05) + np.float32(0.01))
    ok, reason = gate.check_launch(spec, inputs, _images(spec, 9, off)[1], want)
    assert not ok and reason.startswith(record.WRONG) and "differ in y" in reason
    unwritten = want["y"].copy()
    unwritten[7] = gate.poisoned(spec.param("y"))[0]
    ok, reason = gate.check_launch(spec, inputs, _images(spec, 9, unwritten)[1], want)
    assert not ok and reason.startswith(record.UNWRITTEN) and "y[7]" in reason


def test_a_reference_gets_bf16_inputs_as_floats_and_its_outputs_become_bits(spec, monkeypatch):
    import dataclasses

    from harness.kernels import reference

    seen = {}

    def bias_gelu(inputs, s):
        seen["x"] = inputs["x"].dtype
        x = inputs["x"].astype(np.float64) + np.tile(inputs["bias"], inputs["x"].size // 1024)
        return {"y": (0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))).astype(np.float32)}

    monkeypatch.setitem(reference.REFERENCES, "bias_gelu_test", bias_gelu)
    with_ref = dataclasses.replace(spec, reference="bias_gelu_test")
    inputs = input_sets.make_inputs(with_ref, 2)
    out = input_sets.reference_outputs(with_ref, inputs)
    assert seen["x"] == np.float32 and out["y"].dtype == np.uint16
    assert np.array_equal(out["y"], _gelu_bits(inputs))


def test_an_nvcc_bf16_kernel_and_a_gene_go_through_ptxas_and_the_static_backend(spec, tmp_path):
    from evo import api

    base = api.measure(spec, backend="static", store=":memory:")
    assert base.valid is None and base.timer == "static" and base.cycles, base.reason  # unchecked
    variant = api.measure(spec, "vec_ld(width=2)", backend="static", store=":memory:")
    assert variant.valid is None and variant.cycles, variant.reason

