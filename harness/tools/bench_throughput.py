"""End-to-end evaluation throughput: how many unique candidates per second evo gets through.

    python -m harness.tools.bench_throughput --seconds 60 --backend gpu [--gpus 0,1] [--out bench.json]
    python -m harness.tools.bench_throughput --seconds 60 --backend gpu --cluster local
    python -m harness.tools.bench_throughput --seconds 5 --backend static     # CPU smoke test
    python -m harness.tools.bench_throughput --seconds 20 --per-kernel \
        --kernels gemm_tile_4x6x8,relu,relu@4M,relu@16M,relu_dram,softmax   # by kernel size

Random genomes (seeded, ``genomes.variation.random_genome``) over the 64 gemm_tile kernels
m, n, k in {2, 4, 6, 8}, one batch per kernel in turn, through the full ``Evaluator``
(materialize, PTX dedup, ptxas pool, code dedup, check + time) with a fresh temporary
store, until the time is up. The CPU stage of the next ``--ahead`` batches overlaps the
GPU stage of the current one (``Evaluator.prepare`` / ``finish``). Batches in flight when
time runs out are finished and counted (the rate divides by the real elapsed time).

Reports unique candidates per second (distinct PTX that had to be compiled), unique code
measured per second, the store's dedup hit rates, valid/invalid counts by reason, the
device and the compile pool size, and the mean seconds per candidate of each phase of the
GPU worker's measurement (``harness.phases``); ``--out`` also writes it as JSON. A static
run says so on every line with a number: it estimates, it does not measure.

``--per-kernel`` runs the benchmark once per kernel named (``--seconds`` each) and prints
a table, so rates of a one-thread tile and of 64M elements are not averaged together.
``NAME@4M`` names a suite kernel resized to 4M elements (``harness.kernels.resize``).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from genomes.errors import EvoError
from genomes.variation import random_genome
from harness.backends import BACKENDS, make_backend
from harness.backends.cluster import COMPILE_ON
from harness.evaluate import Evaluator
from harness.store import Store
from harness.kernels.suite import find_kernel, gemm_tiles

STATIC_TAG = "static estimate, not measured"


def run_bench(seconds: float, backend_kind: str = "static", batch: int = 16, seed: int = 0,
              gpus: list[int] | None = None, kernels: list[str] | None = None,
              max_len: int = 4, ahead: int = 2, cluster: str = "", in_flight: int = 1,
              cluster_compile: str = "auto") -> dict:
    """Run the benchmark for about ``seconds``; return the JSON-safe summary."""
    rng = random.Random(seed)
    names = kernels or gemm_tiles()
    reasons: collections.Counter = collections.Counter()
    phases: collections.Counter = collections.Counter()  # worker seconds by phase, summed
    fresh = 0  # measurements the worker made (not store answers)
    round_trips = 0.0  # their seconds as the run's process saw them (request to answer)
    specs = [find_kernel(n) for n in names]
    batches = 0
    with tempfile.TemporaryDirectory(prefix="evo-bench-") as tmp, \
            Store(Path(tmp, "store.sqlite")) as store, \
            make_backend(backend_kind, store=store, gpus=gpus, seed=seed,
                         cluster=cluster, cluster_compile=cluster_compile) as backend:
        evaluator = Evaluator(backend, store)
        # Start-up apart from the rate: the backend's worker and each kernel's baseline
        # (its first measurement compiles CuPy's kernels, cold the first time on a machine).
        setup = time.perf_counter()
        for spec in specs:
            evaluator.baseline(spec)
        setup = time.perf_counter() - setup
        drawn = 0

        def submit_next(pool):
            # Genomes are drawn here, in the calling thread, so the sequence does not
            # depend on how the preparing threads interleave.
            nonlocal drawn
            spec = specs[drawn % len(specs)]
            drawn += 1
            genomes = [random_genome(rng, 1, max_len) for _ in range(batch)]
            return pool.submit(evaluator.prepare, spec, genomes)

        # The stages overlap: the CPUs apply and compile the next ``ahead`` batches while
        # the backend measures ``in_flight`` batches (more than one hides a cluster's
        # round trip: the next batch is already at the worker when one comes back).
        # Batches prepared when time runs out are measured too.
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(ahead) as pool, \
                concurrent.futures.ThreadPoolExecutor(in_flight) as measuring_pool:
            pending = collections.deque(submit_next(pool) for _ in range(ahead))
            measuring: collections.deque = collections.deque()
            while pending or measuring:
                if pending and len(measuring) < in_flight:
                    ready = pending.popleft().result()
                    if time.perf_counter() - start < seconds:
                        pending.append(submit_next(pool))
                    measuring.append(measuring_pool.submit(evaluator.finish, ready))
                    continue
                for m in measuring.popleft().result():
                    reasons["ok" if m.valid else m.reason.split(":", 1)[0]] += 1
                    if not m.cached and m.notes.get("phases"):
                        fresh += 1
                        round_trips += m.seconds
                        phases.update(m.notes["phases"])
                batches += 1
        elapsed = time.perf_counter() - start
        evaluator.close()
        stats = evaluator.stats.to_json()
        summary = {
            "backend": backend.name, "device": backend.device, "chosen_because": backend.chosen_because,
            "startup_seconds": round(setup, 3),
            "buffer_bytes": sum(p.nbytes for spec in specs for p in spec.buffers()),
            # device, not backend name: a cluster of static workers estimates too
            "static": backend.device == "static", "seconds": round(elapsed, 3), "batches": batches,
            "batch_size": batch, "seed": seed, "kernels": len(names), "ahead": ahead,
            "in_flight": in_flight,
            "compile_pool": evaluator.workers, "cluster": cluster or None,
            "cluster_offers": backend.offers() if cluster else None,
            "compiled_on_workers": getattr(backend, "compiled_on_workers", 0),
            "unique_candidates_per_s": round(stats["compiled"] / elapsed, 3) if elapsed else 0.0,
            "measured_per_s": round(stats["measured"] / elapsed, 3) if elapsed else 0.0,
            "genomes_per_s": round(stats["genomes"] / elapsed, 3) if elapsed else 0.0,
            "pipeline": stats, "store": store.stats(),
            "valid": reasons.get("ok", 0), "invalid": sum(reasons.values()) - reasons.get("ok", 0),
            "by_reason": dict(reasons.most_common()),
            # mean worker seconds per fresh measurement, by phase (harness.phases)
            "phases": {name: round(s / fresh, 6) for name, s in phases.most_common()} if fresh else {},
            # the same measurements' mean seconds from the request sent to the answer read
            # in the run's process: the worker's phases, plus the pipe and the waits around them
            "round_trip_seconds": round(round_trips / fresh, 6) if fresh else None,
            # the backend's measure stage per candidate it measured (threads, store, waits)
            "measure_stage_seconds": (round(stats["measure_seconds"] / stats["measured"], 6)
                                      if stats["measured"] else None),
        }
    return summary


def format_summary(s: dict) -> str:
    """Human lines; with the static backend, every line with a number carries the tag."""
    p = s["pipeline"]
    lines = [
        f"backend {s['backend']} on {s['device']}" + (f" ({s['chosen_because']})" if s["chosen_because"] else ""),
        f"{s['seconds']:.1f} s (after {s.get('startup_seconds', 0):.1f} s starting the backend and "
        f"measuring the baselines), {s['batches']} batches of {s['batch_size']} genomes over {s['kernels']} kernels, "
        f"compile pool {s['compile_pool']}, {s['ahead']} batches prepared ahead, "
        f"{s.get('in_flight', 1)} measured at once"
        + (f", Dask cluster {s['cluster']} ({s['cluster_offers']['workers']} workers"
           + (f", {s['compiled_on_workers']} PTX compiled there" if s.get("compiled_on_workers")
              else "") + ")" if s.get("cluster") else ""),
        f"unique candidates/s: {s['unique_candidates_per_s']:.2f}  (measured/s {s['measured_per_s']:.2f}, "
        f"genomes/s {s['genomes_per_s']:.2f})",
        f"genomes {p['genomes']}, unique PTX {p['unique_ptx']} (store hits {p['ptx_hits']}, "
        f"{p['ptx_hit_rate']:.0%}), compiled {p['compiled']} (ptxas errors {p['ptxas_errors']}), "
        f"unique code {p['unique_code']} (store hits {p['code_hits']}, {p['code_hit_rate']:.0%}), "
        f"measured {p['measured']}",
        f"time: apply {p['apply_seconds']:.1f} s, compile {p['compile_seconds']:.1f} s, "
        f"measure {p['measure_seconds']:.1f} s",
        f"valid {s['valid']}, invalid {s['invalid']}"
        + "".join(f"; {reason}: {n}" for reason, n in s["by_reason"].items() if reason != "ok"),
    ]
    if s.get("phases"):
        total = sum(s["phases"].values())
        lines.append(f"worker time per measured candidate: {total * 1e3:.1f} ms; "
                     + ", ".join(f"{name} {sec * 1e3:.1f}" for name, sec in list(s["phases"].items())[:8]))
        if s.get("round_trip_seconds") is not None:
            lines.append(f"per measured candidate in the run's process: {s['round_trip_seconds'] * 1e3:.1f} ms "
                         f"from request to answer, {s['measure_stage_seconds'] * 1e3:.1f} ms of the "
                         "measure stage")
    if s["static"]:
        lines = [f"{line}  [{STATIC_TAG}]" if any(c.isdigit() for c in line) else line for line in lines]
    return "\n".join(lines)


def format_table(per_kernel: dict[str, dict]) -> str:
    """One row per kernel: its size, candidates measured per second, worker time per
    candidate and its largest phases (``--per-kernel``)."""
    lines = ["| kernel | buffers | measured/s | unique PTX/s | worker ms per candidate | largest phases (ms) |",
             "|---|---|---|---|---|---|"]
    for name, s in per_kernel.items():
        mib = s["buffer_bytes"] / 2**20
        phases = s.get("phases", {})
        top = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in list(phases.items())[:4])
        tag = f" [{STATIC_TAG}]" if s["static"] else ""
        lines.append(f"| {name} | {mib:.2f} MiB | {s['measured_per_s']:.2f} | "
                     f"{s['unique_candidates_per_s']:.2f} | {sum(phases.values()) * 1e3:.1f} | {top} |{tag}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.tools.bench_throughput", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--backend", default="auto", choices=[b for b in BACKENDS if b != "replay"])
    parser.add_argument("--gpus", default="0", help="comma-separated CUDA device ids (gpu backend)")
    parser.add_argument("--batch", type=int, default=16, help="genomes per kernel batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ahead", type=int, default=2,
                        help="batches prepared (applied, compiled) while one is measured")
    parser.add_argument("--in-flight", type=int, default=1,
                        help="batches the backend measures at once (2 hides a cluster's "
                             "round trip behind the next batch)")
    parser.add_argument("--cluster", default="",
                        help="measure on a Dask cluster: local[:N] or tcp://HOST:PORT "
                             "(harness.backends.cluster)")
    parser.add_argument("--cluster-compile", default="auto", choices=COMPILE_ON,
                        help="where ptxas runs with --cluster: the workers' hosts, this host, or "
                             "auto (this host for local, the workers for a scheduler address)")
    parser.add_argument("--kernels", help="comma-separated kernel names (default: the 64 gemm_tiles)")
    parser.add_argument("--per-kernel", action="store_true",
                        help="one benchmark per kernel (--seconds each) and a table of their rates")
    parser.add_argument("--out", type=Path, help="write the JSON summary here")
    args = parser.parse_args(argv)
    try:
        gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
        kernels = [k.strip() for k in args.kernels.split(",")] if args.kernels else None
        for name in kernels or []:
            find_kernel(name)  # a bad name fails now, not after minutes of the others
        groups = [[k] for k in kernels or gemm_tiles()] if args.per_kernel else [kernels]
        summaries = []
        for group in groups:
            summaries.append(run_bench(args.seconds, args.backend, args.batch, args.seed, gpus,
                                       group, ahead=max(1, args.ahead), cluster=args.cluster,
                                       in_flight=max(1, args.in_flight),
                                       cluster_compile=args.cluster_compile))
            print(format_summary(summaries[-1]) + "\n", flush=True)
    except (EvoError, ValueError) as err:
        print(f"bench_throughput: error: {err}", file=sys.stderr)
        return 2
    summary = summaries[0]
    if args.per_kernel:
        summary = {"per_kernel": dict(zip([g[0] for g in groups], summaries))}
        print(format_table(summary["per_kernel"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        tmp.replace(args.out)  # atomic: a reader never sees half a file
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
