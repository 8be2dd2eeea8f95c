"""Finalists checked harder: what a kernel's best variant must also pass before it is kept.

The correctness gate (``harness.gpu.gate``, run by the GPU worker) compares outputs. Some
defects leave the outputs right and so pass it: a read past the end of a buffer (canaries
see writes, not reads), a shared-memory race that did not fire on the checked launches, a
``.nc`` load of a buffer the kernel writes (undefined behaviour that happens to work), a
result that changes from run to run. ``check_finalist(spec, ptx, launch)`` runs these checks
(the processes of 2-4 at once) and reports the first failure in this order:

1. **static**: no ``ld.global.nc`` from a pointer param the kernel also stores through
   (``unsafe_nc_loads``; the ``cache_ld`` transform never makes one, an LLM patch may);
2. **memcheck**: ``compute-sanitizer --tool memcheck`` around one launch by
   ``harness.gpu.finalist_driver``, which gives every buffer its own exact-size ``cudaMalloc``
   (the worker's one arena would hide out-of-bounds accesses from memcheck) and
   ``--padding`` keeps neighbouring allocations apart;
3. **racecheck**: the same under ``--tool racecheck`` (skipped when the kernel uses no
   shared memory: racecheck checks nothing else);
4. **determinism**: the memcheck launch's outputs and a plain launch's in another process,
   on the same inputs, must be bitwise identical (the sanitizer changes the kernel's timing,
   never its arithmetic; a third process for a second plain run cost every check its start
   and its copies: sixteen checks run at once at the end of a model's searches); within
   the spec's tolerance where the baseline itself adds floats atomically (an embedding's
   backward, a split reduction: the order of the additions, so the last bits of each sum,
   change from run to run in the baseline too).

The result says ``ok`` only when every step ran and passed. Where compute-sanitizer is
missing, or cannot check on this machine (gVisor GPU machines refuse it: "Device not
supported"), the result is ``ok=False`` with a reason starting ``not run:`` and
``ran=False``: the caller keeps the variant and says the check did not run, never a
silent pass.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.gpu.ready_runs import ROOT, checkout_env, run_when_ready, visible_as

OK = "ok"
NOT_RUN = "not run"
STATIC = "static"
UNSAFE_NC = "unsafe .nc load"
MEMCHECK = "memcheck"
RACECHECK = "racecheck"
NONDETERMINISTIC = "not deterministic"
DRIVER_FAILED = "driver failed"

PADDING_BYTES = 4096  # memcheck --padding: a gap after every allocation, so reads past one
# buffer's end do not land in the next buffer (which memcheck would take for valid)
PRINT_LIMIT = 100  # errors printed: every API error of a clean run, so that all are discounted
KERNEL_FILTER = ("--kernel-name", "kne={entry}")
"""The sanitizer's option that makes it check the variant's kernel alone (its entry's exact
name): the driver's own kernels (CuPy's input draws and poison fills over hundreds of MB
for a model's kernels) then run without its instrumentation; API errors are still seen.
Sixteen checks of resnet50's kernels at once: 23.4 -> 19.6 s (BENCHMARKS.md, session 23)."""
DRIVER_OK = "evo-finalist-driver: ok"
"""The line the driver prints after a launch that synchronized without a CUDA error."""
SAVED_OUTPUTS_BYTES = 64 << 20
"""Outputs this large and up are compared by their sha256 alone where they must be bitwise
equal (``--digest-only``): a failure then names the outputs that differ, not the first
differing element, and the check writes no copy of hundreds of MB per run."""


@dataclass
class FinalistResult:
    """``ok``: every step ran and passed. ``reason``: "ok", "not run: ...", or the first
    failure ("memcheck: ...", "racecheck: ...", "not deterministic: ...", "unsafe .nc
    load: ..."). ``details``: per step, what ran and what it found."""

    ok: bool
    reason: str
    details: dict = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        """False when the checks could not run here (no compute-sanitizer, unsupported
        device): the variant was neither passed nor failed."""
        return not self.reason.startswith(NOT_RUN)


# ---------------------------------------------------------------------- static check


def unsafe_nc_loads(ptx: str) -> list[str]:
    """One line per ``ld.global.nc`` whose pointer may come from a param the same function
    stores through (``.nc`` requires data read-only for the kernel's whole run)."""
    from genomes.memory import PointerInfo, written_params
    from genomes.ptx import parse

    found = []
    for fn in parse(ptx).functions:
        info = PointerInfo(fn)
        written = written_params(fn, info)
        for ins in fn.instructions():
            if ins.op != "ld" or "nc" not in ins.mods or ins.address() is None:
                continue
            base = ins.address().base
            prov = info.provenance(base) if base.startswith("%") else {base}
            hit = sorted(prov & written) or (["an unknown pointer"] if "*" in written else [])
            if hit:
                found.append(f"{' '.join(ins.render().split())} reads {', '.join(hit)}, which "
                             f"{fn.name} also writes")
    return found


# ---------------------------------------------------------------------- sanitizer output


def find_sanitizer() -> str | None:
    """compute-sanitizer's path: $EVO_COMPUTE_SANITIZER, PATH, $CUDA_HOME/bin,
    /usr/local/cuda*/bin, or the nvidia-cuda-sanitizer-api wheel; None if none."""
    env = os.environ.get("EVO_COMPUTE_SANITIZER")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    dirs = [Path(os.environ["CUDA_HOME"]) / "bin"] if os.environ.get("CUDA_HOME") else []
    dirs += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*/bin"))]
    dirs += [Path(p) for p in glob.glob(f"{sys.prefix}/lib/python3*/site-packages/nvidia/"
                                        "*sanitizer*/compute-sanitizer")]
    for d in dirs:
        exe = d / "compute-sanitizer"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return None


_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*([\d,]+) errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*([\d,]+) hazards? displayed \(([\d,]+) errors?, "
                           r"([\d,]+) warnings?\)")
_UNSUPPORTED = ("Device not supported", "Target application terminated before first instrumented",
                "Unable to find injection library", "Error: Failed to initialize")


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _first_report(text: str) -> str:
    """The first error report of a sanitizer log, joined into one line ("Invalid __global__
    read of size 4 bytes at relu+0x90 by thread (0,0,0) in block (4095,0,0) ..."); a
    device-side report before any failed API call ("Program hit ...")."""
    lines = [ln.removeprefix("=========").strip() for ln in text.splitlines()
             if ln.startswith("=========")]
    heads = [i for i, line in enumerate(lines) if "SUMMARY" not in line and re.match(
        r"(Invalid|Error|Warning|Out-of-range|Misaligned|Malformed|Race|Barrier|Uninitialized|"
        r"Hardware|Program hit)", line, re.IGNORECASE)]
    device = [i for i in heads if not lines[i].startswith("Program hit")]
    if not heads:
        return ""
    i = (device or heads)[0]
    rest = []
    for nxt in lines[i + 1:i + 5]:
        if not nxt or nxt.startswith(("Saved host backtrace", "Host Frame")):
            break
        rest.append(nxt)
    return " ".join([lines[i], *rest])


def parse_sanitizer(tool: str, text: str, returncode: int | None) -> tuple[str, dict]:
    """(verdict, facts) from one compute-sanitizer run of the driver: verdict "passed",
    "failed" (errors found: facts["first"] names the first) or "not run" (the tool could
    not check here: facts["why"]). ``text`` is its stdout and stderr together."""
    facts: dict = {"returncode": returncode}
    summary = _ERROR_SUMMARY.search(text)
    errors = _num(summary.group(1)) if summary else None
    # CUDA API calls that returned an error (CuPy probing at import, or the launch failure
    # that follows a device error) count in the summary too; only the kernel's own count.
    api = len(re.findall(r"^=+ Program hit ", text, re.MULTILINE))
    if errors is not None and api:
        facts["api_errors"] = api
        errors = max(0, errors - api)
    race = _RACE_SUMMARY.search(text) if tool == RACECHECK else None
    if race:
        facts.update(hazards=_num(race.group(1)), warnings=_num(race.group(3)))
        errors = max(errors or 0, _num(race.group(2)))
    facts["errors"] = errors
    launched = DRIVER_OK in text
    marker = next((m for m in _UNSUPPORTED if m in text), None)
    if marker is None and "setup error" in _driver_error(text):
        marker = _driver_error(text)  # no GPU, no CuPy: the kernel never ran
    if marker or errors is None:  # no summary: the tool did not finish (never a silent pass)
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
        facts["why"] = marker or " | ".join(tail) or f"exit code {returncode}, no output"
        return NOT_RUN, facts
    if errors:
        facts["first"] = _first_report(text)
        return "failed", facts
    if launched and returncode == 0:
        return "passed", facts
    facts["first"] = _driver_error(text) or f"the driver exited with code {returncode}"
    return "failed", facts


def _driver_error(text: str) -> str:
    m = re.search(r"^evo-finalist-driver: (.+)$", text, re.MULTILINE)
    return m.group(1) if m and DRIVER_OK not in m.group(0) else ""


# ---------------------------------------------------------------------- running


def _driver_cmd(cubin: Path, spec_path: Path, launch, seed: int,
                devices: tuple[int, ...] = ()) -> list[str]:
    cmd = [sys.executable, "-m", "harness.gpu.finalist_driver", str(cubin), str(spec_path),
           "--seed", str(seed), "--wait-turn", "--devices", ",".join(map(str, devices))]
    if launch is not None:
        cmd += ["--launch", json.dumps(launch.to_json())]
    return cmd


def uses_shared_memory(spec, ptx: str) -> bool:
    """True when the kernel declares shared memory or the spec gives it dynamic shared memory."""
    return spec.shared_mem > 0 or bool(re.search(r"\.shared\b", ptx))


FLOAT_ATOMIC_ADD = re.compile(
    r"\b(?:atom|red)(?:\.\w+)*\.add(?:\.\w+)*\.(?:f16x2|f16|bf16x2|bf16|f32|f64)\b")


def adds_floats_atomically(ptx: str) -> bool:
    """The code adds floats with atomics (``atom``/``red`` ``.add`` of a float type)."""
    return bool(FLOAT_ATOMIC_ADD.search(ptx))


def _compare_runs(spec, first: Path, second: Path, seed: int, ordered: bool = True) -> str:
    """"" when two runs' outputs are bitwise equal (``ordered``) or, for a kernel whose
    baseline adds floats atomically, within the spec's tolerance; else what differs."""
    from harness.gpu import gate
    from harness.gpu.finalist_driver import digest_path

    digests = [json.loads(Path(digest_path(f)).read_text())
               if Path(digest_path(f)).is_file() else None for f in (first, second)]
    if digests[0] is not None and digests[0] == digests[1]:
        return ""  # bitwise equal: the outputs (a resnet layer's are 200 MB) stay unread
    if ordered and None not in digests and not (first.is_file() and second.is_file()):
        differ = [name for name in digests[0] if digests[0][name] != digests[1].get(name)]
        return (f"{NONDETERMINISTIC}: {', '.join(differ)} differ bitwise between two runs on "
                f"the same inputs (seed {seed}; compared by sha256)")
    a, b = np.load(first), np.load(second)
    if not ordered:
        same, why = gate.compare({k: a[k] for k in a.files}, {k: b[k] for k in b.files}, spec)
        return "" if same else (f"{NONDETERMINISTIC}: two runs on the same inputs (seed {seed}) "
                                f"differ beyond the tolerance: {why}")
    for p in spec.outputs():
        x, y = a[p.name].view(np.uint8), b[p.name].view(np.uint8)
        width = np.dtype(a[p.name].dtype).itemsize
        differ = (x.reshape(-1, width) != y.reshape(-1, width)).any(axis=1)
        if differ.any():
            return (f"{NONDETERMINISTIC}: {int(differ.sum())} of {differ.size} elements of "
                    f"{p.name} differ bitwise between two runs on the same inputs (seed {seed}); "
                    f"first {p.name}[{int(np.flatnonzero(differ)[0])}]")
    return ""


def check_finalist(spec, ptx: str, launch=None, *, sanitizer: str | None = None,
                   seed: int = 1, timeout_s: float = 600.0, arch: str = "sm_90",
                   gpu: int | None = None, turn=None, devices: tuple[int, ...] = ()) -> FinalistResult:
    """Run the module docstring's four checks on ``ptx`` (a variant of ``spec``) with
    ``launch`` (None: the spec's) on device ``gpu`` (None: the default one), or where
    ``turn`` is given, on the device its turn gives (a context manager factory, such as
    ``evo.driver.GpuTurns.checks``: taken only once the processes are ready; ``devices``:
    those it may give, or ``gpu``, whose contexts the processes make before; where that is
    one GPU, the processes see it alone, ``ready_runs.visible_as``); never raises for
    what the variant does."""
    from harness.compile import compile_ptx
    from harness.kernels.spec_write import spec_file

    devices = devices or ((gpu,) if gpu is not None and turn is None else ())
    env, turn = checkout_env(), turn or (lambda: contextlib.nullcontext(gpu))
    only = visible_as(devices[0]) if len(devices) == 1 else None
    if only is not None:  # its processes see its GPU alone, as their ordinal 0
        env["CUDA_VISIBLE_DEVICES"] = only
        turn, devices = functools.partial(_seen_as_first, turn, devices[0]), (0,)
    details: dict = {}
    unsafe = unsafe_nc_loads(ptx)
    details[STATIC] = unsafe or "no .nc load of a written buffer"
    if unsafe:
        return FinalistResult(False, f"{UNSAFE_NC}: {unsafe[0]}", details)
    exe = sanitizer or find_sanitizer()
    if exe is None:
        return FinalistResult(False, f"{NOT_RUN}: compute-sanitizer not found (looked at "
                              "$EVO_COMPUTE_SANITIZER, PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin)",
                              details)
    compiled = compile_ptx(ptx, arch)
    if not compiled.ok:
        return FinalistResult(False, f"{DRIVER_FAILED}: ptxas: {compiled.error}", details)
    with tempfile.TemporaryDirectory(prefix="evo-finalist-") as tmp:
        cubin = Path(tmp, "variant.cubin")
        cubin.write_bytes(compiled.cubin)
        spec_path = spec_file(spec, Path(tmp))  # the driver reads the spec from a file
        tools = [MEMCHECK, RACECHECK] if uses_shared_memory(spec, ptx) else [MEMCHECK]
        if RACECHECK not in tools:
            details[RACECHECK] = "skipped: the kernel uses no shared memory"
        entry = (launch.entry if launch is not None else None) or spec.entry
        commands = {tool: [exe, "--tool", tool, "--print-limit", str(PRINT_LIMIT),
                           *(["--padding", str(PADDING_BYTES)] if tool == MEMCHECK else []),
                           *(arg.format(entry=entry) for arg in KERNEL_FILTER),
                           *_driver_cmd(cubin, spec_path, launch, seed, devices=devices)]
                    for tool in tools}
        # the memcheck launch is the determinism check's first run, a plain one its second
        ordered = not adds_floats_atomically(spec.ptx_text())
        digest_only = ordered and sum(p.nbytes for p in spec.outputs()) >= SAVED_OUTPUTS_BYTES
        outs = {MEMCHECK: Path(tmp, "memcheck.npz"), "run": Path(tmp, "run.npz")}
        commands["run"] = _driver_cmd(cubin, spec_path, launch, seed, devices=devices)
        for name, out in outs.items():
            commands[name] += ["--out", str(out), *(["--digest-only"] if digest_only else [])]
        # The runs are independent processes: all at once, read in the docstring's order.
        # Each needs ~1 s to start Python and CuPy (more under the sanitizer) before it
        # touches the GPU: they start first, and the GPU is held only once all are ready.
        began = time.time()
        runs, held = run_when_ready(commands, timeout_s, ROOT, env, turn)
        details["gpu_held_s"] = round(held, 2)
        details["steps"] = {name: _steps(runs[name][1], began) for name in commands}
        failed = _first_failure(tools, commands, runs, details)
        if failed is not None:
            return failed
        differ = _compare_runs(spec, *outs.values(), seed, ordered)
        details["determinism"] = differ or (
            f"two runs bitwise identical (seed {seed})" if ordered else
            f"two runs within the tolerance (seed {seed}; the baseline adds floats atomically)")
        if differ:
            return FinalistResult(False, differ, details)
    return FinalistResult(True, OK, details)


@contextlib.contextmanager
def _seen_as_first(turn, device: int):
    """``turn`` for processes that see this process's GPU ``device`` alone (their ordinal
    0); a turn on any other GPU is a caller's bug, never run on the wrong GPU."""
    with turn() as given:
        if given not in (device, None):  # None: the default device, here the one booked
            raise RuntimeError(f"the check's turn gave GPU {given}; its processes see GPU "
                               f"{device} alone")
        yield 0


def _steps(text: str, began: float) -> dict:
    """A driver's ``STEPS`` line as seconds since the check began (its processes started):
    where a check's time went ({} where the driver printed none)."""
    from harness.gpu.finalist_driver import STEPS

    m = re.search(re.escape(STEPS) + r" (\{[^\n]*?\})", text)
    if m is None:
        return {}
    return {step: round(when - began, 2) for step, when in json.loads(m.group(1)).items()}


def _first_failure(tools: list[str], commands: dict, runs: dict,
                   details: dict) -> FinalistResult | None:
    """The first check of ``runs`` (``ready_runs.run_when_ready``'s) that failed or could not run, in
    the order sanitizer tools, then the plain run; None when all passed."""
    for tool in tools:
        code, text, seconds = runs[tool]
        verdict, facts = parse_sanitizer(tool, text, code)
        details[tool] = {**facts, "verdict": verdict, "seconds": round(seconds, 2),
                         "command": " ".join(commands[tool][:8]) + " ..."}
        if verdict == NOT_RUN:
            return FinalistResult(False, f"{NOT_RUN}: {tool} could not check on this "
                                  f"machine: {facts['why']}", details)
        if verdict == "failed":
            what = (f"{facts['errors']} errors; first: {facts['first']}" if facts.get("errors")
                    else facts["first"])
            return FinalistResult(False, f"{tool}: {what}", details)
    for name in [n for n in commands if n not in tools]:
        code, text, _ = runs[name]
        if code != 0 or DRIVER_OK not in text:
            why = _driver_error(text) or text.strip()[-300:]
            if "setup error" in why:
                return FinalistResult(False, f"{NOT_RUN}: the determinism runs could not "
                                      f"start: {why}", details)
            return FinalistResult(False, f"{DRIVER_FAILED}: {why}", details)
    return None
