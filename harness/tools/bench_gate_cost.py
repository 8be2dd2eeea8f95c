"""What the gate and timer cost per evaluation, and the figure they give (GPU only).

Measures the unmodified kernel of each named suite kernel ``repeats`` times in one GPU
worker (every measurement checks and times anew: the worker caches modules, inputs and
baseline outputs, not verdicts) and prints, per kernel, the median wall seconds of one
measurement in the worker, the median figure and the spread of the figures. Run it with
two versions of the harness on one machine to see what a change to the gate costs:

    python3 -m harness.tools.bench_gate_cost gemm_tile_4x6x8 relu softmax --repeats 5
    CUPY_CACHE_DIR=$(mktemp -d) python3 -m harness.tools.bench_gate_cost gelu --profile-first
"""

from __future__ import annotations

import argparse
import json
import statistics


def main(argv=None) -> None:
    from harness.compile import compile_ptx
    from harness.gpu.instrument import instrument
    from harness.kernels.suite import find_kernel
    from harness.gpu.worker import GpuWorker, MeasureRequest

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="+")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile-first", action="store_true",
                        help="instead: profile each kernel's first measurement in this process "
                             "(cProfile; set CUPY_CACHE_DIR to an empty folder for a cold one)")
    args = parser.parse_args(argv)
    if args.profile_first:
        return _profile_first(args.kernels)
    with GpuWorker(0) as worker:
        for name in args.kernels:
            spec = find_kernel(name)
            ptx = spec.ptx_text()
            cubin = compile_ptx(ptx).cubin
            clock = compile_ptx(instrument(ptx, spec.entry)).cubin if spec.timing == "clock64" else None
            request = MeasureRequest(spec=spec, cubin=cubin, baseline_cubin=cubin, clock_cubin=clock,
                                     check_seeds=(11, 12, 13, 14, 15), timing_seed=99,
                                     timeout_s=120.0)
            worker.measure(request)  # first: loads, inputs, baseline outputs
            ms = [worker.measure(request) for _ in range(args.repeats)]
            bad = [m.reason for m in ms if not m.valid]
            cycles = [m.cycles for m in ms if m.valid]
            print(json.dumps({
                "kernel": name, "device": ms[0].device, "valid": not bad, "reasons": bad[:1],
                "seconds_median": round(statistics.median(m.seconds for m in ms), 4),
                "cycles_median": round(statistics.median(cycles), 1) if cycles else None,
                "spread": round(max(cycles) / min(cycles) - 1, 5) if cycles else None,
                # launch-to-launch noise within one measurement, relative to its figure
                "robust_std": round(statistics.median(
                    m.notes["robust_std"] / m.cycles for m in ms if m.valid), 5) if cycles else None,
                "timer": ms[0].timer,
                "reuse_probe_us": ms[0].notes.get("reuse_probe_us")}), flush=True)


def _profile_first(kernels: list[str]) -> None:
    """Each kernel's first and second measurement by a Runner in this process, the first
    under cProfile (its 12 costliest calls): what a fresh worker spends before the GPU
    does anything, CuPy's kernel compiles included."""
    import cProfile
    import pstats
    import time

    from harness.compile import compile_ptx
    from harness.gpu.runner import Runner
    from harness.gpu.instrument import instrument
    from harness.kernels.suite import find_kernel
    from harness.gpu.worker import MeasureRequest

    runner = Runner(0)
    for name in kernels:
        spec = find_kernel(name)
        ptx = spec.ptx_text()
        cubin = compile_ptx(ptx).cubin
        clock = compile_ptx(instrument(ptx, spec.entry)).cubin if spec.timing == "clock64" else None
        request = MeasureRequest(spec=spec, cubin=cubin, baseline_cubin=cubin, clock_cubin=clock,
                                 check_seeds=(11, 12, 13, 14, 15), timing_seed=99, timeout_s=300.0)
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        first = runner.measure(request)
        profile.disable()
        t1 = time.perf_counter()
        runner.measure(request)
        print(f"{name}: first {t1 - t0:.2f} s ({first.reason}), second "
              f"{time.perf_counter() - t1:.3f} s", flush=True)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(12)


if __name__ == "__main__":
    main()
