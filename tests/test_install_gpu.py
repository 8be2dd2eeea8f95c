"""evo.model.install on a running torch.compile'd model (GPU, torch, Triton): installed
code really runs (a wrong variant changes the model's output, a right one does not), only
on the captured shapes, and switches off; the round trip script end to end, small.

Run with ``python3 -m pytest -m gpu -x -q tests/test_install_gpu.py``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import evo
    from evo.model import examples
    from evo.model.capture import read

    out = tmp_path_factory.mktemp("capture")
    step, inputs = examples.decoder_inference(layers=1, dim=256, batch=2, tokens=128)
    evo.capture(step, *inputs, out=out)
    return step, inputs, read(out)


def _choice(kernel, ptx: str, grid_divisor=(1, 1, 1)):
    from evo.model.install_plan import Choice, code_sha
    from harness.compile import compile_ptx

    spec = kernel["kernel_spec"]
    compiled = compile_ptx(ptx)
    assert compiled.ok, compiled.error
    scalars = {a["name"]: a["value"] for a in kernel["launch"]["args"] if not a["type"].startswith("*")}
    return Choice(kernel["name"], kernel["source"]["kernel"], code_sha(spec.ptx_text()), scalars,
                  compiled.cubin, "test", grid_divisor=grid_divisor)


def test_installed_code_runs_in_the_model_and_switches_off(model):
    import torch

    from evo.model.install import Installed
    from evo.model.verify import verify

    step, inputs, manifest = model
    kernel = next(k for k in manifest["kernels"] if "mul.f32" in k["kernel_spec"].ptx_text())
    ptx = kernel["kernel_spec"].ptx_text()
    wrong = ptx.replace("mul.f32", "add.f32", 1)
    with torch.no_grad():
        reference = step(*inputs).float().clone()
    with Installed([_choice(kernel, wrong)]) as installed:
        verdict = verify(step, inputs, installed, repeats=3)
        assert verdict["max_abs_err"] > 0, verdict  # the wrong code did run
        assert verdict["kernels_installed"] == [kernel["source"]["kernel"]]
        installed.disable()
        with torch.no_grad():
            assert torch.equal(step(*inputs).float(), reference)  # its own code back
    from genomes.genome import apply_genome, parse_inline

    right = apply_genome(ptx, parse_inline("maxnreg(n=128)")).ptx
    with Installed([_choice(kernel, right)]) as installed:
        verdict = verify(step, inputs, installed, repeats=3)
        assert verdict["outputs_agree"], verdict  # ptxas 13.0 here, Triton's own there
        assert verdict["kernels_installed"] == [kernel["source"]["kernel"]]


def test_a_coarsened_kernel_runs_in_the_model_on_a_grid_divided_by_its_factor(model, tmp_path):
    """coarsen_tile(k=4) gives each thread 4 threads' work: installed, the launch Inductor
    makes has a grid 4 times smaller (as the GPU's trace records it) and the model's
    output is its own."""
    import json

    import torch

    from evo.model.install import Installed
    from evo.model.verify import verify
    from genomes.genome import apply_genome, parse_inline

    step, inputs, manifest = model
    kernel, applied = next(
        (k, a) for k in manifest["kernels"]
        for a in [apply_genome(k["kernel_spec"].ptx_text(), parse_inline("coarsen_tile(k=4)"),
                               k["kernel_spec"].launch)]
        if a.launch.grid != k["kernel_spec"].grid)
    spec, name = kernel["kernel_spec"], kernel["source"]["kernel"]
    assert applied.launch.grid[0] * 4 == spec.grid[0]

    def grids() -> list:
        trace = tmp_path / "trace.json"
        with torch.no_grad(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step(*inputs)
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(trace))
        return [e["args"].get("grid") for e in json.loads(trace.read_text())["traceEvents"]
                if e.get("cat") == "kernel" and e.get("name") == name]

    with Installed([_choice(kernel, applied.ptx, (4, 1, 1))]) as installed:
        verdict = verify(step, inputs, installed, repeats=3)
        assert verdict["outputs_agree"], verdict
        assert verdict["kernels_installed"] == [name]
        launched = grids()
        assert launched and all(g == list(applied.launch.grid) for g in launched), launched
    assert all(g == list(spec.grid) for g in grids())  # its own code, its own grid again


def test_the_round_trip_script_runs_end_to_end(tmp_path):
    import json

    from evo.model.roundtrip import main

    assert main(["--layers", "1", "--dim", "256", "--batch", "2", "--tokens", "128",
                 "--generations", "1", "--pop", "4", "--top", "2", "--repeats", "5",
                 "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["verdict"]["outputs_agree"] and len(saved["kernels"]) == 5
    assert sum(not k["installed"] for k in saved["kernels"]) >= 3  # only the top 2 evolved
