"""Shared test fixtures: the suite's PTX files, and the `gpu` marker's skip rule."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL_DIR = ROOT / "harness" / "kernels"


def suite_ptx_files() -> list[Path]:
    return sorted(KERNEL_DIR.glob("*.ptx"))


@cache
def gpu_available() -> bool:
    try:
        import cupy  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="no GPU (CuPy cannot see a CUDA device)")
    for item in items:
        if "gpu" in item.keywords and not gpu_available():
            item.add_marker(skip)


needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None and not (
    __import__("importlib").util.find_spec("nvidia") is not None), reason="ptxas not found")
