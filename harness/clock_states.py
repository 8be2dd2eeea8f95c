"""How steady is one cubin's clock64 figure within one process, over time?

    python -m harness.clock_states [--kernel gemm_tile_4x6x8] [--measurements 30] [--out states.json]

One CUDA context (``harness.gpu_runner.Runner``, an arena of its own), the kernel's
baseline and its clock64 twin assembled once, then ``--measurements`` timings of 320
launches at each of three gaps between them (0, 20 and 200 ms), each timing reported as
evo reports it (``harness.estimate.central``) with the SM clock measured just before, and
the clocks nvidia-smi reports before and after each gap's run (``harness.gpu_clocks``;
not per measurement: a query takes tens of milliseconds). Prints the
spread per gap; ``--out`` keeps every batch median. Compare with ``evo stability``, which
starts a fresh worker process for each figure: what moves there but not here comes with
the process or the GPU's state when it starts, not with the timing loop.
"""

from __future__ import annotations

import argparse
import json
import time

GAPS_S = (0.0, 0.02, 0.2)


def main(argv=None) -> int:
    from harness import gpu_timing
    from harness.backends import gpu_visible
    from harness.compile import compile_ptx
    from harness.gpu_clocks import read_clocks
    from harness.gpu_runner import Runner
    from harness.instrument import clock_entry_name, with_clock_twin
    from harness.suite import find_kernel
    from harness.estimate import batch_medians, central
    from harness.worker import MeasureRequest

    ap = argparse.ArgumentParser(prog="python -m harness.clock_states",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="gemm_tile_4x6x8")
    ap.add_argument("--measurements", type=int, default=30, help="per gap")
    ap.add_argument("--out", help="write every measurement's batch medians here (JSON)")
    args = ap.parse_args(argv)

    ok, why = gpu_visible()
    if not ok:
        ap.error(f"needs a GPU: {why}")
    spec = find_kernel(args.kernel)
    if spec.timing != "clock64":
        ap.error(f"{spec.name} is timed with {spec.timing}, not clock64")
    base = compile_ptx(spec.ptx_text())
    twin = compile_ptx(with_clock_twin(spec.ptx_text(), spec.entry))
    if not (base.ok and twin.ok):
        ap.error(f"ptxas failed: {base.error or twin.error}")
    reps = 40 * gpu_timing.CLOCK_BATCH
    request = MeasureRequest(spec=spec, cubin=base.cubin, baseline_cubin=base.cubin,
                             clock_cubin=twin.cubin, clock_entry=clock_entry_name(spec.entry),
                             check_seeds=(11, 12, 13, 14, 15), timing_seed=99,
                             min_reps=reps, max_reps=reps)
    runner = Runner(0)
    rows, smi = [], {}
    for gap in GAPS_S:
        smi[gap] = [read_clocks(0)]
        for _ in range(args.measurements):
            time.sleep(gap)
            mhz = gpu_timing.sm_mhz(runner)
            samples, _ = gpu_timing.time_clock64(runner, request)
            rows.append({"gap_s": gap, "sm_mhz": mhz,
                         "cycles": central(samples, gpu_timing.CLOCK_BATCH),
                         "batch_medians": batch_medians(samples,
                                                        gpu_timing.CLOCK_BATCH).tolist()})
        smi[gap].append(read_clocks(0))
    print(f"{spec.name} on {runner.device_name}, {args.measurements} measurements of {reps} "
          "launches per gap, one process")
    for gap in GAPS_S:
        figures = [r["cycles"] for r in rows if r["gap_s"] == gap]
        mhz = [r["sm_mhz"] for r in rows if r["gap_s"] == gap]
        print(f"gap {1000 * gap:.0f} ms: {min(figures):.2f} .. {max(figures):.2f} cycles, "
              f"spread {100 * (max(figures) / min(figures) - 1):.3f} %, "
              f"SM clock {min(mhz):.0f} .. {max(mhz):.0f} MHz")
        for when, clocks in zip(("before", "after"), smi[gap]):
            print(f"  nvidia-smi {when}: {clocks.label() if clocks else 'not available'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"kernel": spec.name, "device": runner.device_name, "rows": rows,
                       "nvidia_smi": {str(g): [c.label() if c else None for c in pair]
                                      for g, pair in smi.items()}}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
