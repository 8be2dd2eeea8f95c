"""``meta.json`` in every run folder: what ran, where, and when.

Written when ``evo run`` starts (evo's version and git commit, Python, CuPy and ptxas
versions, argv, start time), completed once the backend is up (its description; the NVIDIA
driver and device names where it is the GPU backend) and again when the run stops (end
time and status). A resume keeps the original start and adds an entry to ``resumes``
({argv, start, end}); the top-level ``end`` is the last stop. Every time is ISO 8601 UTC.
Facts that cannot be had here are null, never a failure: a run never waits on them.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from evo.rundir import META, RunDir, utc_now

SOURCE_ROOT = Path(__file__).resolve().parents[1]


def git_commit(root: Path = SOURCE_ROOT) -> str | None:
    """The commit checked out at ``root`` where evo runs from a git checkout of its own
    (an installed copy inside some other repository is not one), else None."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        out = subprocess.run([git, "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root:
        return None
    return lines[1]


def git_modified(root: Path = SOURCE_ROOT) -> bool | None:
    """Whether tracked files of that checkout differ from its commit (a run's figures
    then come from code no commit holds), or None where ``git_commit`` says None."""
    if git_commit(root) is None:
        return None
    try:
        out = subprocess.run([shutil.which("git"), "-C", str(root), "status", "--porcelain",
                              "--untracked-files=no"], capture_output=True, text=True,
                             timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def cupy_version() -> str | None:
    """CuPy's version, or None where it does not import (imported here, only when asked)."""
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA library that fails to load
        return None
    return str(getattr(cupy, "__version__", "")) or None


def ptxas_version() -> str | None:
    from harness.toolchain import ptxas_version as version

    try:
        return version()
    except Exception:  # MissingToolError, or a ptxas that will not run
        return None


def nvidia_driver() -> str | None:
    """The driver version as nvidia-smi reports it (``550.54.15``), else CUDA's own number
    for it through CuPy (``cuda 12.4``), else None."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=False)
            first = out.stdout.strip().splitlines()[:1]
            if out.returncode == 0 and first:
                return first[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import cupy

        number = cupy.cuda.runtime.driverGetVersion()
        return f"cuda {number // 1000}.{number % 1000 // 10}"
    except Exception:
        return None


def environment() -> dict:
    """The facts of this machine and evo that do not depend on the backend."""
    from evo import version

    return {"evo_version": version(), "evo_git_commit": git_commit(),
            "evo_git_modified": git_modified(),
            "python_version": platform.python_version(), "cupy_version": cupy_version(),
            "ptxas_version": ptxas_version()}


def begin(run: RunDir, argv: list[str], resumed: bool) -> None:
    """meta.json at the start of a run, or a resume entry added to it."""
    start = utc_now()
    meta = run.read_meta()
    if not resumed or meta is None:
        # a resumed run from before meta.json: its own argv and start are not known
        meta = {**environment(), "argv": None if resumed else argv,
                "start": None if resumed else start,
                "end": None, "status": "running", "backend": None, "nvidia_driver": None,
                "devices": None, "resumes": []}
    if resumed:
        meta.setdefault("resumes", []).append({"argv": argv, "start": start, "end": None})
        meta.update(end=None, status="running")
    run.write_meta(meta)


def record_backend(run: RunDir, backend) -> None:
    """The backend measuring this run; the driver and the devices where it is a GPU's."""
    meta = run.read_meta()
    if meta is None:
        return
    meta["backend"] = backend.describe()
    if backend.name == "gpu":
        gpus = list(getattr(backend, "gpus", []))
        meta["nvidia_driver"] = nvidia_driver()
        meta["devices"] = [{"id": gpu, "name": backend.device} for gpu in gpus]
    run.write_meta(meta)


def finish(run: RunDir, status: str) -> None:
    """The end time and how the run (or its last resume) stopped."""
    meta = run.read_meta()
    if meta is None:  # discarded (failed before its first evaluation), or never written
        return
    end = utc_now()
    meta.update(end=end, status=status)
    if meta.get("resumes"):
        meta["resumes"][-1]["end"] = end
    run.write_meta(meta)


@contextmanager
def recorded(run: RunDir, argv: list[str] | None, resumed: bool):
    """meta.json around a run: begun on entry, finished on the way out ("finished",
    "interrupted" by Ctrl-C or SIGTERM, or "failed")."""
    begin(run, list(argv if argv is not None else ["evo", *sys.argv[1:]]), resumed)
    status = "failed"
    try:
        yield
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if (run.path / META).exists():
            try:
                finish(run, status)
            except Exception:
                if status == "finished":
                    raise
