"""evo package. ``evo.__version__``: the installed evo-ptx's version, else pyproject.toml's."""

from __future__ import annotations

import functools
from pathlib import Path

DIST = "evo-ptx"


@functools.cache
def version() -> str:
    """The version of the installed package; from a source tree that is not installed,
    pyproject.toml's ``[project] version`` (the one place it is written)."""
    from importlib import metadata

    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        pass
    import tomllib

    try:
        data = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
        return str(data["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def __getattr__(name: str):
    # Computed on first use: importlib.metadata scans sys.path, which no command but
    # --version and a run's meta.json needs.
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
