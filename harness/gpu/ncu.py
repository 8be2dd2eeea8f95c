"""One Nsight Compute pass over a variant: throughput, hit rates, occupancy, top stalls.

    python -m harness.gpu.ncu SPEC CUBIN [--grid X,Y,Z --block X,Y,Z]   # the profiled launch

``profile(spec, ptx, launch)`` assembles the variant, and runs ``ncu`` on a child Python
that launches it once on seed-0 inputs (this module's ``main``), asking for the metrics in
``METRICS`` and every ``smsp__average_warps_issue_stalled_*_per_issue_active.ratio`` (how
many cycles per issued instruction warps spent stalled for each reason). The result is
plain JSON: ``{"metrics": {label: value}, "stalls": [[reason, ratio], ...] (top 3)}``, or
``{"error": "..."}`` when ncu is missing, not permitted to read the counters, or fails.
It needs a GPU and ncu; the figures are counters of one launch, not a timing.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: metric -> the label the prompt shows
METRICS = {
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory throughput, % of peak",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute (SM) throughput, % of peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy, %",
    "l1tex__t_sector_hit_rate.pct": "L1 hit rate, %",
    "lts__t_sector_hit_rate.pct": "L2 hit rate, %",
}
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
TOP_STALLS = 3


def find_ncu() -> str | None:
    """``ncu`` on PATH, or in the CUDA toolkit's usual places."""
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in sorted(Path("/usr/local").glob("cuda*/bin/ncu"), reverse=True):
        return str(candidate)
    return None


def profile(spec, ptx: str, launch=None, timeout: float = 180.0) -> dict:
    """The ncu figures of ``ptx`` launched as ``launch`` (default: the spec's); see above."""
    from harness.compile import compile_ptx
    from harness.kernels.spec_write import spec_file

    ncu = find_ncu()
    if ncu is None:
        return {"error": "ncu not found (Nsight Compute is part of the CUDA toolkit)"}
    compiled = compile_ptx(ptx)
    if not compiled.ok:
        return {"error": f"ptxas: {compiled.error}"}
    launch = launch or spec.launch
    with tempfile.TemporaryDirectory(prefix="evo-ncu-") as tmp:
        cubin = Path(tmp, "variant.cubin")
        cubin.write_bytes(compiled.cubin)
        spec_path = spec_file(spec, Path(tmp))  # the profiled process reads it from a file
        cmd = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--launch-count", "1",
               "--kernel-name", spec.entry,
               "--metrics", ",".join([*METRICS, f"regex:{STALL_PREFIX}.*{STALL_SUFFIX}"]),
               sys.executable, "-m", "harness.gpu.ncu", str(spec_path), str(cubin),
               "--grid", ",".join(map(str, launch.grid)),
               "--block", ",".join(map(str, launch.block))]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  cwd=str(Path(__file__).resolve().parents[2]))
        except subprocess.TimeoutExpired:
            return {"error": f"ncu did not finish in {timeout:g} s"}
    return parse_raw_csv(done.stdout, done.stderr, done.returncode)


def parse_raw_csv(stdout: str, stderr: str = "", returncode: int = 0) -> dict:
    """``ncu --csv --page raw`` output -> the figures (module docstring), or an error."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        said = [line for line in (stdout + "\n" + stderr).splitlines()
                if "ERR" in line or "rror" in line]
        why = said[0].strip() if said else f"no results (exit status {returncode})"
        return {"error": f"ncu: {why}"}
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    values = next((r for r in rows[1:] if r and r[0].strip().isdigit()), None)
    if values is None:
        return {"error": "ncu: no profiled launch in its output"}
    found = {}
    for name, text in zip(header, values):
        try:
            found[name] = float(text.replace(",", ""))
        except ValueError:
            continue
    metrics = {label: round(found[m], 2) for m, label in METRICS.items() if m in found}
    stalls = sorted(((name[len(STALL_PREFIX):-len(STALL_SUFFIX)], round(v, 3))
                     for name, v in found.items()
                     if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)
                     and v > 0), key=lambda kv: -kv[1])
    if not metrics and not stalls:
        return {"error": "ncu: none of the asked metrics in its output"}
    return {"metrics": metrics, "stalls": [list(s) for s in stalls[:TOP_STALLS]]}


def main(argv: list[str] | None = None) -> int:
    """The profiled process: launch the cubin once on the spec's seed-0 inputs."""
    parser = argparse.ArgumentParser(prog="python -m harness.gpu.ncu", description=__doc__)
    parser.add_argument("spec", type=Path)
    parser.add_argument("cubin", type=Path)
    parser.add_argument("--grid", default="")
    parser.add_argument("--block", default="")
    args = parser.parse_args(argv)  # --help and usage errors need no GPU

    import cupy

    from harness.gpu.input_sets import make_inputs
    from harness.gpu.runner import allow_shared
    from harness.kernels.spec import load_spec

    spec = load_spec(args.spec)
    grid = tuple(int(v) for v in args.grid.split(",")) if args.grid else spec.grid
    block = tuple(int(v) for v in args.block.split(",")) if args.block else spec.block
    inputs = make_inputs(spec, 0)
    # buffers to the device; scalars are NumPy scalars of the param's type already
    values = tuple(cupy.asarray(inputs[p.name]) if p.kind == "buffer" else inputs[p.name]
                   for p in spec.params)
    function = allow_shared(cupy, cupy.RawModule(path=str(args.cubin)).get_function(spec.entry),
                            spec.shared_mem)
    function(grid, block, values, shared_mem=spec.shared_mem)
    cupy.cuda.runtime.deviceSynchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
