"""evo export: a run's best variant written out for a program (PTX, cubin, launch, loader).

The CPU half builds a run on the static backend, puts a launch-changing genome in best/
(as a GPU run that found it would), exports it and reads back what a user gets. The GPU
half loads the export with the generated CuPy loader and checks the kernel's output.
"""

from __future__ import annotations

import importlib.util
import json
import py_compile
import subprocess
import sys

import pytest

from conftest import needs_ptxas
from genomes.genome import apply_genome, parse_inline
from harness.kernels.suite import find_kernel

GENOME = "coarsen(k=4,form=contiguous),vec_ld(width=4),vec_st(width=4)"


def _evo(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evo.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _run_with_best(tmp_path, genome: str = GENOME):
    """A real (static) run of relu, whose best/ then holds ``genome``'s variant."""
    from evo.rundir import RunDir

    proc = _evo("run", "--kernel", "relu", "--generations", "1", "--pop", "2", "--backend",
                "static", "--out", "r", "--store", "s.sqlite", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    spec = find_kernel("relu")
    applied = apply_genome(spec.ptx_text(), parse_inline(genome), spec.launch)
    assert applied.launch != spec.launch  # the genome changed the launch
    RunDir.open(tmp_path / "r").write_best("relu", applied.ptx,
                                           parse_inline(genome).to_json(),
                                           applied.launch.to_json())
    return tmp_path / "r", applied


@needs_ptxas
def test_export_writes_ptx_cubin_launch_and_a_loader(tmp_path):
    run, applied = _run_with_best(tmp_path)
    proc = _evo("export", run, "relu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = run / "export" / "relu"
    assert sorted(p.name for p in folder.iterdir()) == [
        "load_relu.py", "relu.cubin", "relu.launch.json", "relu.ptx"]
    assert proc.stdout.count("wrote ") == 4
    assert (folder / "relu.ptx").read_text() == applied.ptx
    assert (folder / "relu.cubin").read_bytes()[:4] == b"\x7fELF"
    launch = json.loads((folder / "relu.launch.json").read_text())
    spec = find_kernel("relu")
    assert launch["entry"] == "relu" and launch["arch"] == "sm_90"
    assert launch["grid"] == list(applied.launch.grid) and launch["block"] == list(applied.launch.block)
    assert launch["baseline_launch"] == {"grid": list(spec.grid), "block": list(spec.block)}
    assert [p["name"] for p in launch["params"]] == [p.name for p in spec.params]
    assert launch["speedup_note"] == "static estimate, not measured"
    py_compile.compile(str(folder / "load_relu.py"), doraise=True)
    loader = (folder / "load_relu.py").read_text()
    assert "launch(x, y, n)" in loader and "coarsen(" in loader
    # a static run's best was never run on a GPU: the loader does not call it correct
    assert "NOT checked for correctness" in loader and "fastest correct" not in loader


@needs_ptxas
def test_export_to_a_folder_and_clear_errors(tmp_path):
    run, _ = _run_with_best(tmp_path)
    assert _evo("export", run, "relu", "-o", tmp_path / "out", cwd=tmp_path).returncode == 0
    assert (tmp_path / "out" / "relu.cubin").is_file()
    for args, needle in (((run, "softmax"), "no best/softmax.ptx (kernels with a result: relu)"),
                         ((tmp_path / "nowhere", "relu"), "nowhere")):
        proc = _evo("export", *args, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert needle in proc.stderr.strip().splitlines()[-1], proc.stderr


@pytest.mark.gpu
def test_the_exported_loader_runs_the_evolved_kernel(tmp_path):
    import cupy as cp

    run, _ = _run_with_best(tmp_path)
    assert _evo("export", run, "relu", cwd=tmp_path).returncode == 0
    path = run / "export" / "relu" / "load_relu.py"
    module_spec = importlib.util.spec_from_file_location("load_relu", path)
    loader = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(loader)
    n = find_kernel("relu").buffers()[0].count
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.full(n, cp.nan, dtype=cp.float32)
    loader.launch(x, y, n)
    cp.cuda.Device().synchronize()
    assert bool(cp.all(y == cp.maximum(x, 0)))
    with pytest.raises(TypeError, match="takes 3 arguments"):
        loader.launch(x, y)


@needs_ptxas
def test_triton_override_finds_the_dumped_kernel_and_refuses_what_triton_cannot_run(tmp_path):
    from evo.export import export_kernel
    from evo.rundir import RunDir
    from genomes.errors import EvoError

    run, _ = _run_with_best(tmp_path)  # best: a launch-changing genome
    spec = find_kernel("relu")
    dump = tmp_path / "dump"
    for key, text in (("AAAA", "// another kernel\n"), ("BBBB", spec.ptx_path.read_text())):
        (dump / key).mkdir(parents=True)
        (dump / key / "relu.ptx").write_text(text)
    with pytest.raises(EvoError, match="changed the launch"):
        export_kernel(run, "relu", triton_dump=dump)
    for genome, why in (("ptxas_opt(level=1),cache_ld(policy=cs)", "ptxas options"),
                        ("cache_ld(policy=cs)", None)):
        applied = apply_genome(spec.ptx_text(), parse_inline(genome), spec.launch)
        RunDir.open(run).write_best("relu", applied.ptx, parse_inline(genome).to_json(),
                                    applied.launch.to_json())
        if why:
            with pytest.raises(EvoError, match=why):
                export_kernel(run, "relu", triton_dump=dump)
            continue
        override = export_kernel(run, "relu", triton_dump=dump)[-1]
        assert override == run / "export" / "relu" / "triton_override" / "BBBB" / "relu.ptx"
        assert override.read_text() == applied.ptx
    with pytest.raises(EvoError, match="no dumped relu.ptx"):
        export_kernel(run, "relu", triton_dump=tmp_path / "empty")
