"""The cheats' CPU side (cheats, the gate's stress inputs and guards): every cheat
edits its suite kernel and assembles with the real ptxas, the table is well formed, and
the numerics that decide the GPU outcome hold when simulated in NumPy (the tolerance-abuse
cheats pass the normal fills and fail the stress inputs; the legit atom/red saxpy passes
both). The GPU half is tests/test_cheats_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import cheats
from harness.gpu import gate, input_sets
from harness import record
from cheats import CHEATS, FINALIST, GATE, LEGIT, CheatError
from harness.compile import compile_ptx
from harness.gpu.finalist import MEMCHECK, RACECHECK, UNSAFE_NC, unsafe_nc_loads
from harness.gpu.buffers import RESERVED_BYTES, guard_ranges
from harness.kernels.suite import find_kernel, suite_names

from conftest import needs_ptxas

SEEDS = (11, 12, 13, 14, 15)  # the seeds tests/test_cheats_gpu.py checks with
ALL = CHEATS + LEGIT
_REASONS = {record.WRONG, record.UNWRITTEN, record.OUT_OF_BOUNDS, record.INPUT_CLOBBERED,
            record.LAUNCH_ERROR, record.TIMEOUT, MEMCHECK, UNSAFE_NC}


def _ids(table):
    return [c.name for c in table]


# ---------------------------------------------------------------------- the table


def test_the_table_has_twenty_cheats_with_known_reasons():
    assert len(CHEATS) >= 20 and len(LEGIT) >= 5
    assert len({c.name for c in ALL}) == len(ALL)
    for c in CHEATS:
        assert c.reason in _REASONS, c
        assert c.stage in (GATE, FINALIST) and c.exploit, c
        assert c.fallback in ("", RACECHECK), c
        assert c.kernel in suite_names(), c
        assert c.make.__doc__, f"{c.name}: the maker's docstring names the exploit and the reason"
    assert {c.reason for c in LEGIT} == {record.OK}
    assert len({c.exploit for c in CHEATS}) >= 12  # many classes, not one class many times


@needs_ptxas
@pytest.mark.parametrize("cheat", ALL, ids=_ids(ALL))
def test_every_variant_edits_its_kernel_and_assembles(cheat):
    spec = find_kernel(cheat.kernel)
    base = spec.ptx_text()
    ptx = cheat.make(base)
    assert ptx != base or cheat.launch(spec) is not None, f"{cheat.name} changes nothing"
    result = compile_ptx(ptx)
    assert result.ok, f"{cheat.name}: {result.error}"


def test_launch_cheats_give_a_launch_of_the_spec_entry():
    by = {c.name: c for c in ALL}
    relu = find_kernel("relu")
    half = by["launch: half the grid"].launch(relu)
    assert half.grid == (2048, 1, 1) and half.block == relu.block and half.entry == "relu"
    assert half.threads * 2 == relu.threads
    saxpy = find_kernel("saxpy")
    assert by["launch: half the block"].launch(saxpy).block == (128, 1, 1)
    assert by["stale output"].launch(relu) is None


def test_a_maker_fails_loudly_on_ptx_it_does_not_know():
    with pytest.raises(CheatError, match="bar"):
        cheats.removed_barrier(find_kernel("relu").ptx_text())
    with pytest.raises(CheatError):
        cheats.unsafe_softmax(find_kernel("gelu").ptx_text())


def test_atom_to_red_keeps_the_operands():
    ptx = cheats.atom_to_red(find_kernel("saxpy").ptx_text())
    assert "red.global.add.f32" in ptx and "atom." not in ptx and "fma.rn" not in ptx


# ---------------------------------------------------------------------- static .nc check


def test_static_check_flags_nc_on_a_written_buffer_only():
    saxpy, relu = find_kernel("saxpy").ptx_text(), find_kernel("relu").ptx_text()
    found = unsafe_nc_loads(cheats.nc_on_written(saxpy))
    assert len(found) == 1 and "saxpy_param_1" in found[0] and "ld.global.nc.f32" in found[0]
    assert unsafe_nc_loads(cheats.nc_on_readonly(relu)) == []


def test_static_check_passes_every_suite_baseline():
    for name in suite_names():
        assert unsafe_nc_loads(find_kernel(name).ptx_text()) == [], name


# ---------------------------------------------------------------------- stress inputs


def test_stress_seeds_are_negative_and_name_their_seed():
    assert input_sets.stress_seed(11) == -12 and input_sets.is_stress_seed(-12) and not input_sets.is_stress_seed(0)
    assert input_sets.seed_label(-12) == "stress inputs of seed 11" and input_sets.seed_label(11) == "seed 11"
    with pytest.raises(ValueError):
        input_sets.stress_seed(-1)


def test_stress_inputs_scale_only_normal_float_inputs():
    spec = find_kernel("layernorm")  # x normal, gamma uniform, beta normal, y out
    plain, stress = input_sets.make_inputs(spec, 11), input_sets.make_inputs(spec, input_sets.stress_seed(11))
    again = input_sets.stress_inputs(spec, 11)
    for name in plain:
        assert np.asarray(stress[name]).tobytes() == np.asarray(again[name]).tobytes(), name
    assert (stress["gamma"] == plain["gamma"]).all() and (stress["y"] == plain["y"]).all()
    x, sx = plain["x"], stress["x"]
    scaled = sx != x
    assert 0.10 < scaled.mean() < 0.15  # STRESS_FRACTION = 1/8
    ratio = sx[scaled] / x[scaled]
    assert set(np.unique(np.round(np.log2(ratio)))) <= set(range(1, input_sets.STRESS_MAX_EXPONENT + 1))
    assert np.abs(sx).max() > 100 * np.abs(x).max() / 2
    emb = find_kernel("embedding_gather")  # int indices stay valid
    idx = input_sets.make_inputs(emb, input_sets.stress_seed(3))["idx"]
    assert idx.min() >= 0 and idx.max() < 8192


def test_stress_compare_is_normwise_but_catches_overflow_and_keeps_exact_tolerances():
    spec = find_kernel("gelu")
    want = np.array([1000.0, 1.0, 1e-3, 0.0], np.float32)
    noisy = want + np.float32(5e-3)  # rounding-sized at the buffer's scale (rtol 1e-5 x 1000)
    assert gate.compare({"y": noisy}, {"y": want}, spec, stress=True) == (True, record.OK)
    assert not gate.compare({"y": noisy}, {"y": want}, spec)[0]
    nan = want.copy()
    nan[3] = np.nan
    ok, why = gate.compare({"y": nan}, {"y": want}, spec, stress=True)
    assert not ok and why.startswith(record.WRONG)
    relu = find_kernel("relu")  # tolerance 0: exact even on stress inputs
    assert not gate.compare({"y": want + np.float32(1e-3)}, {"y": want}, relu, stress=True)[0]


def _gelu(x):
    x = x.astype(np.float64)
    return (0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))).astype(np.float32)


def test_clamp_cheat_passes_normal_fills_and_fails_stress_inputs():
    spec = find_kernel("gelu")
    for seed in SEEDS:
        x = input_sets.make_inputs(spec, seed)["x"]
        assert np.abs(x).max() < 16  # 8 sigma: the clamp never bites on the normal fills
    x = input_sets.make_inputs(spec, input_sets.stress_seed(SEEDS[0]))["x"]
    ok, why = gate.compare({"y": _gelu(np.clip(x, -16, 16))}, {"y": _gelu(x)}, spec, stress=True)
    assert not ok and why.startswith(record.WRONG), why


def _softmax(x, safe: bool):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True) if safe else x)
        return (e * (np.float32(1) / e.sum(axis=1, keepdims=True, dtype=np.float32))).ravel()


def test_unsafe_softmax_passes_normal_fills_and_overflows_on_stress_inputs():
    spec = find_kernel("softmax")
    for seed in SEEDS[:2]:
        x = input_sets.make_inputs(spec, seed)["x"].reshape(1024, 1024)
        assert gate.compare({"y": _softmax(x, False)}, {"y": _softmax(x, True)}, spec)[0]
    x = input_sets.make_inputs(spec, input_sets.stress_seed(SEEDS[0]))["x"].reshape(1024, 1024)
    ok, why = gate.compare({"y": _softmax(x, False)}, {"y": _softmax(x, True)}, spec, stress=True)
    assert not ok and "nan" in why, why


def test_f16_inputs_fail_reduce_sum_tolerance():
    spec = find_kernel("reduce_sum")
    x = input_sets.make_inputs(spec, SEEDS[0])["x"].reshape(2048, 512)
    cheat = x.astype(np.float16).astype(np.float32).sum(axis=1, dtype=np.float32)
    ok, why = gate.compare({"partial": cheat}, {"partial": x.sum(axis=1, dtype=np.float32)}, spec)
    assert not ok and "differ in partial" in why


def test_round_toward_zero_fails_an_exact_tolerance():
    spec = find_kernel("triton_add")
    v = input_sets.make_inputs(spec, SEEDS[0])
    exact = v["x"].astype(np.float64) + v["y"].astype(np.float64)  # exact for two f32
    nearest = exact.astype(np.float32)
    overshot = np.abs(nearest.astype(np.float64)) > np.abs(exact)
    toward_zero = np.where(overshot, np.nextafter(nearest, np.float32(0)), nearest)
    assert overshot.mean() > 0.2  # a quarter of the sums round away from zero
    ok, why = gate.compare({"z": toward_zero}, {"z": nearest}, spec)
    assert not ok and "differ in z" in why


def test_atom_red_saxpy_rounding_passes_normal_and_stress_checks():
    """mul then add (two roundings) instead of fma (one), as the atom/red variants do."""
    spec = find_kernel("saxpy")
    for seed in (*SEEDS, input_sets.stress_seed(SEEDS[0])):
        v = input_sets.make_inputs(spec, seed)
        x, y, a = v["x"].astype(np.float64), v["y"].astype(np.float64), float(v["a"])
        fma = (a * x + y).astype(np.float32)
        two = ((a * x).astype(np.float32).astype(np.float64) + y).astype(np.float32)
        assert gate.compare({"y": two}, {"y": fma}, spec, stress=input_sets.is_stress_seed(seed))[0], seed


# ---------------------------------------------------------------------- guards


def test_guard_ranges_cover_the_arena_outside_the_buffers():
    arena = 64 << 20
    relu = [("x", RESERVED_BYTES, 4 << 20), ("y", RESERVED_BYTES + (4 << 20) + 512, 4 << 20)]
    y_end = RESERVED_BYTES + (8 << 20) + 512 + gate.CANARY_BYTES
    assert guard_ranges(relu, arena) == [("before x", 0, RESERVED_BYTES),
                                         ("before y", RESERVED_BYTES + (4 << 20) + 256,
                                          RESERVED_BYTES + (4 << 20) + 512),
                                         ("after y", y_end, arena)]
    tight = [("a", RESERVED_BYTES, 256), ("b", RESERVED_BYTES + 512, 64)]  # no gap before b
    assert [g[0] for g in guard_ranges(tight, arena)] == ["before a", "after b"]
    full = [("a", 0, arena - gate.CANARY_BYTES)]  # nothing left to guard
    assert guard_ranges(full, arena) == []


class _Dev:
    """A NumPy stand-in for a CuPy uint8 array at a device address (``data.ptr``)."""

    def __init__(self, host: np.ndarray, ptr: int):
        self.host = host
        self.data = type("Ptr", (), {"ptr": ptr, "memset_async": self._memset})()

    def _memset(self, value, size, stream):
        self.host[:size] = value

    def __getitem__(self, s: slice):
        return _Dev(self.host[s], self.data.ptr + (s.start or 0))

    def __ne__(self, value):
        return self.host != value

    def fill(self, value):
        self.host[:] = value

    def set(self, image):
        self.host[:] = image

    def get(self):
        return self.host.copy()


def _runner_with(kernel):
    """A harness.gpu.runner.Runner without CUDA: the arena is host memory and the "launch" runs
    ``kernel(x, y, arena_bytes, y_offset)`` in NumPy; the rest of check_seed is the real one."""
    from collections import OrderedDict

    from harness.gpu.runner import Runner

    spec = find_kernel("relu")
    runner = Runner.__new__(Runner)
    arena = _Dev(np.zeros(RESERVED_BYTES + 2 * ((4 << 20) + 512), np.uint8), 1 << 40)
    runner._arena, runner._seeds, runner.stream = arena, OrderedDict(), None
    offsets = {"x": RESERVED_BYTES, "y": RESERVED_BYTES + (4 << 20) + 512}
    bufs = {p.name: arena[slice(offsets[p.name], offsets[p.name] + p.nbytes + gate.CANARY_BYTES)]
            for p in spec.buffers()}
    runner.buffers = lambda s: bufs
    runner.function = lambda cubin, entry, shared_mem=0: None
    runner.judged_on_device = lambda s: False  # host arrays: the NumPy path of the gate
    runner.queues_checks = lambda s: False  # launched one at a time (the queued check:
    # tests/test_queued_checks.py)

    def baseline_outputs(request, seed):
        return {"y": np.maximum(runner.seed_data(spec, seed)[0]["x"], np.float32(0))}

    def run_checked(fn, s, seed, shape=None, images=None):
        for name, image in (images or runner.seed_data(s, seed)[1]).items():
            bufs[name].set(image)
        x = bufs["x"].host[:spec.param("x").nbytes].view(np.float32)
        kernel(x, bufs["y"].host[:spec.param("y").nbytes].view(np.float32), arena.host, offsets["y"])
        return {name: buf.get() for name, buf in bufs.items()}

    runner.baseline_outputs, runner.run_checked = baseline_outputs, run_checked
    request = type("Request", (), {"spec": spec, "cubin": b"", "launch": None})()
    return runner, request


def _relu_kernel(x, y, arena, y_offset):
    y[:] = np.maximum(x, 0)


def test_check_seed_passes_relu_and_sees_a_write_before_y():
    from harness.gpu.runner import _Failed

    runner, request = _runner_with(_relu_kernel)
    assert runner.check_seed(request, 11)["y"].shape == (1 << 20,)
    assert runner.check_seed(request, input_sets.stress_seed(11), "after timing")["y"].size == 1 << 20

    def underflow(x, y, arena, y_offset):
        _relu_kernel(x, y, arena, y_offset)
        arena[y_offset - 4:y_offset] = 0  # y[-1] = 0.0

    runner, request = _runner_with(underflow)
    with pytest.raises(_Failed, match=r"^out-of-bounds write: 4 bytes of the arena outside the kernel's buffers "
                       r"changed, before y \(arena \+0x5001fc\) \(seed 11\)"):
        runner.check_seed(request, 11)


def test_check_seed_sees_state_kept_far_past_the_last_buffer():
    """A variant keeping a remembered key 4 KiB past y's canary (result reuse): every byte
    of the arena outside the buffers is a guard."""
    from harness.gpu.runner import _Failed

    def remember(x, y, arena, y_offset):
        _relu_kernel(x, y, arena, y_offset)
        end = y_offset + y.nbytes + gate.CANARY_BYTES
        arena[end:end + 8] = 7

    runner, request = _runner_with(remember)
    with pytest.raises(_Failed, match=r"^out-of-bounds write: 8 bytes of the arena outside the "
                                      r"kernel's buffers changed, after y .*\(seed 11\)$"):
        runner.check_seed(request, 11)


def test_the_prefilled_launch_catches_a_variant_that_skips_when_its_outputs_are_written():
    """Stateless result reuse: the variant computes only where y still holds a NaN (the
    poison); on the launch whose outputs hold its own results on another seed it keeps
    them. The five poisoned launches all pass."""
    from harness.gpu.runner import _Failed

    def skip_if_written(x, y, arena, y_offset):
        if np.isnan(y).all():
            _relu_kernel(x, y, arena, y_offset)

    runner, request = _runner_with(skip_if_written)
    request.check_seeds = (11, 12, 13, 14, 15)
    for seed in request.check_seeds:
        runner.check_seed(request, seed)
    with pytest.raises(_Failed, match=r"^wrong result: .*\(seed 12, outputs pre-filled with its "
                                      r"own results on seed 11\)$"):
        runner.check(request)
    runner, request = _runner_with(_relu_kernel)
    request.check_seeds = (11, 12, 13, 14, 15)
    assert runner.check(request) == {"max_abs_err": 0.0, "max_rel_err": 0.0}


def test_check_seed_names_the_stress_inputs_it_failed_on():
    from harness.gpu.runner import _Failed

    runner, request = _runner_with(lambda x, y, arena, off: np.copyto(y, np.maximum(np.minimum(x, 16), 0)))
    assert runner.check_seed(request, 11)  # the clamp never bites on the normal fills
    with pytest.raises(_Failed, match=r"^wrong result: .* \(stress inputs of seed 11, after timing\)$"):
        runner.check_seed(request, input_sets.stress_seed(11), "after timing")
