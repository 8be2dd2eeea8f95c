"""Kernel specs: how to launch one PTX entry and what to feed it, read strictly from TOML.

A spec sits beside its `.ptx` (see DESIGN.md, "Kernel spec"); the shape is:

    name, entry, ptx, grid, block, shared_mem, timing, caches, reference, peer, description
    [tolerance] rtol, atol          (integer outputs are always compared exactly)
    [meta]      free ints / floats / strings for the reference function
    [[params]]  in PTX param order: buffers (dtype, count, role, fill + fill options)
                or scalars (dtype, value)

Defaults: name = file stem, entry = name, ptx = "<stem>.ptx", shared_mem = 0,
timing = "clock64" for a one-block grid else "events", caches = "warm", tolerance 1e-5 / 1e-5.
caches: "warm" times launches back to back on the same buffers (data the L2 holds stays
there, as in a loop over one batch); "cold" makes every timed launch read its inputs from
DRAM (``harness.gpu.timing``: buffers rotated among copies larger than the L2, or the L2
flushed), as a kernel meets data another kernel just evicted.
Buffer fills: normal (mean 0, std 1), uniform [low, high) (0, 1), int [low, high)
(high required, exclusive as in NumPy), const (value). `fill` is ignored for role "out".
Every mistake is a `SpecError` naming the file and the key; typos get a suggestion.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from genomes.errors import EvoError
from genomes.ptx import only_entry

# bf16 and fp8 (e4m3, e5m2) have no NumPy type: their buffers are kept as their bits (uint16,
# uint8), converted by harness.dtypes.encodings.
DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "uint16", "f8e4m3": "uint8",
          "f8e5m2": "uint8", "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64", "i8": "int8",
          "u8": "uint8"}
DTYPE_BITS = {"f32": 32, "f64": 64, "f16": 16, "bf16": 16, "f8e4m3": 8, "f8e5m2": 8, "i32": 32, "u32": 32,
              "i64": 64, "u64": 64, "i8": 8, "u8": 8}
ROLES = ("in", "out", "inout")
FILLS = ("normal", "uniform", "int", "const")
TIMINGS = ("clock64", "events")
CACHES = ("warm", "cold")
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_MEM = 227 * 1024  # sm_90's largest dynamic shared memory per block

_TOP_KEYS = ("name", "entry", "ptx", "grid", "block", "shared_mem", "timing", "caches", "reference",
             "peer", "description", "tolerance", "meta", "params")
_BUFFER_KEYS = ("name", "kind", "dtype", "count", "role", "fill", "low", "high", "value", "mean", "std")
_SCALAR_KEYS = ("name", "kind", "dtype", "value")
_PLAIN_NAME = re.compile(r"[^/\\\x00-\x1f.][^/\\\x00-\x1f]*")  # no folder, no hidden file
_PTX_IDENT = re.compile(r"[A-Za-z][\w$]*|[_$%][\w$]+")
_FILL_KEYS = {"normal": ("mean", "std"), "uniform": ("low", "high"), "int": ("low", "high"), "const": ("value",)}


@functools.lru_cache(maxsize=None)
def _suite_digest(name: str) -> str | None:
    """``measured_digest`` of the suite's kernel of this name (or ``NAME@SIZE``), or None."""
    from harness.kernels.suite import find_kernel

    try:
        return find_kernel(name).measured_digest()
    except EvoError:
        return None


class SpecError(EvoError):
    """A kernel spec that cannot be used; the message names the file and the key."""


def with_caches(spec, caches: str):
    """The spec timed with ``caches`` (one of CACHES); "spec" keeps the spec's own choice
    (``evo run --caches``, ``[run] caches``)."""
    import dataclasses

    if caches == "spec" or caches == spec.caches:
        return spec
    if caches not in CACHES:
        raise SpecError(f"caches {caches!r} is not one of spec, {', '.join(CACHES)}")
    return dataclasses.replace(spec, caches=caches)


def numpy_dtype(dtype: str):
    """The NumPy dtype of a spec dtype name ("f32" -> numpy.float32)."""
    import numpy as np

    if dtype not in DTYPES:
        raise SpecError(f"unknown dtype {dtype!r}{_suggest(dtype, DTYPES)} (one of {', '.join(DTYPES)})")
    return np.dtype(DTYPES[dtype])


def is_int_dtype(dtype: str) -> bool:
    """True for the integer dtypes (compared exactly, filled with ints)."""
    return dtype[0] in "iu"


@dataclass(frozen=True)
class Tolerance:
    """Output comparison: |got - want| <= atol + rtol * |want| (ints are exact)."""

    rtol: float = 1e-5
    atol: float = 1e-5


@dataclass(frozen=True)
class BufferParam:
    """A device buffer passed as a pointer: dtype, element count, role and how to fill it."""

    name: str
    dtype: str
    count: int
    role: str = "in"
    fill: str = "normal"
    low: float | None = None
    high: float | None = None
    value: float | None = None
    mean: float = 0.0
    std: float = 1.0
    kind = "buffer"

    @property
    def nbytes(self) -> int:
        """Size of the buffer in bytes."""
        return self.count * DTYPE_BITS[self.dtype] // 8

    @property
    def is_output(self) -> bool:
        """True for role out and inout: the kernel writes it and the gate compares it."""
        return self.role != "in"


@dataclass(frozen=True)
class ScalarParam:
    """A scalar passed by value."""

    name: str
    dtype: str
    value: int | float
    kind = "scalar"


Param = BufferParam | ScalarParam


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of the suite (or the user's): PTX entry, launch shape, params, checks."""

    name: str
    entry: str
    ptx_path: Path
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: tuple[Param, ...]
    shared_mem: int = 0
    timing: str = "clock64"
    caches: str = "warm"  # CACHES: how the timer treats the L2 (module docstring)
    tolerance: Tolerance = Tolerance()
    reference: str | None = None
    peer: str | None = None  # "module:function" a user would run instead (harness.kernels.peers)
    description: str = ""
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    spec_path: Path | None = None

    numpy_dtype = staticmethod(numpy_dtype)

    def ptx_text(self) -> str:
        """The baseline PTX (``baseline_ptx``)."""
        return baseline_ptx(self.ptx_path, self.entry)

    def buffers(self) -> list[BufferParam]:
        """Buffer params, in PTX order."""
        return [p for p in self.params if isinstance(p, BufferParam)]

    def scalars(self) -> list[ScalarParam]:
        """Scalar params, in PTX order."""
        return [p for p in self.params if isinstance(p, ScalarParam)]

    def outputs(self) -> list[BufferParam]:
        """Buffers the kernel writes (role out or inout): what correctness compares."""
        return [p for p in self.buffers() if p.is_output]

    def param(self, name: str) -> Param:
        """The param called `name` (KeyError if none)."""
        return {p.name: p for p in self.params}[name]

    def tolerance_for(self, param: BufferParam) -> Tolerance:
        """The tolerance for one output: the spec's, exact for integer dtypes, and for bf16
        and fp8 at least their own rounding's (``harness.dtypes.encodings``: bf16 has 8
        significant bits, e4m3 4, e5m2 3)."""
        if is_int_dtype(param.dtype):
            return Tolerance(0.0, 0.0)
        from harness.dtypes import encodings

        encoding = encodings.of(param.dtype)
        if encoding is not None:
            rtol, atol = encoding.TOLERANCE
            return Tolerance(max(self.tolerance.rtol, rtol), max(self.tolerance.atol, atol))
        return self.tolerance

    @property
    def launch(self):
        """The spec's own launch, as a ``genomes.launch.Launch`` (genes may change it)."""
        from genomes.launch import Launch

        return Launch(self.grid, self.block, self.entry)

    def launch_suffix(self, launch) -> str:
        """What store keys of a variant add for its launch: "" for the spec's own launch,
        else ``@grid=... block=...`` (a block-size gene changes no code, only this)."""
        if launch is None or launch == self.launch:
            return ""
        return "@" + launch.key()

    @functools.cached_property
    def store_name(self) -> str:
        """The kernel name its measurements are stored under: a cold-timed spec's figures
        are not a warm one's, so they never answer for each other. A name that does not
        fix the spec (anything but a suite kernel, at its size or ``NAME@SIZE``: a captured
        kernel compiled for dynamic shapes keeps one PTX at every batch, an ``evo.kernel``
        or a user's spec file may be measured at several counts) gets ``#`` and
        ``measured_digest()``: the store answers a spec only with what was checked and
        timed for that spec."""
        base = self.name if self.caches == "warm" else f"{self.name}@{self.caches}"
        own = self.measured_digest()
        return base if _suite_digest(self.name) == own else f"{base}#{own}"

    def measured_digest(self) -> str:
        """12 hex digits over what decides a measurement but the timer's caches (in the
        store name already): the PTX, entry, launch, params and tolerance."""
        facts = [hashlib.sha256(self.ptx_text().encode()).hexdigest(), self.entry,
                 list(self.grid), list(self.block), self.shared_mem, self.timing,
                 [self.tolerance.rtol, self.tolerance.atol],
                 [sorted(vars(p).items()) for p in self.params]]
        return hashlib.sha256(json.dumps(facts, default=str).encode()).hexdigest()[:12]

    @property
    def bytes_read(self) -> int:
        """Bytes the kernel must read at least: every in and inout buffer once."""
        return sum(p.nbytes for p in self.buffers() if p.role in ("in", "inout"))

    @property
    def bytes_written(self) -> int:
        """Bytes the kernel must write at least: every out and inout buffer once."""
        return sum(p.nbytes for p in self.buffers() if p.is_output)

    threads_per_block = property(lambda self: math.prod(self.block), doc="Threads in one block.")
    blocks = property(lambda self: math.prod(self.grid), doc="Blocks in the grid.")

    @property
    def threads(self) -> int:
        """Threads in the whole launch (blocks x threads per block)."""
        return self.blocks * self.threads_per_block


def read_ptx(path: str | Path) -> str:
    """The text of a PTX file; a binary (a cubin, say) or unreadable file is one SpecError."""
    hint = "give the PTX text that `nvcc -ptx` or Triton wrote, not a cubin or other binary"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: not a PTX text file (byte {err.object[err.start]:#04x} at "
                        f"offset {err.start} is not UTF-8); {hint}") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror}") from None
    if "\0" in text:
        raise SpecError(f"{path}: not a PTX text file (a NUL byte at offset "
                        f"{text.index(chr(0))}); {hint}")
    return text


def baseline_ptx(path: str | Path, entry: str) -> str:
    """A spec's baseline: its PTX file's text, less any other kernel entries the file holds
    (``genomes.ptx.only_entry``: genes, ptxas figures and SASS are this entry's)."""
    return only_entry(read_ptx(path), entry)


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Reader:
    """Validates one parsed TOML table; every error names the file and where in it."""

    def __init__(self, path: Path, table: dict, where: str = ""):
        self.path, self.table, self.where = path, table, where

    def fail(self, message: str):
        raise SpecError(f"{self.path}: {self.where}{message}")

    def check_keys(self, allowed) -> None:
        for key in self.table:
            if key not in allowed:
                self.fail(f"unknown key {key!r}{_suggest(key, allowed)}")

    def get(self, key: str, kind, default=..., check=None, what: str = ""):
        if key not in self.table:
            if default is ...:
                self.fail(f"missing key {key!r}")
            return default
        value = self.table[key]
        if value == "TODO":
            self.fail(f"{key!r} is still TODO: fill it in")
        ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
        if not ok or (check is not None and not check(value)):
            self.fail(f"{key!r} must be {what or getattr(kind, '__name__', 'a number')}, got {value!r}")
        return float(value) if kind == (int, float) else value

    def choice(self, key: str, choices, default=...) -> str:
        value = self.get(key, str, default)
        if value not in choices and value is not default:
            self.fail(f"{key!r} = {value!r} is not one of {', '.join(choices)}{_suggest(value, choices)}")
        return value

    def dim3(self, key: str) -> tuple[int, int, int]:
        return tuple(self.get(key, list, check=lambda v: len(v) == 3 and all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v), what="3 positive ints"))


_NUM = (int, float)


def _dtype_range(dtype: str) -> tuple[int, int]:
    bits = DTYPE_BITS[dtype]
    return (0, 2**bits - 1) if dtype[0] == "u" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def read_param(table, where: str | Path, index: int = 0) -> Param:
    """One ``[[params]]`` table (as TOML reads it) validated into a BufferParam or
    ScalarParam: load_spec's rules, and evo.api's for params built in code; every error
    is one SpecError starting with ``where`` (the spec file, say) and naming the param."""
    if not isinstance(table, dict):
        raise SpecError(f"{where}: params #{index + 1} must be a table ([[params]])")
    name = table.get("name", f"#{index + 1}")
    r = _Reader(where, table, f"param {name!r}: ")
    r.check_keys(_BUFFER_KEYS)  # the superset first, so that a misspelt "kind" is named as such
    kind = r.choice("kind", ("buffer", "scalar"))
    if kind == "scalar":
        r.check_keys(_SCALAR_KEYS)
    name = r.get("name", str, check=str.isidentifier, what="an identifier")
    dtype = r.choice("dtype", tuple(DTYPES))
    if kind == "scalar":
        if dtype in ("bf16", "f8e4m3", "f8e5m2"):
            r.fail(f"a {dtype} scalar is not supported: pass it as f32 (Triton and nvcc pass "
                   "float scalars as f32)")
        if is_int_dtype(dtype):
            low, high = _dtype_range(dtype)
            value = r.get("value", int, check=lambda v: low <= v <= high, what=f"an int in [{low}, {high}]")
        else:
            value = r.get("value", _NUM, what="a number")
        return ScalarParam(name, dtype, value)
    count = r.get("count", int, check=lambda v: v > 0, what="a positive int")
    role = r.choice("role", ROLES)
    fill = r.choice("fill", FILLS, "normal")
    if role == "out" and "fill" not in table:
        return BufferParam(name, dtype, count, role)  # never filled: poisoned before each launch
    for key in ("low", "high", "value", "mean", "std"):
        if key in table and key not in _FILL_KEYS[fill]:
            takes = ", ".join(_FILL_KEYS[fill])
            r.fail(f"key {key!r} does not apply to fill = {fill!r} (it takes {takes})")
    if fill in ("normal", "uniform") and is_int_dtype(dtype):
        r.fail(f"fill = {fill!r} needs a float dtype; use fill = 'int' for {dtype}")
    opts: dict[str, Any] = {}
    if fill == "normal":
        opts["mean"] = r.get("mean", _NUM, 0.0)
        opts["std"] = r.get("std", _NUM, 1.0, check=lambda v: v >= 0, what="a number >= 0")
    elif fill == "uniform":
        opts["low"], opts["high"] = r.get("low", _NUM, 0.0), r.get("high", _NUM, 1.0)
    elif fill == "int":
        opts["low"], opts["high"] = r.get("low", int, 0), r.get("high", int)
        if is_int_dtype(dtype):
            lo, hi = _dtype_range(dtype)
            if opts["low"] < lo or opts["high"] - 1 > hi:
                r.fail(f"int fill [{opts['low']}, {opts['high']}) does not fit {dtype}")
    else:
        opts["value"] = r.get("value", int if is_int_dtype(dtype) else _NUM)
    if fill in ("uniform", "int") and not opts["low"] < opts["high"]:
        r.fail(f"fill = {fill!r} needs low < high, got [{opts['low']}, {opts['high']})")
    return BufferParam(name, dtype, count, role, fill, **opts)


def _check_reference(r: _Reader, name: str | None) -> None:
    if name is None:
        return
    from harness.kernels import reference

    if name not in reference.REFERENCES:
        r.fail(f"reference {name!r} is not a function in harness/kernels/reference.py"
               f"{_suggest(name, reference.REFERENCES)}")


def load_spec(path: str | Path) -> KernelSpec:
    """Read and validate one spec file; raise SpecError naming the file and the key."""
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: not valid TOML: {err}") from None
    return spec_from_table(data, path)


def spec_from_table(data: dict, path: Path, where: str | Path | None = None) -> KernelSpec:
    """A spec from its table (as tomllib reads a spec file), validated as load_spec does.
    ``path``: where the spec file is or will be (name and ptx default to its stem, a relative
    ptx is beside it); errors start with ``where`` (default: the path). evo.api uses it."""
    where = path if where is None else where
    r = _Reader(where, data)
    r.check_keys(_TOP_KEYS)
    # a kernel's name names its files (best/<name>.ptx, plots): a file name, not a path
    name = r.get("name", str, path.stem, check=_PLAIN_NAME.fullmatch,
                 what="a file name (no '/' or '\\', not starting with '.')")
    entry = r.get("entry", str, name, check=_PTX_IDENT.fullmatch, what="a PTX identifier")
    ptx_path = (path.parent / r.get("ptx", str, path.stem + ".ptx")).resolve()
    if not ptx_path.is_file():
        r.fail(f"ptx file {ptx_path} not found")
    grid, block = r.dim3("grid"), r.dim3("block")
    if math.prod(block) > MAX_THREADS_PER_BLOCK or block[2] > 64:
        r.fail(f"block {list(block)} has {math.prod(block)} threads; at most {MAX_THREADS_PER_BLOCK} "
               "per block (and z <= 64)")
    if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
        r.fail(f"grid {list(grid)} exceeds CUDA limits (x < 2^31, y and z <= 65535)")
    shared_mem = r.get("shared_mem", int, 0, check=lambda v: 0 <= v <= MAX_SHARED_MEM,
                       what=f"an int in [0, {MAX_SHARED_MEM}]")
    default_timing = "clock64" if math.prod(grid) == 1 else "events"
    timing = r.choice("timing", TIMINGS, default_timing)
    if timing == "clock64" and math.prod(grid) != 1:
        r.fail("timing = 'clock64' measures one block; use 'events' for a grid of several blocks")
    caches = r.choice("caches", CACHES, "warm")
    reference = r.get("reference", str, None)
    peer = r.get("peer", str, None, check=lambda v: ":" in v, what='"module:function"')
    _check_reference(r, reference)
    description = r.get("description", str, "")
    tol_table = r.get("tolerance", dict, {})
    t = _Reader(where, tol_table, "[tolerance] ")
    t.check_keys(("rtol", "atol"))
    nonneg = dict(check=lambda v: v >= 0 and math.isfinite(v), what="a finite number >= 0")
    tolerance = Tolerance(t.get("rtol", _NUM, 1e-5, **nonneg), t.get("atol", _NUM, 1e-5, **nonneg))
    meta = r.get("meta", dict, {})
    for key, value in meta.items():
        if not isinstance(value, (int, float, str)):
            r.fail(f"[meta] {key!r} must be an int, float, string or bool, got {value!r}")
    raw_params = r.get("params", list, what="an array of tables ([[params]])")
    params = tuple(read_param(p, where, i) for i, p in enumerate(raw_params))
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            r.fail(f"param name {p.name!r} appears twice")
        seen.add(p.name)
    if not any(isinstance(p, BufferParam) and p.is_output for p in params):
        r.fail("no output buffer: at least one buffer param needs role 'out' or 'inout'")
    return KernelSpec(name=name, entry=entry, ptx_path=ptx_path, grid=grid, block=block, params=params,
                      shared_mem=shared_mem, timing=timing, caches=caches, tolerance=tolerance, reference=reference,
                      peer=peer, description=description, meta=MappingProxyType(dict(meta)), spec_path=path)
