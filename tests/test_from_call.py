"""evo.from_call on nvcc's own PTX (tests/data/init_kernel: histogram256 and stencil, one
module) with NumPy arrays: the spec writes itself from the arrays and the PTX (dtypes,
counts, roles, fills, scalars), no value by hand; the wrong arguments are one clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_ptxas

import evo
from genomes.errors import EvoError

HIST = Path(__file__).parent / "data" / "init_kernel" / "hist.ptx"


def test_a_stencil_from_its_call(tmp_path):
    x = np.random.default_rng(0).uniform(-2, 3, 4096).astype(np.float32)
    y = np.zeros(4096, np.float32)
    spec = evo.from_call(HIST, 16, 256, x, y, np.int32(4096), entry="stencil", folder=tmp_path)
    xin, yout, n = spec.params
    assert (xin.dtype, xin.count, xin.role, xin.fill) == ("f32", 4096, "in", "uniform")
    assert xin.low == pytest.approx(float(x.min())) and xin.high == pytest.approx(float(x.max()))
    # written (its inner points only): inout, judged whole on fresh fills
    assert (yout.dtype, yout.count, yout.role) == ("f32", 4096, "inout")
    assert (n.kind, n.dtype, n.value) == ("scalar", "i32", 4096)  # .u32 in the PTX, an int32 here
    assert spec.grid == (16, 1, 1) and spec.block == (256, 1, 1) and spec.timing == "events"
    assert spec.spec_path.parent == tmp_path


def test_a_histogram_from_its_call_keeps_its_bins_in_range(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8)
    hist = np.zeros(256, np.uint32)
    spec = evo.from_call(str(HIST), (256,), (256,), data, hist, 1 << 16, entry="histogram256",
                         folder=tmp_path)
    d, h, n = spec.params
    assert (d.dtype, d.role, d.fill, d.low, d.high) == ("u8", "in", "int", 0, 256)
    assert (h.dtype, h.count, h.role, h.fill, h.value) == ("u32", 256, "inout", "const", 0)
    assert (n.dtype, n.value) == ("u32", 1 << 16)


@needs_ptxas
def test_the_spec_measures_like_any_other(tmp_path):
    x, y = np.ones(1024, np.float32), np.zeros(1024, np.float32)
    spec = evo.from_call(HIST, 4, 256, x, y, 1024, entry="stencil", folder=tmp_path)
    m = evo.measure(spec, backend="static", store=":memory:")
    assert m.valid is None and m.cycles  # a static estimate: not checked


@pytest.mark.parametrize("args, says", [
    ((np.ones(8, np.float32), np.zeros(8, np.float32)), "takes 3 parameters, got 2"),
    ((np.ones(8, np.float32), 12345, 8), "is a pointer the kernel reads or writes through"),
    ((np.ones(8, np.float32), np.zeros(8, np.float32), np.ones(3)), "got an array"),
    ((np.ones(8, np.float64), np.zeros(8, np.float32), 8), "accesses it as f32"),
    ((np.ones(8, np.complex64), np.zeros(8, np.float32), 8), "holds complex64"),
    ((np.ones(8, np.float32), np.zeros(8, np.float32), 2.5), "integer, got 2.5"),
    ((np.ones((4, 4), np.float32).T, np.zeros(16, np.float32), 16), "not contiguous"),
])
def test_the_wrong_arguments_are_one_clear_error(args, says, tmp_path):
    with pytest.raises(EvoError, match=says):
        evo.from_call(HIST, 1, 256, *args, entry="stencil", folder=tmp_path)


def test_a_module_of_several_kernels_needs_the_entry(tmp_path):
    with pytest.raises(EvoError, match="2 entries .*name one with entry="):
        evo.from_call(HIST, 1, 32, np.ones(8, np.float32), np.ones(8, np.float32), 8)


class _TorchLike:
    """What from_call reads of a torch.Tensor (dtype, numel, detach().cpu().numpy(),
    is_contiguous()), over a NumPy array: the PyTorch path without PyTorch installed."""

    def __init__(self, array, dtype: str):
        self.array, self.dtype = array, dtype

    def numel(self):
        return self.array.size

    def detach(self):
        return self

    def float(self):
        return _TorchLike(self.array.astype(np.float32), "torch.float32")

    def cpu(self):
        return self

    def numpy(self):
        return self.array

    def is_contiguous(self):
        return True


def test_tensors_are_read_through_their_own_interface(tmp_path):
    x = _TorchLike(np.linspace(-1, 1, 1024, dtype=np.float32), "torch.float32")
    y = _TorchLike(np.zeros(1024, np.float32), "torch.float32")
    spec = evo.from_call(HIST, 4, 256, x, y, 1024, entry="stencil", folder=tmp_path)
    assert (spec.params[0].dtype, spec.params[0].low, spec.params[0].high) == ("f32", -1.0, 1.0)
