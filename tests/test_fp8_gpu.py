"""fp8 on the GPU: nvcc fp8 kernels (e4m3 out, e5m2 in) checked and timed; a quantize off
by half rejected; a Triton kernel called with float8 torch tensors made into a spec that
measures; Inductor's fp8 kernels of a program captured as specs.

Run with ``python3 -m pytest -m gpu -x -q tests/test_fp8_gpu.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import record
from harness.kernels.spec import load_spec

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data" / "fp8"
ROOT = str(Path(__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.mark.parametrize("name, gene", [("quantize_e4m3", "vec_st(width=4)"),
                                        ("dequantize_e5m2", "cache_ld(policy=cs)")])
def test_nvcc_fp8_kernels_are_checked_and_timed_on_the_gpu(name, gene):
    from evo import api

    spec = load_spec(DATA / f"{name}.toml")
    base = api.measure(spec, backend="gpu", store=":memory:")
    assert base.valid and base.cycles > 0 and base.notes["judged_on"] == "gpu", base.reason
    variant = api.measure(spec, gene, backend="gpu", store=":memory:")
    assert variant.valid, variant.reason


def test_a_quantize_off_by_half_is_rejected_as_wrong():
    """x * inv_scale made x * inv_scale * 1.5: e4m3 outputs 50 % off, past one unit (12.5 %)."""
    from harness.compile import compile_ptx
    from harness.gpu.worker import GpuWorker, MeasureRequest

    spec = load_spec(DATA / "quantize_e4m3.toml")
    ptx = spec.ptx_text()
    product = "\tmul.f32 \t%f2, %f4, %f1;\n"
    assert ptx.count(product) == 1
    wrong = ptx.replace(product, product + "\tmul.f32 \t%f2, %f2, 0f3FC00000;\n")
    with GpuWorker(0) as worker:
        judged = worker.measure(MeasureRequest(
            spec=spec, cubin=compile_ptx(wrong).cubin, baseline_cubin=compile_ptx(ptx).cubin,
            check_seeds=(11, 12, 13, 14, 15), timing_seed=99, timeout_s=60.0))
    assert not judged.valid and judged.reason.startswith(record.WRONG), judged.reason


TRITON_FP8 = '''
import sys
import torch, triton, triton.language as tl
from evo import api

@triton.jit
def requantize(q, y, scale, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(q + i, mask=m).to(tl.float32) * scale
    tl.store(y + i, v.to(tl.float8e4nv), mask=m)

n = 1 << 20
gen = torch.Generator(device="cuda").manual_seed(0)
q = (8 * torch.randn(n, device="cuda", generator=gen)).to(torch.float8_e5m2)
y = torch.empty(n, device="cuda", dtype=torch.float8_e4m3fn)
spec = api.from_triton_call(requantize, n // 1024, q, y, 0.5, n, BLOCK=1024,
                            name="triton_requantize_fp8", folder=sys.argv[1])
print("SPEC", spec.spec_path)
'''


def test_a_triton_call_on_float8_tensors_becomes_a_spec_that_measures(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(TRITON_FP8)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], text=True,
                          capture_output=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = load_spec(proc.stdout.split("SPEC ", 1)[1].split()[0])
    assert [p.dtype for p in spec.buffers()][:2] == ["f8e5m2", "f8e4m3"]
    assert spec.param("q").fill == "uniform" and spec.param("y").role == "inout"
    from evo import api

    base = api.measure(spec, backend="gpu", store=":memory:")
    assert base.valid, base.reason
    variant = api.measure(spec, "vec_ld(width=4)", backend="gpu", store=":memory:")
    assert variant.valid, variant.reason


def test_inductors_fp8_kernels_are_captured_as_specs(tmp_path):
    """tests/data/programs/fp8_linear.py: Inductor's quantize kernels write float8_e4m3fn."""
    from evo.model.capture import read

    proc = subprocess.run([sys.executable, "-m", "evo.cli", "capture", "--out", str(tmp_path / "cap"),
                           "--", "python", str(Path(ROOT) / "tests/data/programs/fp8_linear.py"), "4"],
                          text=True, capture_output=True, timeout=300, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = read(tmp_path / "cap")
    assert not m["skipped"], m["skipped"]
    fp8 = [k for k in m["kernels"] if "f8e4m3" in {p.dtype for p in k["kernel_spec"].buffers()}]
    assert len(fp8) >= 2, [k["name"] for k in m["kernels"]]
    from evo import api

    for k in fp8:
        assert api.measure(k["kernel_spec"], backend="gpu", store=":memory:").valid
