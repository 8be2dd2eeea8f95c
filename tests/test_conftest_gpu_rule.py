"""The `gpu` marker's rule (tests/conftest.py), run in a pytest of its own: without an
NVIDIA GPU the tests marked `gpu` are skipped; with one (a fake nvidia-smi lists it) and a
CuPy that cannot be imported, they fail with the reason. A test whose name says "gpu"
without the marker runs either way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = """
import pytest

@pytest.mark.gpu
def test_needs_the_gpu():
    pass

def test_gpu_in_its_name_only():
    pass
"""


def _session(tmp_path: Path, with_gpu: bool) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_rule.py").write_text(TESTS)
    fake = tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open')\n")
    path = os.environ.get("PATH", "")
    if with_gpu:
        smi = fake / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
        smi.chmod(0o755)
        path = f"{fake}{os.pathsep}{path}"
    else:  # no nvidia-smi at all on this PATH
        path = os.pathsep.join(p for p in path.split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-o", "markers=gpu: needs a GPU", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "PYTHONPATH": str(fake)})


def test_without_a_gpu_the_marked_tests_skip(tmp_path):
    if Path("/dev/nvidiactl").exists():
        return  # this machine has a GPU: the other case is the one to see here
    proc = _session(tmp_path, with_gpu=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout and "libcudart" in proc.stdout


def test_with_a_gpu_a_broken_cupy_fails_the_marked_tests(tmp_path):
    proc = _session(tmp_path, with_gpu=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout or "1 passed, 1 error" in proc.stdout, proc.stdout
    assert "this machine has an NVIDIA GPU, but CuPy cannot use it: ImportError" in proc.stdout
