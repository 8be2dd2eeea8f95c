"""Check the suite's baseline PTX against the NumPy references on a GPU (needs CuPy).

    python -m harness.kernels.check_gpu                 # every kernel, 3 input sets each
    python -m harness.kernels.check_gpu softmax --seeds 5

Run it after `regenerate`: a kernel whose own baseline disagrees with its reference (or
whose tolerance is too tight for it) would make every variant look wrong. Outputs are
poisoned with NaN before each launch, so a kernel that skips an element cannot pass.
Prints one line per kernel with the worst error as a fraction of the tolerance allowed.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys

import numpy as np

from harness.kernels.reference import random_inputs, run_reference
from harness.kernels.spec import KernelSpec, is_int_dtype
from harness.kernels.suite import list_kernels


def worst_ratio(spec: KernelSpec, got: dict, want: dict) -> float:
    """Largest |got - want| / (atol + rtol |want|) over all outputs (inf on NaN or int mismatch)."""
    worst = 0.0
    for param in spec.outputs():
        g, w = got[param.name], want[param.name]
        if is_int_dtype(param.dtype):
            if not np.array_equal(g, w):
                return float("inf")
            continue
        g, w = g.astype(np.float64), w.astype(np.float64)
        if not np.isfinite(g).all():
            return float("inf")
        tol = spec.tolerance_for(param)
        err = np.abs(g - w)
        allowed = tol.atol + tol.rtol * np.abs(w)
        ratio = np.where(err == 0, 0.0, err / np.maximum(allowed, 1e-300))
        worst = max(worst, float(ratio.max()))
    return worst


def run_once(spec: KernelSpec, function, inputs: dict) -> dict:
    """Launch the kernel once on `inputs`; return its outputs as NumPy arrays."""
    import cupy as cp

    args, device = [], {}
    for p in spec.params:
        value = inputs[p.name]
        if p.kind == "scalar":
            args.append(value)
            continue
        array = cp.asarray(value)
        if p.role == "out" and not is_int_dtype(p.dtype):
            array.fill(np.nan)
        device[p.name] = array
        args.append(array)
    function(spec.grid, spec.block, tuple(args), shared_mem=spec.shared_mem)
    cp.cuda.runtime.deviceSynchronize()
    return {p.name: cp.asnumpy(device[p.name]) for p in spec.outputs()}


def launch_us(spec: KernelSpec, function, inputs: dict, repeats: int = 50) -> float:
    """Mean microseconds per launch over `repeats` back-to-back launches (CUDA events)."""
    import cupy as cp

    args = tuple(cp.asarray(inputs[p.name]) if p.kind == "buffer" else inputs[p.name] for p in spec.params)
    function(spec.grid, spec.block, args, shared_mem=spec.shared_mem)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeats):
        function(spec.grid, spec.block, args, shared_mem=spec.shared_mem)
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1000.0 / repeats


def check(spec: KernelSpec, seeds: int = 3) -> tuple[float, float]:
    """(worst error ratio over `seeds` input sets, microseconds per launch) for one kernel."""
    import cupy as cp

    function = cp.RawModule(path=str(spec.ptx_path)).get_function(spec.entry)
    worst = 0.0
    for seed in range(seeds):
        inputs = random_inputs(spec, np.random.default_rng(seed))
        worst = max(worst, worst_ratio(spec, run_once(spec, function, inputs), run_reference(spec, inputs)))
    return worst, launch_us(spec, function, inputs)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 1 if any kernel fails its reference."""
    parser = argparse.ArgumentParser(prog="python -m harness.kernels.check_gpu", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="kernel names or shell patterns (default: all)")
    parser.add_argument("--seeds", type=int, default=3, help="input sets per kernel")
    args = parser.parse_args(argv)
    specs = [s for s in list_kernels() if s.reference and (
        not args.names or any(fnmatch.fnmatchcase(s.name, p) for p in args.names))]
    failed = 0
    for spec in specs:
        worst, us = check(spec, args.seeds)
        ok = worst <= 1.0
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {spec.name:22s} worst err/tol {worst:8.3g}  {us:8.2f} us/launch"
              f"  grid {list(spec.grid)} block {list(spec.block)}", flush=True)
    print(f"{len(specs) - failed}/{len(specs)} kernels match their reference")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
