"""Your own kernel on the GPU, from the specs evo writes itself (nvcc's histogram256 and
stencil, tests/data/init_kernel): the init-kernel skeletons and evo.from_call's specs pass
the gate as their own baselines and measure. (Written in session 15 after the device time
ran out: first run next session.)

Run with ``python3 -m pytest -m gpu -x -q tests/test_own_kernel_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data" / "init_kernel"


def _skeleton(tmp_path, entry: str, fill: dict[str, str] | None = None) -> Path:
    from harness.kernels.spec_ptx import spec_skeleton

    text = spec_skeleton((DATA / "hist.ptx").read_text(), entry, ptx_name=str(DATA / "hist.ptx"))
    for todo, value in (fill or {}).items():
        text = text.replace(todo, value, 1)
    path = tmp_path / f"{entry}.toml"
    path.write_text(text)
    return path


def test_the_stencil_skeleton_passes_the_gate_with_no_value_by_hand(tmp_path):
    from evo import api

    m = api.measure(str(_skeleton(tmp_path, "stencil")), backend="gpu", store=":memory:")
    assert m.valid, m.reason  # inout output: the borders it never writes keep their fill
    assert m.timer == "events" and m.cycles > 0


def test_the_histogram_skeleton_passes_with_its_two_values(tmp_path):
    from evo import api

    path = _skeleton(tmp_path, "histogram256", {'count = "TODO"': "count = 256",
                                                 'high = "TODO"': "high = 1"})
    m = api.measure(str(path), backend="gpu", store=":memory:")
    assert m.valid, m.reason


def test_from_call_with_cupy_arrays_measures_and_a_gene_keeps_it_right(tmp_path):
    import cupy as cp

    import evo

    n = 1 << 20
    x = cp.random.default_rng(3).uniform(-1, 1, n, dtype=cp.float32)
    y = cp.zeros(n, cp.float32)
    spec = evo.from_call(DATA / "hist.ptx", n // 256, 256, x, y, n, entry="stencil",
                         folder=tmp_path)
    assert [p.role for p in spec.buffers()] == ["in", "inout"]
    base = evo.measure(spec, backend="gpu", store=":memory:")
    assert base.valid, base.reason
    variant = evo.measure(spec, "vec_ld(width=4)", backend="gpu", store=":memory:")
    assert variant.valid, variant.reason


@pytest.mark.parametrize("entry, fill", [
    ("_Z9scale_addIfEvPT_PKS0_S0_x", {'value = "TODO"': "value = 2.0"}),
    ("_Z7half_sqP6__halfPKS_i", {'dtype = "TODO"': 'dtype = "f16"'})])
def test_cxx_kernels_with_mangled_names_measure_and_pass_the_finalist_check(tmp_path, entry, fill):
    """nvcc's C++ kernels (tests/data/init_kernel/cxx.cu: a template instance with an int64
    size, __half moved as .u16): their skeletons pass the gate and the finalist check,
    whose compute-sanitizer checks the kernel named by its mangled entry; with the index
    guard taken out and one block more, memcheck sees the writes past the output (so the
    name it was given is the kernel's: a name matching no kernel would check nothing)."""
    import re

    from evo import api
    from genomes.launch import Launch
    from harness.gpu.finalist import MEMCHECK, check_finalist
    from harness.kernels.spec import load_spec
    from harness.kernels.spec_ptx import spec_skeleton

    text = spec_skeleton((DATA / "cxx.ptx").read_text(), entry, ptx_name=str(DATA / "cxx.ptx"))
    for todo, value in fill.items():
        text = text.replace(todo, value)
    path = tmp_path / "k.toml"
    path.write_text(text)
    m = api.measure(str(path), backend="gpu", store=":memory:")
    assert m.valid, m.reason
    spec = load_spec(path)
    r = check_finalist(spec, spec.ptx_text())
    if not r.ran:
        pytest.skip(f"finalist check not run here: {r.reason}")
    assert r.ok, (r.reason, r.details)
    unguarded = re.sub(r"\n\s*@%p1 bra\s+\$L__BB\d+_2;", "\n", spec.ptx_text(), count=1)
    assert unguarded != spec.ptx_text()
    wider = Launch((spec.grid[0] + 1, 1, 1), spec.block, spec.entry)
    r = check_finalist(spec, unguarded, wider)
    assert not r.ok and r.reason.startswith(MEMCHECK), (r.reason, r.details)
