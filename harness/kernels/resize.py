"""A suite kernel at another size: ``relu@16M``, ``softmax@4M`` (``NAME@SIZE``).

The suite's many-thread kernels hold 1M elements (8 MiB for relu), sized to stay in the
L2; the kernels users bring are often 4-64M. Two shapes can be resized without touching
the PTX, because their size is a launch argument and the grid:

* **elementwise** (every buffer of one length, a scalar ``n`` giving it, a 1-D grid):
  every buffer and ``n`` get ``count`` elements, the grid covers them;
* **rows** (``meta`` names ``rows`` and ``cols``, one block per row: grid ``(rows, 1, 1)``):
  ``count`` elements are ``count / cols`` rows; the ``rows x cols`` buffers grow, a buffer
  of one row's length (layer norm's ``gamma``) stays.

``SIZE`` is a count, with K, M or G for 2**10, 2**20, 2**30 (``4M`` = 4,194,304). The
resized spec is named ``NAME@SIZE`` (its measurements are stored apart from the suite
size's) and has no file of its own: what needs one (the finalist check's processes) writes
it (``spec_write.spec_file``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from types import MappingProxyType

import numpy as np

from genomes.errors import EvoError

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"(\d+)([KMG]?)", re.IGNORECASE)


class ResizeError(EvoError, ValueError):
    """A size that is not a count, or a kernel whose shape cannot be resized."""


def parse_size(text: str) -> int:
    """``4M`` -> 4194304; ``1000`` -> 1000; ResizeError for anything else or 0."""
    match = _SIZE.fullmatch(text.strip())
    count = int(match.group(1)) * UNITS.get(match.group(2).upper(), 1) if match else 0
    if count < 1:
        raise ResizeError(f"{text!r}: the size after @ is a count such as 4M, 65536 or 1G")
    return count


def size_label(count: int) -> str:
    """4194304 -> ``4M``; 1000 -> ``1000``."""
    return next((f"{count // u}{k}" for k, u in reversed(UNITS.items()) if count % u == 0),
                str(count))


def resized(spec, count: int):
    """``spec`` with ``count`` elements (the module docstring's two shapes), named
    ``NAME@SIZE``; ResizeError for any other shape."""
    if _elementwise(spec):  # first: an elementwise kernel's one length may be rows x cols
        params = tuple(dataclasses.replace(p, count=count) if p.kind == "buffer" else
                       dataclasses.replace(p, value=count) if p.name == "n" else p
                       for p in spec.params)
        grid = (math.ceil(count / spec.block[0]), 1, 1)
        meta = spec.meta
    elif _rows(spec):
        rows, cols = spec.meta["rows"], spec.meta["cols"]
        if count % cols:
            raise ResizeError(f"{spec.name} holds rows of {cols} elements: {count} elements "
                              f"are no whole number of rows")
        new_rows = count // cols
        params = tuple(dataclasses.replace(p, count=new_rows * cols)
                       if p.kind == "buffer" and p.count == rows * cols else
                       dataclasses.replace(p, value=new_rows) if p.name == "rows" else p
                       for p in spec.params)
        grid = (new_rows, 1, 1)
        meta = MappingProxyType({**spec.meta, "rows": new_rows})
    else:
        raise ResizeError(f"{spec.name} cannot be resized: only elementwise kernels (buffers of "
                          f"one length, a scalar n) and row kernels (meta rows and cols, one "
                          f"block per row) can")
    for p in params:  # the count a scalar carries must fit its type (n is a u32: < 4G)
        dtype = np.dtype(spec.numpy_dtype(p.dtype)) if p.kind != "buffer" else None
        if dtype is not None and dtype.kind in "iu" and p.name in ("n", "rows"):
            info = np.iinfo(dtype)
            if not info.min <= p.value <= info.max:
                raise ResizeError(f"{spec.name}@{size_label(count)}: its {p.name} ({p.value}) "
                                  f"does not fit the kernel's {p.dtype} parameter")
    return dataclasses.replace(spec, name=f"{spec.name}@{size_label(count)}", params=params,
                               grid=grid, meta=meta, spec_path=None)


def can_resize(spec) -> bool:
    """Whether ``resized`` takes ``spec`` (one of the module docstring's two shapes)."""
    return _elementwise(spec) or _rows(spec)


def _elementwise(spec) -> bool:
    return (len({p.count for p in spec.buffers()}) == 1 and spec.grid[1:] == (1, 1)
            and "n" in {p.name for p in spec.scalars()})


def _rows(spec) -> bool:
    rows, cols = spec.meta.get("rows"), spec.meta.get("cols")
    if not (isinstance(rows, int) and isinstance(cols, int)) or spec.grid != (rows, 1, 1):
        return False
    counts = {p.count for p in spec.buffers()}
    # A buffer of one per row would have to grow too, but a row's length may equal the
    # row count (1024 x 1024): only rows x cols and cols are told apart for sure.
    return rows * cols in counts and counts <= {rows * cols, cols}
