"""bf16 on the GPU: an nvcc bf16 kernel checked, timed and evolved; a wrong bf16 variant
rejected; a Triton kernel called with bf16 torch tensors made into a spec and measured.

Run with ``python3 -m pytest -m gpu -x -q tests/test_bf16_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import record
from harness.kernels.spec import load_spec

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data" / "bf16"


@pytest.fixture(scope="module")
def spec():
    return load_spec(DATA / "bias_gelu.toml")


def test_an_nvcc_bf16_kernel_is_checked_and_timed_on_the_gpu(spec):
    from evo import api

    base = api.measure(spec, backend="gpu", store=":memory:")
    assert base.valid and base.timer == "events" and base.cycles > 0, base.reason
    assert base.notes["judged_on"] == "gpu"
    variant = api.measure(spec, "cache_ld(policy=cs)", backend="gpu", store=":memory:")
    assert variant.valid, variant.reason


def test_a_bf16_variant_off_by_ten_percent_is_rejected_as_wrong(spec, tmp_path):
    """gelu's 0.5 (0f3F000000) made 0.55: outputs 10 % off, past bf16's 1.6 % tolerance."""
    from evo import api

    ptx = spec.ptx_text()
    assert ptx.count("0f3F000000") == 1
    wrong = api.kernel(ptx.replace("0f3F000000", "0f3F0CCCCD"), grid=spec.grid, block=spec.block,
                       params=spec.params, name="bias_gelu_wrong", folder=tmp_path)
    m = api.measure(wrong, backend="gpu", store=":memory:")
    assert m.valid  # its own baseline: consistent with itself
    import dataclasses

    from harness.compile import compile_ptx
    from harness.gpu.worker import GpuWorker, MeasureRequest

    with GpuWorker(0) as worker:
        judged = worker.measure(MeasureRequest(
            spec=spec, cubin=compile_ptx(wrong.ptx_text()).cubin,
            baseline_cubin=compile_ptx(ptx).cubin, check_seeds=(11, 12, 13, 14, 15),
            timing_seed=99, timeout_s=60.0))
    assert not judged.valid and judged.reason.startswith(record.WRONG), judged.reason
    assert dataclasses.asdict(spec.tolerance_for(spec.param("y")))["rtol"] == 1.6e-2


def test_a_short_evolution_of_the_bf16_kernel_keeps_only_correct_variants(spec, tmp_path):
    from evo import api

    results = api.run([spec], generations=1, pop=4, backend="gpu", out=str(tmp_path / "run"),
                      store=str(tmp_path / "store.sqlite"))
    assert len(results) == 1 and results[0].best_cycles is not None
    assert results[0].best_cycles <= results[0].baseline_cycles * 1.02


TRITON_BF16 = '''
import sys
import torch, triton, triton.language as tl
from evo import api

@triton.jit
def bias_gelu(x, b, y, n, cols, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(x + i, mask=m).to(tl.float32) + tl.load(b + i % cols, mask=m).to(tl.float32)
    g = 0.5 * v * (1 + tl.erf(v * 0.7071067811865476))
    tl.store(y + i, g.to(tl.bfloat16), mask=m)

n, cols = 1 << 20, 1024
gen = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
b = (0.1 * torch.randn(cols, device="cuda", generator=gen)).to(torch.bfloat16)
y = torch.empty_like(x)
spec = api.from_triton_call(bias_gelu, n // 1024, x, b, y, n, cols, BLOCK=1024,
                            name="triton_bias_gelu_bf16", folder=sys.argv[1])
print("SPEC", spec.spec_path)
'''


def test_a_triton_call_on_bf16_tensors_becomes_a_spec_that_measures(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "program.py"
    script.write_text(TRITON_BF16)
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = proc.stdout.split("SPEC ", 1)[1].split()[0]
    spec = load_spec(path)
    assert [p.dtype for p in spec.buffers()][:3] == ["bf16", "bf16", "bf16"]
    assert spec.param("y").role == "inout"  # torch.empty: the call changed it
    from evo import api

    base = api.measure(spec, backend="gpu", store=":memory:")
    assert base.valid, base.reason
    variant = api.measure(spec, "vec_ld(width=2)", backend="gpu", store=":memory:")
    assert variant.valid, variant.reason
