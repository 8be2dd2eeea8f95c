"""fp8 buffers (harness.dtypes.fp8, e4m3 and e5m2): kept as bits, converted as ml_dtypes'
independent float8_e4m3fn and float8_e5m2 convert; specs, fills, the gate's checks on
fp8, and two nvcc-compiled fp8 kernels (tests/data/fp8) through ptxas and the static
backend."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from harness.dtypes import encodings, fp8
from harness.gpu import gate, input_sets
from harness import record
from harness.kernels.spec import SpecError, load_spec, read_param

DATA = Path(__file__).parent / "data" / "fp8"
FORMATS = [(fp8.E4M3, ml_dtypes.float8_e4m3fn), (fp8.E5M2, ml_dtypes.float8_e5m2)]


def _edges(fmt) -> np.ndarray:
    rng = np.random.default_rng(8)
    ladder = fmt.to_float(np.arange(128, dtype=np.uint8))
    ladder = ladder[np.isfinite(ladder)]
    ties = (ladder[1:] + ladder[:-1]) / 2  # exactly between two neighbours: to the even one
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, fmt.MAX, -fmt.MAX,
                        fmt.MAX * 1.03, fmt.MAX * 1.1, 1e6, 3e38], np.float32)
    scales = [rng.normal(0, s, 20_000) for s in (1e-5, 1e-2, 1.0, 30.0, fmt.MAX / 4)]
    return np.concatenate([special, ties, -ties, *[x.astype(np.float32) for x in scales]])


@pytest.mark.parametrize("fmt, theirs", FORMATS, ids=["e4m3", "e5m2"])
def test_fp8_bits_read_back_as_ml_dtypes_reads_them(fmt, theirs):
    bits = np.arange(256, dtype=np.uint8)
    ours, want = fmt.to_float(bits), bits.view(theirs).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), want[~nan].view(np.uint32))  # -0.0 too
    assert fmt.MAX == {"f8e4m3": 448.0, "f8e5m2": 57344.0}[fmt.name]


@pytest.mark.parametrize("fmt, theirs", FORMATS, ids=["e4m3", "e5m2"])
def test_rounding_to_fp8_matches_ml_dtypes_bit_for_bit(fmt, theirs):
    x = _edges(fmt)
    ours = fmt.from_float(x)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(theirs).view(np.uint8)
    nan = np.isnan(want.view(theirs).astype(np.float32))
    assert ours.dtype == np.uint8
    assert np.array_equal(np.isnan(fmt.to_float(ours)), nan)  # overflow: NaN for e4m3 alone
    assert np.array_equal(ours[~nan], want[~nan])


@pytest.mark.parametrize("fmt", [fp8.E4M3, fp8.E5M2], ids=["e4m3", "e5m2"])
def test_a_neighbour_differs_by_one_pattern_and_makes_no_nan(fmt):
    bits = np.arange(256, dtype=np.uint8)
    near = fmt.neighbour(bits)
    assert (near != bits).all() and (np.abs(near.astype(int) - bits) == 1).all()
    made = np.isnan(fmt.to_float(near)) & ~np.isnan(fmt.to_float(bits))
    assert not made.any(), bits[made]


def test_fp8_specs_read_with_one_byte_buffers_and_their_formats_tolerance():
    quant, dequant = load_spec(DATA / "quantize_e4m3.toml"), load_spec(DATA / "dequantize_e5m2.toml")
    assert quant.param("y").nbytes == quant.param("y").count
    tol = quant.tolerance_for(quant.param("y"))
    assert (tol.rtol, tol.atol) == fp8.E4M3.TOLERANCE == (0.125, 2.0 ** -9)
    assert dequant.tolerance_for(dequant.param("y")) == dequant.tolerance  # an f32 output: the spec's
    assert encodings.of("f8e5m2") is fp8.E5M2 and encodings.of("f32") is None


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_an_fp8_scalar_is_refused_with_the_reason(dtype):
    with pytest.raises(SpecError, match=f"{dtype} scalar is not supported: pass it as f32"):
        read_param({"name": "s", "kind": "scalar", "dtype": dtype, "value": 1.0}, "t.toml")


@pytest.mark.parametrize("dtype, fill, opts, check", [
    ("f8e4m3", "normal", {"mean": 0.0, "std": 2.0}, lambda v: abs(v.std() - 2) < 0.1),
    ("f8e5m2", "uniform", {"low": -1000.0, "high": 1000.0},
     lambda v: v.min() >= -1024 and v.max() <= 1024 and v.std() > 400),
    ("f8e4m3", "const", {"value": 0.1}, lambda v: (v == np.float32(0.1015625)).all()),  # 0.1 in e4m3
])
def test_fills_draw_fp8_values_as_the_fill_says(dtype, fill, opts, check):
    from harness.kernels.spec import KernelSpec

    p = read_param({"name": "x", "kind": "buffer", "dtype": dtype, "count": 20_000,
                    "role": "in", "fill": fill, **opts}, "t.toml")
    s = KernelSpec(name="k", entry="k", ptx_path=Path("k.ptx"), grid=(1, 1, 1), block=(1, 1, 1),
                   params=(p,))
    x = input_sets.make_inputs(s, 3)["x"]
    assert x.dtype == np.uint8
    v = gate.values(x, dtype)
    assert np.isfinite(v).all() and check(v), v[:8]


def test_other_inputs_differ_in_every_fp8_element_and_stress_inputs_stay_finite():
    spec = load_spec(DATA / "dequantize_e5m2.toml")
    a, b = input_sets.make_inputs(spec, 4), input_sets.make_inputs(spec, 4 + input_sets.OTHER_INPUTS)
    assert (a["q"] != b["q"]).all() and np.isfinite(gate.values(b["q"], "f8e5m2")).all()
    import dataclasses

    quant = load_spec(DATA / "quantize_e4m3.toml").params
    p = read_param({"name": "x", "kind": "buffer", "dtype": "f8e4m3", "count": 50_000, "role": "in",
                    "std": 8.0}, "t.toml")
    spec = dataclasses.replace(load_spec(DATA / "quantize_e4m3.toml"), params=(p,) + quant[1:])
    stress = gate.values(input_sets.make_inputs(spec, input_sets.stress_seed(4))["x"], "f8e4m3")
    plain = gate.values(input_sets.make_inputs(spec, 4)["x"], "f8e4m3")
    assert np.isfinite(stress).all()  # clipped to 448, not rounded past it to NaN
    assert np.abs(stress).max() == fp8.E4M3.MAX > 4 * np.abs(plain).max()


def _quantized(inputs, spec) -> np.ndarray:
    """What quantize_e4m3 writes: x * inv_scale, saturated to e4m3's range, rounded."""
    scaled = inputs["x"].astype(np.float32) * np.float32(spec.param("inv_scale").value)
    return fp8.E4M3.from_float(np.clip(scaled, -fp8.E4M3.MAX, fp8.E4M3.MAX))


def test_the_gate_judges_fp8_outputs_by_value_within_one_unit_in_the_last_place():
    spec = load_spec(DATA / "quantize_e4m3.toml")
    inputs = input_sets.make_inputs(spec, 9)
    want = {"y": _quantized(inputs, spec)}

    def judged(y):
        after = {p.name: gate.with_canary(y if p.name == "y" else inputs[p.name]) for p in spec.buffers()}
        return gate.check_launch(spec, inputs, after, want)

    assert judged(want["y"]) == (True, record.OK)
    assert judged(fp8.E4M3.neighbour(want["y"])) == (True, record.OK)  # one rounding apart
    y = want["y"].copy()
    bottom = ((y & 0x07) == 0) & ((y & 0x78) > 0x08) & ((y & 0x78) < 0x70)  # a binade's first value
    at = int(np.flatnonzero(bottom)[0])
    y[at] += np.uint8(2)  # two units up in magnitude there: 25 % off, the tolerance is 12.5 %
    ok, reason = judged(y)
    assert not ok and reason.startswith(record.WRONG) and f"y[{at}]" in reason, reason
    unwritten = want["y"].copy()
    unwritten[7] = gate.poisoned(spec.param("y"))[0]
    ok, reason = judged(unwritten)
    assert not ok and reason.startswith(record.UNWRITTEN) and "y[7]" in reason


@pytest.mark.parametrize("name, gene", [("quantize_e4m3", "vec_st(width=4)"),
                                        ("dequantize_e5m2", "vec_ld(width=4)")])
def test_nvcc_fp8_kernels_and_a_gene_go_through_ptxas_and_the_static_backend(name, gene):
    from evo import api

    spec = load_spec(DATA / f"{name}.toml")
    base = api.measure(spec, backend="static", store=":memory:")
    assert base.valid is None and base.timer == "static" and base.cycles, base.reason
    variant = api.measure(spec, gene, backend="static", store=":memory:")
    assert variant.valid is None and variant.cycles, variant.reason
