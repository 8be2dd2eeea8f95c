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
