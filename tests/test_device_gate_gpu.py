"""The gate on the GPU: kernels of 64M elements are judged where their buffers are
(``harness.gpu.runner.DEVICE_CHECK_BYTES``), with the same reasons as on the host, and in seconds
rather than the tens of seconds the host's copies and comparisons took.

Run with ``python3 -m pytest -m gpu -x -q`` on a machine with an NVIDIA GPU and CuPy.
"""

from __future__ import annotations

import pytest

from genomes.launch import Launch
from harness import record
from harness.compile import compile_ptx
from harness.kernels.suite import find_kernel
from harness.gpu.worker import GpuWorker, MeasureRequest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def worker():
    with GpuWorker(0) as w:
        yield w


def _measure(worker, ptx: str, launch=None, reference=False):
    spec = find_kernel("relu_dram")
    base = compile_ptx(spec.ptx_text()).cubin
    cubin = compile_ptx(ptx).cubin
    return worker.measure(MeasureRequest(spec=spec, cubin=cubin, baseline_cubin=base,
                                         check_seeds=(1, 2, 3, 4, 5), timing_seed=9,
                                         launch=launch, check_reference=reference,
                                         timeout_s=300))


def _relu(old: str, new: str) -> str:
    text = find_kernel("relu_dram").ptx_text()
    assert old in text
    return text.replace(old, new)


def test_the_baseline_passes_on_the_gpu_with_its_numpy_reference(worker):
    m = _measure(worker, find_kernel("relu_dram").ptx_text(), reference=True)
    assert m.valid, m.reason
    assert m.notes["judged_on"] == "gpu"
    print(f"relu_dram baseline with reference: {m.seconds:.1f} s, {m.cycles:.0f} cycles")
    again = _measure(worker, find_kernel("relu_dram").ptx_text())
    assert again.valid, again.reason
    print(f"relu_dram variant (fresh seeds): {again.seconds:.1f} s")


def test_a_wrong_value_is_rejected_with_its_error(worker):
    m = _measure(worker, _relu("mov.f32 \t%f2, 0f00000000;", "mov.f32 \t%f2, 0f3A83126F;"))
    assert not m.valid and m.reason.startswith(record.WRONG), m.reason
    assert "max abs error" in m.reason


def test_a_write_past_the_end_is_rejected(worker):
    spec = find_kernel("relu_dram")
    more = Launch((spec.grid[0] + 1, 1, 1), spec.block, spec.entry)
    m = _measure(worker, _relu("setp.ge.u32 \t%p1, %r1, %r2;", "setp.gt.u32 \t%p1, %r1, %r2;"),
                 launch=more)
    assert not m.valid and m.reason.startswith(record.OUT_OF_BOUNDS), m.reason


def test_a_write_to_the_input_is_rejected(worker):
    m = _measure(worker, _relu("cvta.to.global.u64 \t%rd6, %rd2;", "cvta.to.global.u64 \t%rd6, %rd1;"))
    assert not m.valid and m.reason.startswith(record.INPUT_CLOBBERED), m.reason


def test_a_launch_that_misses_elements_is_rejected(worker):
    spec = find_kernel("relu_dram")
    half = Launch((spec.grid[0] // 2, 1, 1), spec.block, spec.entry)
    m = _measure(worker, spec.ptx_text(), launch=half)
    assert not m.valid and m.reason.startswith(record.UNWRITTEN), m.reason
