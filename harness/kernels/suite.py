"""The kernel suite shipped in `harness/kernels/`: list it, and find a kernel by name or path.

A kernel is named the way a user types it on the command line: a suite name
(`gemm_tile_4x6x8`), a suite name at another size (`relu@16M`, `softmax@4M`:
`harness.kernels.resize`), a path to a spec (`my/kernel.toml`), or a path to a PTX file
whose spec sits beside it with the same stem (`my/kernel.ptx` -> `my/kernel.toml`).
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
from pathlib import Path

from genomes.errors import EvoError
from harness.kernels.catalog import GEMM_SIZES, gemm_name
from harness.kernels.resize import parse_size, resized
from harness.kernels.spec import KernelSpec, SpecError, load_spec
from harness.kernels.spec_ptx import check_ptx

_GEMM_NAME = re.compile(r"gemm_tile_(\d+)x(\d+)x(\d+)")


class UnknownKernelError(EvoError):
    """A kernel name that is neither in the suite nor a path; the message suggests close names."""


def suite_dir() -> Path:
    """The folder holding the suite's .ptx and .toml files."""
    return Path(__file__).resolve().parent


def gemm_tiles() -> list[str]:
    """The 64 names of the gemm_tile family, m, n, k in {2, 4, 6, 8}, ordered by (m, n, k)."""
    return [gemm_name(m, n, k) for m, n, k in itertools.product(GEMM_SIZES, repeat=3)]


def _sort_key(name: str) -> tuple:
    """gemm_tile kernels first, by (m, n, k) as numbers; then the rest by name."""
    match = _GEMM_NAME.fullmatch(name)
    return (0, *map(int, match.groups()), "") if match else (1, 0, 0, 0, name)


def suite_names() -> list[str]:
    """Names of the suite's kernels (from the spec file names), in suite order."""
    return sorted((p.stem for p in suite_dir().glob("*.toml")), key=_sort_key)


@functools.lru_cache(maxsize=None)
def _load_suite() -> tuple[KernelSpec, ...]:
    return tuple(load_spec(suite_dir() / f"{name}.toml") for name in suite_names())


def list_kernels() -> list[KernelSpec]:
    """Every spec of the suite, loaded and validated, gemm_tile first by (m, n, k)."""
    return list(_load_suite())


def _from_path(path: Path) -> KernelSpec:
    if path.suffix == ".ptx":
        toml = path.with_suffix(".toml")
        if not path.is_file():
            raise SpecError(f"{path}: no such PTX file")
        if not toml.is_file():
            raise SpecError(f"{path}: no spec beside it; write {toml.name} "
                            f"(`evo init-kernel {path}` writes a skeleton to fill in)")
        spec = load_spec(toml)
        if spec.ptx_path != path.resolve():
            raise SpecError(f"{toml}: ptx = {spec.ptx_path.name!r}, not {path.name!r}")
        return spec
    return load_spec(path)


def _checked(spec: KernelSpec) -> KernelSpec:
    # A spec that disagrees with its PTX would launch with garbage arguments (and could
    # still read as valid): one SpecError instead, before anything runs.
    check_ptx(spec)
    return spec


def find_kernel(name_or_path: str | Path) -> KernelSpec:
    """The spec for a suite name (or ``NAME@SIZE``), a `.toml` path, or a `.ptx` path with
    its `.toml` beside it, checked against its PTX (entry name, params), the way every
    command loads a spec for use.

    Raises UnknownKernelError (with up to three close suite names) for an unknown name,
    SpecError for a missing or invalid file or a spec that does not match its PTX, and
    ResizeError for a size or a kernel that cannot be resized.
    """
    text = str(name_or_path)
    path = Path(text)
    if isinstance(name_or_path, Path) or path.suffix in (".toml", ".ptx") or "/" in text or path.is_file():
        return _checked(_from_path(path))
    names = suite_names()
    if text in names:
        return _checked(load_spec(suite_dir() / f"{text}.toml"))
    base, at, size = text.partition("@")
    if at and base in names:
        return _checked(resized(find_kernel(base), parse_size(size)))
    close = difflib.get_close_matches(text, names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(names)} kernels, e.g. {', '.join(names[:2])}"
    raise UnknownKernelError(f"unknown kernel {text!r} (not in the suite at {suite_dir()}, not a file){hint}")
