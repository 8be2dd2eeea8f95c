"""How steady is one cubin's clock64 figure within one process, over time, and what moves it?

    python -m harness.tools.clock_states [--kernel gemm_tile_4x6x8] [--measurements 20] [--out states.json]

One CUDA context (``harness.gpu.runner.Runner``, an arena of its own), the kernel's
baseline and its clock64 twin assembled once, then ``--measurements`` timings of 320
launches under each of four conditions: back to back; 200 ms apart; with the correctness
gate run before each timing (as in a worker's request); and with one checked launch of the
baseline (another seed's upload, launch, readback) before every batch of the timing. Each
timing is reported as evo reports it (``harness.gpu.estimate.central``), with the SM clock
measured just before and after it, and nvidia-smi's clocks before and after each
condition (``harness.gpu.clocks``; not per measurement: a query takes tens of
milliseconds). Prints every figure and the spread per condition; ``--out`` keeps every
batch median. Compare with ``evo stability``, which starts a fresh worker process for each
figure: what moves there but not here comes with the process or the GPU's state when it
starts, not with the timing loop. A condition whose figures switch between states where
back to back does not names what moves the GPU between them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

CONDITIONS = (
    "back to back", "200 ms apart", "gate before each", "checked launch before each batch")


def main(argv=None) -> int:
    from harness.gpu import timing as gpu_timing
    from harness.backends import gpu_visible
    from harness.compile import compile_ptx
    from harness.gpu.clocks import read_clocks
    from harness.gpu.runner import Runner
    from harness.gpu.instrument import clock_entry_name, with_clock_twin
    from harness.kernels.suite import find_kernel
    from harness.gpu.estimate import batch_medians, central
    from harness.gpu.worker import MeasureRequest

    ap = argparse.ArgumentParser(prog="python -m harness.tools.clock_states",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="gemm_tile_4x6x8")
    ap.add_argument("--measurements", type=int, default=20, help="per condition")
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
    base_fn = runner.function(base.cubin, spec.entry)

    def one_checked_launch():
        runner.run_checked(base_fn, spec, request.check_seeds[0])

    rows, smi = [], {}
    for condition in CONDITIONS:
        smi[condition] = [read_clocks(0)]
        for _ in range(args.measurements):
            if condition == "200 ms apart":
                time.sleep(0.2)
            if condition == "gate before each":
                runner.check(request)
            before = gpu_timing.sm_mhz(runner)
            samples, _ = gpu_timing.time_clock64(
                runner, request,
                one_checked_launch if condition == "checked launch before each batch" else None)
            rows.append({"condition": condition, "sm_mhz": before,
                         "sm_mhz_after": gpu_timing.sm_mhz(runner),
                         "cycles": central(samples, gpu_timing.CLOCK_BATCH),
                         "batch_medians": batch_medians(samples,
                                                        gpu_timing.CLOCK_BATCH).tolist()})
        smi[condition].append(read_clocks(0))
    print(f"{spec.name} on {runner.device_name}, {args.measurements} measurements of {reps} "
          "launches per condition, one process")
    for condition in CONDITIONS:
        mine = [r for r in rows if r["condition"] == condition]
        figures = [r["cycles"] for r in mine]
        mhz = [m for r in mine for m in (r["sm_mhz"], r["sm_mhz_after"])]
        print(f"{condition}: {min(figures):.2f} .. {max(figures):.2f} cycles, "
              f"spread {100 * (max(figures) / min(figures) - 1):.3f} %, "
              f"std {100 * statistics.pstdev(figures) / statistics.mean(figures):.3f} %, "
              f"SM clock {min(mhz):.0f} .. {max(mhz):.0f} MHz")
        print("  figures: " + " ".join(f"{f:.1f}" for f in figures))
        for when, clocks in zip(("before", "after"), smi[condition]):
            print(f"  nvidia-smi {when}: {clocks.label() if clocks else 'not available'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"kernel": spec.name, "device": runner.device_name, "rows": rows,
                       "nvidia_smi": {c: [x.label() if x else None for x in pair]
                                      for c, pair in smi.items()}}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
