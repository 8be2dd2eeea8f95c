"""Find the NVIDIA command-line tools evo needs: ptxas, cuobjdump and nvdisasm.

Each tool is looked up in the same order, first hit wins:

1. an ``EVO_<TOOL>`` environment variable (``EVO_PTXAS``, ``EVO_CUOBJDUMP``,
   ``EVO_NVDISASM``) naming the executable. When it is set it must be right: a typo
   there is an error rather than a silent fall-through to some other version;
2. the ``PATH`` (a CUDA toolkit install);
3. the PyPI wheels (``nvidia-cuda-nvcc``, ``nvidia-cuda-cuobjdump``,
   ``nvidia-cuda-nvdisasm``), so machines without a toolkit, CI included, still work.
   CUDA 13 wheels install into ``nvidia/cu13/bin``, CUDA 12 ones into
   ``nvidia/cuda_<pkg>/bin``; both layouts are searched.

Lookups are cached because evaluation calls them once per variant; tests that
change the environment call :func:`clear_cache`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from genomes.errors import RuntimeFailure

#: How to get each tool, for the one-line error message.
_INSTALL_HINT = {
    "ptxas": "pip install nvidia-cuda-nvcc==13.0.88",
    "cuobjdump": "pip install nvidia-cuda-cuobjdump",
    "nvdisasm": "pip install nvidia-cuda-nvdisasm",
}

#: Sub-folders of the ``nvidia`` namespace package where each wheel puts its binary.
_WHEEL_DIRS = {
    "ptxas": ("cu13/bin", "cuda_nvcc/bin"),
    "cuobjdump": ("cu13/bin", "cuda_cuobjdump/bin"),
    "nvdisasm": ("cu13/bin", "cuda_nvdisasm/bin"),
}


class MissingToolError(RuntimeFailure):
    """A required NVIDIA tool (ptxas, cuobjdump, nvdisasm) cannot be found."""


def _exe_name(tool: str) -> str:
    """The file name of ``tool`` on this platform (``ptxas.exe`` on Windows)."""
    return tool + ".exe" if sys.platform == "win32" else tool


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _nvidia_package_dirs() -> list[Path]:
    """The search paths of the ``nvidia`` namespace package (empty if none installed).

    It is a namespace package spread over several wheels, so there may be
    more than one directory; ``find_spec`` reports them all without importing
    anything heavy.
    """
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _wheel_candidates(tool: str) -> list[Path]:
    """Where the PyPI wheels would have put ``tool``, in preference order."""
    return [
        base / sub / _exe_name(tool)
        for base in _nvidia_package_dirs()
        for sub in _WHEEL_DIRS[tool]
    ]


def _find(tool: str) -> Path:
    """Locate ``tool`` (env var, then PATH, then wheels) or raise MissingToolError."""
    env_var = "EVO_" + tool.upper()
    override = os.environ.get(env_var)
    if override:
        path = Path(override).expanduser()
        if not _is_executable(path):
            raise MissingToolError(
                f"{env_var}={override} is not an executable file; "
                f"fix or unset {env_var}"
            )
        return path.resolve()

    on_path = shutil.which(tool)
    if on_path:
        return Path(on_path)

    for candidate in _wheel_candidates(tool):
        if _is_executable(candidate):
            return candidate

    raise MissingToolError(
        f"{tool} not found on PATH or in the nvidia pip packages; install it with "
        f"`{_INSTALL_HINT[tool]}` (or `pip install 'evo-ptx[toolchain]'`), "
        f"or set {env_var} to its path"
    )


@functools.cache
def find_ptxas() -> Path:
    """Path of the ptxas executable; raises :class:`MissingToolError` if none."""
    return _find("ptxas")


@functools.cache
def find_cuobjdump() -> Path:
    """Path of the cuobjdump executable; raises :class:`MissingToolError` if none."""
    return _find("cuobjdump")


@functools.cache
def find_nvdisasm() -> Path:
    """Path of the nvdisasm executable; raises :class:`MissingToolError` if none."""
    return _find("nvdisasm")


def cuobjdump_env() -> dict[str, str]:
    """Environment for running cuobjdump: this process's, plus ``NVDISASM_PATH``.

    ``cuobjdump -sass`` shells out to nvdisasm and only looks on PATH or in
    ``NVDISASM_PATH``, which must name the *directory* holding nvdisasm (a
    path to the file itself is rejected: checked with cuobjdump 13.5). The pip
    wheels are not on PATH, so point it there. Raises :class:`MissingToolError`
    when nvdisasm cannot be found, unless ``NVDISASM_PATH`` is already set (then
    the user's setting is trusted).
    """
    env = dict(os.environ)
    try:
        env["NVDISASM_PATH"] = str(find_nvdisasm().parent)
    except MissingToolError:
        if not env.get("NVDISASM_PATH"):
            raise
    return env


@functools.cache
def ptxas_version() -> str:
    """ptxas's version, e.g. ``"13.0.88"`` (the full banner's last line if unparsable).

    Recorded with measurements because different ptxas versions assemble the
    same PTX differently.
    """
    proc = subprocess.run(
        [str(find_ptxas()), "--version"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    banner = proc.stdout + proc.stderr
    match = re.search(r"\bV(\d+\.\d+\.\d+)", banner)
    if match:
        return match.group(1)
    lines = [line.strip() for line in banner.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown"


def clear_cache() -> None:
    """Forget every cached lookup (tests change PATH and ``EVO_*`` variables)."""
    for cached in (find_ptxas, find_cuobjdump, find_nvdisasm, ptxas_version):
        cached.cache_clear()
