"""Time finalist checks run at once, as a model's searches end together on several GPUs.

    python3 -m harness.tools.bench_finalist SPEC.toml ... [--gpus 0,1,2,3] [--at-once 16]

Each spec's own PTX is checked (``harness.gpu.finalist.check_finalist``: the static
check, compute-sanitizer and the determinism run), ``--at-once`` checks together, check
``i`` on GPU ``gpus[i % len(gpus)]`` with its contexts made before its turn, as
``evo run`` books them. Prints each check's wall, the seconds its GPU was held and its
verdict, then per process of a check (memcheck, the plain run, racecheck) when each of
its steps ended, seconds from the check's start, min / median / max over the checks:
where sixteen checks at once spend the 10-17 s each took at the end of resnet50's model
job on four GPUs (BENCHMARKS.md, session 27). Needs a GPU and compute-sanitizer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _check(spec, device: int) -> dict:
    from harness.gpu.finalist import check_finalist

    began = time.perf_counter()
    result = check_finalist(spec, spec.ptx_text(), devices=(device,),
                            turn=lambda: contextlib.nullcontext(device))
    return {"kernel": spec.name, "gpu": device, "wall_s": round(time.perf_counter() - began, 2),
            "held_s": result.details.get("gpu_held_s"), "reason": result.reason,
            "steps": result.details.get("steps", {})}


def step_table(checks: list[dict]) -> list[tuple[str, str, float, float, float]]:
    """(process, step, min, median, max) over the checks that timed that step, steps in
    the order the drivers print them."""
    rows = []
    names = dict.fromkeys(name for c in checks for name in c["steps"])
    for name in names:
        steps = dict.fromkeys(step for c in checks for step in c["steps"].get(name, {}))
        for step in steps:
            seen = [c["steps"][name][step] for c in checks if step in c["steps"].get(name, {})]
            rows.append((name, step, min(seen), statistics.median(seen), max(seen)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.tools.bench_finalist",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", type=Path, help="kernel specs (.toml)")
    parser.add_argument("--gpus", default="0", help="device ordinals, e.g. 0,1,2,3")
    parser.add_argument("--at-once", type=int, default=16, help="checks run together")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    from harness.kernels.spec import load_spec

    gpus = [int(g) for g in args.gpus.split(",")]
    specs = [load_spec(p) for p in args.specs][:args.at_once]
    began = time.perf_counter()
    with ThreadPoolExecutor(len(specs)) as pool:
        checks = list(pool.map(_check, specs, [gpus[i % len(gpus)] for i in range(len(specs))]))
    wall = time.perf_counter() - began
    for c in checks:
        print(f"{c['kernel']:<48} gpu {c['gpu']}  {c['wall_s']:6.2f} s  held {c['held_s']} s  "
              f"{c['reason']}")
    walls = sorted(c["wall_s"] for c in checks)
    print(f"{len(checks)} checks at once on GPUs {args.gpus}: {wall:.2f} s; a check "
          f"{walls[0]:.2f} / {statistics.median(walls):.2f} / {walls[-1]:.2f} s (min / median / max)")
    for name, step, low, mid, high in step_table(checks):
        print(f"  {name:<10} {step:<9} {low:6.2f} {mid:6.2f} {high:6.2f} s")
    if args.out:
        args.out.write_text(json.dumps({"wall_s": wall, "checks": checks}, indent=1) + "\n")
    return 0 if all(c["reason"] == "ok" for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
