"""evo package. ``evo.__version__``: the installed evo-ptx's version, else pyproject.toml's.

The Python API (``evo.api``) is exported here, loaded on first use: ``evo.kernel``,
``evo.buffer``, ``evo.scalar``, ``evo.from_triton``, ``evo.from_triton_call``, ``evo.from_call``,
``evo.capture``, ``evo.install``, ``evo.measure``, ``evo.RunResult`` and
``evo.evolve`` (``evo.api.run``: the name ``evo.run`` is the module behind ``evo run``)."""

from __future__ import annotations

import functools
from pathlib import Path

DIST = "evo-ptx"
# name here -> name in evo.api; not imported with the package, so that `import evo` stays cheap
_API = {"kernel": "kernel", "buffer": "buffer", "scalar": "scalar", "from_triton": "from_triton",
        "from_triton_call": "from_triton_call", "from_call": "from_call", "capture": "capture", "install": "install", "measure": "measure", "evolve": "run", "RunResult": "RunResult"}


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
    if name in _API:
        from evo import api

        return getattr(api, _API[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
