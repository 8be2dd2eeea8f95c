"""A Triton kernel from a real call to Triton running the evolved PTX (GPU, Triton, torch).

The program is a script run in fresh processes, as a user's would be: once with Triton's
kernel dump on, making the spec from its real call (``evo.api.from_triton_call``); then,
after evo's variant is checked on the GPU and exported with ``--triton-dump``, once with
Triton's kernel override on, which must launch the exported PTX and give the same output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = '''
import os, sys
import numpy as np, torch, triton, triton.language as tl
sys.path.insert(0, {root!r})

@triton.jit
def leaky(x, y, n, alpha, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(x + i, mask=m)
    tl.store(y + i, tl.where(v > 0, v, v * alpha), mask=m)

n = 1 << 20
x = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
y = torch.zeros_like(x)
mode, out = sys.argv[1], sys.argv[2]
if mode == "spec":
    from evo import api
    spec = api.from_triton_call(leaky, n // 1024, x, y, n, 0.01, BLOCK=1024,
                                name="leaky_call", folder=out)
    print("SPEC", spec.spec_path)
else:
    leaky[(n // 1024,)](x, y, n, 0.01, BLOCK=1024)
torch.cuda.synchronize()
np.save(os.path.join(out, mode + ".npy"), y.cpu().numpy())
'''


def _program(tmp_path: Path, mode: str, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(root=str(ROOT)))
    proc = subprocess.run([sys.executable, str(script), mode, str(tmp_path)], text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "TRITON_ALWAYS_COMPILE": "1",
                               "TRITON_CACHE_DIR": str(tmp_path / f"cache-{mode}"), **env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_triton_call_to_spec_to_evolved_ptx_run_by_triton(tmp_path):
    pytest.importorskip("triton")
    from evo import api
    from evo.export import export_kernel
    from evo.rundir import RunDir
    from genomes.errors import EvoError
    from genomes.genome import apply_genome, parse_inline
    from harness.kernels.spec import load_spec

    dump = tmp_path / "dump"
    proc = _program(tmp_path, "spec", TRITON_KERNEL_DUMP="1", TRITON_DUMP_DIR=str(dump))
    spec = load_spec(proc.stdout.split("SPEC ", 1)[1].split()[0])
    kinds = [(p.name, p.kind, p.dtype, getattr(p, "role", None)) for p in spec.params][:4]
    assert kinds == [("x", "buffer", "f32", "in"), ("y", "buffer", "f32", "inout"),
                     ("n", "scalar", "i32", None), ("alpha", "scalar", "f32", None)]
    assert spec.params[0].fill == "uniform" and spec.params[1].fill == "const"
    assert spec.block == (128, 1, 1) and spec.grid == (1024, 1, 1)  # 4 warps, as Triton chose
    assert spec.ptx_text() in [p.read_text() for p in dump.glob("*/leaky.ptx")]

    base = api.measure(spec, backend="gpu", store=tmp_path / "s.sqlite")
    assert base.valid, base.reason
    genome = parse_inline("l2_policy(on=ld,priority=evict_first),st_evict(priority=evict_first)")
    variant = api.measure(spec, genome, backend="gpu", store=tmp_path / "s.sqlite")
    assert variant.valid, variant.reason  # the gate proved it before it goes anywhere

    api.run(spec, generations=1, pop=2, backend="static", out=tmp_path / "r",
            store=tmp_path / "static.sqlite", priors="none")
    run = RunDir.open(tmp_path / "r")
    applied = apply_genome(spec.ptx_text(), genome, spec.launch)
    run.write_best(spec.name, applied.ptx, genome.to_json(), applied.launch.to_json())
    files = export_kernel(run.path, spec.name, triton_dump=dump)
    override = files[-1]
    assert override.read_text() == applied.ptx and override.parent.parent.name == "triton_override"

    proc = _program(tmp_path, "override", TRITON_KERNEL_OVERRIDE="1",
                    TRITON_OVERRIDE_DIR=str(override.parents[1]))
    assert f"Overriding kernel with file {override}" in proc.stdout + proc.stderr
    assert np.array_equal(np.load(tmp_path / "override.npy"), np.load(tmp_path / "spec.npy"))

    coarse = apply_genome(spec.ptx_text(), parse_inline("coarsen(k=2)"), spec.launch)
    if coarse.launch != spec.launch:  # a launch Triton does not choose cannot go to Triton
        run.write_best(spec.name, coarse.ptx, parse_inline("coarsen(k=2)").to_json(),
                       coarse.launch.to_json())
        with pytest.raises(EvoError, match="changed the launch"):
            export_kernel(run.path, spec.name, triton_dump=dump)
