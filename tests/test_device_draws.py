"""Inputs drawn on the GPU (``harness.gpu.input_sets._DeviceDraws``), with a stand-in for
CuPy whose generator is NumPy's legacy RandomState: the precision each buffer is drawn in,
and one generator per thread and GPU, seeded again per set, giving what a fresh one gives."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from harness.gpu import input_sets
from harness.kernels.spec import KernelSpec, read_param


def test_a_gpu_draws_narrow_floats_in_float32_and_wide_ones_in_float64():
    """On the GPU (any ``xp`` but NumPy) floats of 32 bits or fewer are drawn in float32
    (half the bytes of float64 draws); f64 buffers and every NumPy draw stay float64."""
    from harness.kernels.reference import draw_precision, random_inputs
    from harness.kernels.spec import numpy_dtype

    asked = {}

    class Draws:  # records the dtype each draw was asked in, draws it with NumPy
        def __init__(self):
            self.rng = np.random.default_rng(0)

        def normal(self, loc, scale, size, dtype=np.float64):
            asked[size] = np.dtype(dtype)
            return self.rng.normal(loc, scale, size).astype(dtype)

        uniform = normal

    params = tuple(read_param({"name": f"x{i}", "kind": "buffer", "dtype": dt, "count": 10 + i,
                               "role": "in", "fill": fill}, "t.toml")
                   for i, (dt, fill) in enumerate([("f32", "normal"), ("f16", "uniform"),
                                                   ("f64", "normal"), ("f64", "uniform")]))
    s = KernelSpec(name="k", entry="k", ptx_path=Path("k.ptx"), grid=(1, 1, 1), block=(1, 1, 1),
                   params=params)
    device = types.SimpleNamespace(zeros=np.zeros, full=np.full)  # "not NumPy"
    got = random_inputs(s, Draws(), device)
    assert asked == {10: np.float32, 11: np.float32, 12: np.float64, 13: np.float64}
    assert [got[f"x{i}"].dtype for i in range(4)] == [np.float32, np.float16, np.float64, np.float64]
    asked.clear()
    random_inputs(s, Draws(), np)
    assert set(asked.values()) == {np.dtype(np.float64)}  # NumPy's draws as they always were
    from harness.dtypes import encodings
    for dt in ("bf16", "f8e4m3", "f8e5m2"):
        assert draw_precision(numpy_dtype(dt), encodings.of(dt)) == {"dtype": np.float32}, dt
    assert draw_precision(np.dtype(np.int32), None) == {}



class _FakeState(np.random.RandomState):
    made = 0

    def __init__(self, seed, method=None):
        _FakeState.made += 1
        super().__init__(seed % 2**32)

    def seed(self, seed):
        super().seed(seed % 2**32)

    def normal(self, loc, scale, size, dtype=float):
        return super().normal(loc, scale, size).astype(dtype)


def _fake_cupy(device: int = 0):
    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: device),
                                 curand=types.SimpleNamespace(CURAND_RNG_PSEUDO_PHILOX4_32_10=5))
    return types.SimpleNamespace(cuda=cuda, random=types.SimpleNamespace(RandomState=_FakeState))


def test_one_generator_per_gpu_seeded_again_gives_a_fresh_generators_numbers():
    cp = _fake_cupy()
    _FakeState.made = 0
    first = input_sets._DeviceDraws(cp, 11).normal(0, 1, 6)
    second = input_sets._DeviceDraws(cp, 12).normal(0, 1, 6)
    again = input_sets._DeviceDraws(cp, 11)
    assert _FakeState.made == 1  # made once, seeded three times
    np.testing.assert_array_equal(again.normal(0, 1, 6), first)
    np.testing.assert_array_equal(second, _FakeState(12).normal(0, 1, 6))
    other_gpu = input_sets._DeviceDraws(_fake_cupy(device=1), 11)
    assert _FakeState.made == 3  # another GPU's own (and the reference just above)
    np.testing.assert_array_equal(other_gpu.normal(0, 1, 6), first)


def test_a_draw_from_a_generator_seeded_since_for_another_set_raises():
    cp = _fake_cupy(device=7)
    stale = input_sets._DeviceDraws(cp, 3)
    input_sets._DeviceDraws(cp, 4)
    with pytest.raises(RuntimeError, match="seeded for another set"):
        stale.normal(0, 1, 4)
