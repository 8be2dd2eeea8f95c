"""The CLI skeleton: listings, apply, compile, and one-line errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, needs_ptxas
from evo import exit_codes
from evo.cli import main


def run_cli(*args, env=None) -> subprocess.CompletedProcess:
    """The real entry point in a subprocess, to see exactly what a user sees."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "evo.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, env=full_env, timeout=120)


def test_transforms_lists_every_transform(capsys):
    from genomes import transforms

    assert main(["transforms"]) == 0
    out = capsys.readouterr().out
    for name, t in transforms.registry().items():
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert t.summary in line
    assert "maxnreg" in out and "n=16..255" in out


def test_kernels_lists_the_suite(capsys):
    assert main(["kernels"]) == 0
    out, err = capsys.readouterr()
    assert "gemm_tile_4x6x8" in out and "softmax" in out
    sizes = err.splitlines()[-1]  # which kernels can be named at another size
    assert sizes.startswith("At another size") and "relu, " in sizes and "layernorm" in sizes
    assert "transpose" not in sizes and "gemm_tile" not in sizes


def test_apply_inline_genome_to_suite_kernel(tmp_path, capsys):
    out = tmp_path / "v.ptx"
    assert main(["apply", "maxnreg(n=96),cache_cs", "gemm_tile_4x4x4", "-o", str(out)]) == 0
    text = out.read_text()
    assert ".maxnreg 96" in text and "ld.global.cs.f32" in text
    err = capsys.readouterr().err
    assert "maxnreg(n=96): applied" in err


def test_apply_accepts_ptx_path_and_prints_to_stdout(capsys):
    path = ROOT / "harness" / "kernels" / "gemm_tile_2x2x2.ptx"
    assert main(["apply", "st_cache_cs", str(path)]) == 0
    assert "st.global.cs.f32" in capsys.readouterr().out


@needs_ptxas
def test_compile_prints_resource_report(capsys):
    assert main(["compile", "gemm_tile_4x6x8", "--genome", "maxnreg(n=64)"]) == 0
    out = capsys.readouterr().out
    assert "registers:" in out and "spill stores:" in out


BAD_INPUT = [
    (["apply", "vec_lld", "gemm_tile_4x4x4"], "unknown transform 'vec_lld'"),
    (["apply", "maxnreg", "gemm_tile_9x9x9"], "unknown kernel"),
    (["compile", "no/such/file.ptx"], "no such PTX file"),
]


@pytest.mark.parametrize("args,needle", BAD_INPUT, ids=lambda a: str(a)[:30])
def test_bad_input_is_one_line_and_nonzero(args, needle):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_unparsable_ptx_names_the_line(tmp_path):
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_90\n.address_size 64\n"
                   ".visible .entry k()\n{\n\tmov.u32 %r1, 1\n}\n")
    proc = run_cli("apply", "maxnreg", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{bad}:6:" in proc.stderr


def test_missing_ptxas_says_how_to_install(tmp_path):
    proc = run_cli("compile", "gemm_tile_2x2x2", env={"EVO_PTXAS": str(tmp_path / "nope")})
    assert proc.returncode == exit_codes.FAILURE and "Traceback" not in proc.stderr  # not usage
    assert "EVO_PTXAS" in proc.stderr


def test_missing_ptxas_everywhere_names_the_pip_package(tmp_path):
    # An empty PATH and an empty namespace: no toolkit, no wheel.
    env = {"PATH": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    code = ("import harness.toolchain as t; t._nvidia_package_dirs = lambda: []; "
            "import sys; from evo.cli import main; sys.exit(main(['compile', 'gemm_tile_2x2x2']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)
    assert proc.returncode == exit_codes.FAILURE and "Traceback" not in proc.stderr
    assert "nvidia-cuda-nvcc" in proc.stderr


def test_init_kernel_writes_a_skeleton_that_names_its_todos(tmp_path, capsys):
    import shutil

    from harness.kernels.spec import SpecError, load_spec

    ptx = tmp_path / "k.ptx"
    shutil.copy(ROOT / "harness" / "kernels" / "softmax.ptx", ptx)
    assert main(["init-kernel", str(ptx)]) == 0
    text = (tmp_path / "k.toml").read_text()
    assert 'entry = "softmax"' in text and "TODO" in text
    with pytest.raises(SpecError, match="TODO"):
        load_spec(tmp_path / "k.toml")
    assert main(["init-kernel", str(ptx)]) == 2  # refuses to overwrite


def test_store_merge_and_stats(tmp_path, capsys):
    from harness.record import Measurement
    from harness.store import Store

    for name, code in (("a", "c1"), ("b", "c2")):
        with Store(tmp_path / f"{name}.sqlite") as s:
            s.put("NVIDIA H200", "gemm_tile_2x2x2", f"p{code}", code,
                  Measurement(kernel="gemm_tile_2x2x2", device="NVIDIA H200", valid=True,
                              cycles=1.0, timer="clock64", n=1))
    dest = tmp_path / "all.sqlite"
    assert main(["store", "merge", str(dest), str(tmp_path / "a.sqlite"),
                 str(tmp_path / "b.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "1 measurements, 1 PTX links added" in out
    assert main(["store", "stats", str(dest)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "gemm_tile_2x2x2" in ln)
    assert line.split()[-2:] == ["2", "2"]
    assert main(["store", "stats", str(tmp_path / "none.sqlite")]) == 2


def test_output_piped_into_head_ends_quietly():
    """`evo kernels | head -1`: the reader goes away early; no traceback, exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "evo.cli", "kernels"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # gone before evo prints (it takes a while to import): head, early
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
