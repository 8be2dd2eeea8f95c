"""Assemble PTX with ptxas and read its resource report.

``compile_ptx`` runs ``ptxas -arch=<arch> -O<n> -v`` in a private temporary
directory and returns a :class:`CompileResult`: the cubin, the per-function
figures ptxas prints with ``-v`` (registers, spills, stack, shared and
constant memory, barriers), its log, and a trimmed error when it fails.

A variant that ptxas rejects or that takes too long is an ordinary *result*
(``ok=False`` and ``error`` set): evolution produces such variants all the time
and the run must go on. Only a missing ptxas is an exception
(:class:`~harness.toolchain.MissingToolError`), since then nothing can be
compiled at all.

The ``-v`` report of ptxas 13.0 looks like this (all of it on stderr)::

    ptxas info    : 0 bytes gmem
    ptxas info    : Compiling entry function 'sum4' for 'sm_90'
    ptxas info    : Function properties for sum4
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 12 registers, used 0 barriers, 256 bytes smem
    ptxas info    : Compile time = 1.061 ms

Older releases also print ``356 bytes cmem[0]`` on the ``Used`` line; 13.0
omits cmem. Entries are reported in ptxas's own order (not the PTX's), and
non-inlined ``.func`` callees get a "Function properties" block of their own.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from genomes.errors import EvoError
from genomes.ptxas_flags import flags_in
from harness import tool_cache
from harness.toolchain import MissingToolError, find_ptxas

#: Error lines kept in ``CompileResult.error``; past that a count is appended,
#: since a broken variant can produce hundreds of cascading errors.
_MAX_ERROR_LINES = 20

_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)")
_COMPILING_RE = re.compile(r"Compiling (entry )?function '([^']+)'")
_PROPERTIES_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED_RE = re.compile(r"Used (\d+) registers")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_CUMULATIVE_RE = re.compile(r"(\d+) bytes cumulative stack size")
_GMEM_RE = re.compile(r"ptxas info\s*: (\d+) bytes gmem")
# "ptxas kernel.ptx, line 12; error   : Unknown symbol '%r9'" / "ptxas fatal   : ..."
_DIAG_RE = re.compile(
    r"^ptxas (?:(?P<file>.+?), line (?P<line>\d+); )?"
    r"(?P<kind>error|fatal|warning)\s*: (?P<msg>.*)$"
)
_ABORTED = "Ptx assembly aborted due to errors"
# An arch-specific target (sm_90a, sm_100f): only that arch may assemble the PTX.
_SPECIFIC_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+(sm_\d+[af])\b", re.M)


@dataclass(frozen=True)
class FunctionResources:
    """What ptxas ``-v`` reported for one function (an ``.entry`` or a ``.func``)."""

    name: str
    is_entry: bool = False
    registers: int = 0
    barriers: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_mem: int = 0
    #: bytes per constant bank, e.g. ``{0: 356}``; empty where ptxas omits cmem (13.0).
    const_mem: dict[int, int] = field(default_factory=dict)
    cumulative_stack: int = 0


@dataclass(frozen=True)
class CompileResult:
    """The outcome of one ptxas run.

    The top-level figures are those of the first ``.entry`` in the PTX (the
    only one, for evo's kernels); ``functions`` has every function ptxas
    reported, entries first in PTX order. Figures are ``None`` when ptxas
    failed and so reported nothing. Spill, stack and memory sizes are bytes.
    """

    ok: bool
    arch: str
    cubin: bytes | None = None
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_frame: int | None = None
    shared_mem: int | None = None
    const_mem: dict[int, int] = field(default_factory=dict)
    barriers: int | None = None
    gmem: int | None = None
    functions: dict[str, FunctionResources] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    log: str = ""
    error: str | None = None
    seconds: float = 0.0
    args: tuple[str, ...] = ()
    tool_failed: bool = False
    """The failure is ptxas's, not the PTX's: a timeout, a signal, or an exit status with
    no error in its log (a crash, a broken wrapper). Neither the tool cache nor the
    measurement store keeps it: the same PTX may assemble on the next try."""

    @property
    def spilled(self) -> bool:
        """True when ptxas spilled registers to local memory (a large slowdown)."""
        return bool(self.spill_stores or self.spill_loads)

    def summary(self) -> dict:
        """The JSON-safe figures (no cubin, no log) for events and the store."""
        keep = ("ok", "arch", "registers", "spill_stores", "spill_loads",
                "stack_frame", "shared_mem", "barriers", "gmem", "error", "seconds")
        out = {key: getattr(self, key) for key in keep}
        # JSON object keys must be strings.
        out["const_mem"] = {str(bank): size for bank, size in self.const_mem.items()}
        out["warnings"] = list(self.warnings)
        return out


def ptx_hash(ptx: str) -> str:
    """sha256 hex digest of the PTX text, exactly as given.

    No normalisation on purpose: this hash is only the cheap first cache in
    front of the SASS hash, so two PTX texts that differ only in whitespace or
    comments cost one extra ptxas run and then meet at the SASS hash anyway;
    a normalisation that wrongly merged two different programs would instead
    serve one program's measurement for another. An exact hash is also what
    anyone can reproduce with ``sha256sum``.
    """
    return hashlib.sha256(ptx.encode("utf-8")).hexdigest()


def _entry_names(ptx: str) -> list[str]:
    """Names of the ``.entry`` functions in PTX order (ptxas reports another order)."""
    return _ENTRY_RE.findall(ptx)


def parse_verbose(
    log: str, entry_order: Sequence[str] = ()
) -> tuple[dict[str, FunctionResources], int | None]:
    """Parse ptxas ``-v`` output into per-function figures and module gmem bytes.

    Functions named in ``entry_order`` come first, in that order; the rest
    follow in the order ptxas reported them.
    """
    found: dict[str, dict] = {}
    current: dict | None = None
    gmem = None
    for line in log.splitlines():
        if m := _GMEM_RE.search(line):
            gmem = int(m.group(1))
        elif m := _COMPILING_RE.search(line):
            current = found.setdefault(m.group(2), {"name": m.group(2)})
            current["is_entry"] = current.get("is_entry", False) or bool(m.group(1))
        elif m := _PROPERTIES_RE.search(line):
            current = found.setdefault(m.group(1), {"name": m.group(1)})
        elif current is None:
            continue
        elif m := _FRAME_RE.search(line):
            current["stack_frame"], current["spill_stores"], current["spill_loads"] = (
                int(g) for g in m.groups())
        elif m := _USED_RE.search(line):
            current["registers"] = int(m.group(1))
            if b := _BARRIERS_RE.search(line):
                current["barriers"] = int(b.group(1))
            if s := _SMEM_RE.search(line):
                current["shared_mem"] = int(s.group(1))
            if c := _CUMULATIVE_RE.search(line):
                current["cumulative_stack"] = int(c.group(1))
            current["const_mem"] = {int(bank): int(size) for size, bank in _CMEM_RE.findall(line)}

    ordered = [name for name in entry_order if name in found]
    ordered += [name for name in found if name not in ordered]
    functions = {}
    for name in ordered:
        figures = found[name]
        if name in entry_order:
            figures["is_entry"] = True
        functions[name] = FunctionResources(**figures)
    return functions, gmem


def _diagnostics(log: str, kinds: Iterable[str]) -> list[str]:
    """ptxas's diagnostic lines of the given kinds, trimmed to ``line N: kind: msg``.

    The temp file name is dropped (it is meaningless to the reader); the line
    number is what locates the problem in the variant's PTX.
    """
    kinds = set(kinds)
    out = []
    for raw in log.splitlines():
        m = _DIAG_RE.match(raw.strip())
        if not m or m.group("kind") not in kinds:
            continue
        where = f"line {m.group('line')}: " if m.group("line") else ""
        out.append(f"{where}{m.group('kind')}: {m.group('msg').strip()}")
    return out


def _error_text(log: str, returncode: int) -> str:
    """The useful part of a failed run's log, never empty."""
    lines = _diagnostics(log, ("error", "fatal"))
    if len(lines) > 1:
        # The closing "aborted due to errors" line adds nothing to the errors before it.
        lines = [line for line in lines if _ABORTED not in line] or lines
    if not lines:
        tail = [line.strip() for line in log.splitlines() if line.strip()]
        return f"ptxas exited with status {returncode}" + (f": {tail[-1]}" if tail else "")
    if len(lines) > _MAX_ERROR_LINES:
        more = len(lines) - _MAX_ERROR_LINES
        lines = lines[:_MAX_ERROR_LINES] + [f"... and {more} more"]
    return "\n".join(lines)


def _tool_failed(returncode: int | None, log: str) -> bool:
    """Whether a failed ptxas run failed by itself (``CompileResult.tool_failed``): timed
    out, killed by a signal, or exited non-zero without naming an error in the PTX."""
    return returncode is None or returncode < 0 or not _diagnostics(log, ("error", "fatal"))


def _run(cmd: list[str], cwd: str, timeout: float) -> tuple[int | None, str]:
    """Run ``cmd``; return (exit status or None on timeout, combined output).

    The child gets its own session so that on timeout the whole group dies,
    even if ptxas is reached through a wrapper script that forks.
    """
    posix = sys.platform != "win32"
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=posix,
        )
    except OSError as exc:
        raise MissingToolError(f"cannot run ptxas at {cmd[0]}: {exc}") from exc
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        if posix:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            proc.kill()
        out, _ = proc.communicate()
        return None, out.decode("utf-8", "replace")


def _split(ptxas, ptx: str) -> tuple[str, ...]:
    """``--split-compile N``: a module of N > 1 entries (a variant and its clock64 twin)
    has them optimized side by side, where this ptxas can: gemm_tile_12x12x12 with its
    twin took 0.53 s instead of 0.94 s, the same machine code (``cubin_text_hash``), which
    is why the flag is kept out of the tool cache's key and ``CompileResult.args``. The
    largest tiles' ptxas was the default suite's critical path (BENCHMARKS.md, session 15)."""
    entries = len(_entry_names(ptx))
    return ("--split-compile", str(min(entries, 4))) if entries > 1 and _splits(str(ptxas)) else ()


@functools.lru_cache(maxsize=8)
def _splits(ptxas: str) -> bool:
    """Whether this ptxas takes ``--split-compile`` (its --help lists it)."""
    try:
        out = subprocess.run([ptxas, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--split-compile" in out.stdout


def target_arch(ptx: str, arch: str) -> str:
    """The arch to assemble ``ptx`` for: its own ``.target`` when that is arch-specific
    (``sm_90a``, what Triton emits on Hopper: ptxas refuses it for ``-arch=sm_90``), else
    ``arch``, the configured one."""
    m = _SPECIFIC_TARGET_RE.search(ptx)
    return m.group(1) if m else arch


def compile_ptx(
    ptx: str,
    arch: str = "sm_90",
    *,
    opt_level: int = 3,
    extra_args: Sequence[str] = (),
    timeout: float = 120,
) -> CompileResult:
    """Assemble ``ptx`` for ``arch`` with ptxas and report what it used.

    Returns ``ok=False`` with ``error`` set when ptxas rejects the PTX or runs
    past ``timeout`` seconds; raises :class:`MissingToolError` only when there
    is no ptxas to run. PTX with an arch-specific ``.target`` is assembled for
    that target (:func:`target_arch`); ``CompileResult.arch`` says which.
    """
    if not 0 <= opt_level <= 3:
        raise EvoError(f"ptxas optimisation level must be 0..3, got {opt_level}")
    arch = target_arch(ptx, arch)
    ptxas = find_ptxas()
    # options the PTX carries (genes such as ptxas_opt; genomes.ptxas_flags) come last,
    # so that they win over the defaults here
    args = (f"-arch={arch}", f"-O{opt_level}", "-v", *map(str, extra_args), *flags_in(ptx))
    start = time.perf_counter()
    question = tool_cache.key(ptxas, args, ptx.encode("utf-8"))
    kept = tool_cache.lookup(question)  # the same ptxas, arguments and PTX: its answer
    if kept is not None:
        returncode, log, cubin = kept[0], kept[1], kept[2] or None
    else:
        with tempfile.TemporaryDirectory(prefix="evo-ptxas-") as tmp:
            Path(tmp, "kernel.ptx").write_text(ptx, encoding="utf-8")
            # Relative file names (cwd=tmp) keep the random temp path out of the log.
            cmd = [str(ptxas), *args, *_split(ptxas, ptx), "-o", "kernel.cubin", "kernel.ptx"]
            returncode, log = _run(cmd, tmp, timeout)
            cubin_path = Path(tmp, "kernel.cubin")
            cubin = cubin_path.read_bytes() if returncode == 0 and cubin_path.exists() else None
        if cubin or (returncode != 0 and not _tool_failed(returncode, log)):
            tool_cache.keep(question, returncode, log, cubin or b"")  # the PTX's own answer
    seconds = time.perf_counter() - start

    warnings = tuple(_diagnostics(log, ("warning",)))
    common = dict(arch=arch, log=log, seconds=seconds, args=args, warnings=warnings)
    if returncode is None:
        return CompileResult(ok=False, error=f"ptxas timed out after {timeout:g} s",
                             tool_failed=True, **common)
    if returncode != 0:
        return CompileResult(ok=False, error=_error_text(log, returncode),
                             tool_failed=_tool_failed(returncode, log), **common)
    if not cubin:
        return CompileResult(ok=False, error="ptxas succeeded but wrote no cubin",
                             tool_failed=True, **common)

    functions, gmem = parse_verbose(log, _entry_names(ptx))
    first = next((f for f in functions.values() if f.is_entry), None)
    first = first or FunctionResources(name="")
    return CompileResult(
        ok=True, cubin=cubin, functions=functions, gmem=gmem or 0,
        registers=first.registers, spill_stores=first.spill_stores,
        spill_loads=first.spill_loads, stack_frame=first.stack_frame,
        shared_mem=first.shared_mem, const_mem=dict(first.const_mem),
        barriers=first.barriers, **common,
    )


def compile_many(
    ptx_list: Sequence[str],
    arch: str = "sm_90",
    workers: int | None = None,
    **kwargs,
) -> list[CompileResult]:
    """Compile many PTX texts in parallel; results are in the order of ``ptx_list``.

    Threads, not processes: each task spends its time waiting on a ptxas
    subprocess (the GIL is released while waiting), so threads already keep
    every core busy, without the start-up cost of worker processes or
    pickling cubins back to the parent. ``kwargs`` go to :func:`compile_ptx`.
    """
    if not ptx_list:
        return []
    find_ptxas()  # raise MissingToolError once, here, rather than once per task
    workers = workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(ptx_list)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda ptx: compile_ptx(ptx, arch, **kwargs), ptx_list))


__all__ = [
    "CompileResult", "FunctionResources", "compile_many", "compile_ptx",
    "parse_verbose", "ptx_hash", "target_arch", "MissingToolError",
]