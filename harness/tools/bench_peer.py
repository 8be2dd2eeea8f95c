"""A kernel, its evolved variant and what a user would run instead, timed the same way.

    python -m harness.tools.bench_peer --kernel relu --genome 'coarsen(k=4)' [--kernel gelu ...]
    python -m harness.tools.bench_peer --run runs/NAME        # every kernel's best of a run

For each kernel (a suite name or spec path) with a ``peer`` (``harness.kernels.peers``):

* the baseline and the variant through the full pipeline on the GPU (correctness gate,
  then CUDA events around a captured graph of back-to-back launches: ``us_per_launch``);
* the peer (a torch function) on the same inputs, timed the same way (a CUDA graph of the
  same number of calls, replayed between events), after checking that its output agrees
  with the spec's NumPy reference;
* bytes the kernel must move (inputs read once, outputs written once, inout both) as
  achieved GB/s and as a fraction of the copy bandwidth at that size: torch's ``copy_``
  of a buffer moving the same bytes (read + write), graph-replayed, so that a kernel
  whose data fits in the L2 is held to the L2's bar and a larger one to DRAM's. The
  DRAM bar (a 1 GiB copy) heads the table.

Prints a Markdown table; ``--out`` writes it as JSON too. Needs a GPU, CuPy and torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from genomes.errors import EvoError
from genomes.genome import Genome, load_genome
from harness.kernels.peers import time_graph_us, time_peer


def copy_bandwidth_gbs(torch, nbytes: int = 1 << 30) -> float:
    """Device copy bandwidth (read + write bytes per second), torch ``copy_``, graph-timed."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    us = time_graph_us([lambda: dst.copy_(src)], torch)
    return 2 * nbytes / us / 1e3


def run(cases: list[tuple[str, Genome]], gpu: int = 0) -> dict:
    import torch

    from harness.backends.gpu import GpuBackend
    from harness.evaluate import Evaluator
    from harness.kernels.suite import find_kernel

    torch.cuda.set_device(gpu)
    copy = copy_bandwidth_gbs(torch)
    copies: dict[int, float] = {}  # copy bandwidth by size: kernels of one size share it

    def same_bytes(nbytes: int) -> float:
        if nbytes not in copies:
            copies[nbytes] = copy_bandwidth_gbs(torch, nbytes)
        return copies[nbytes]

    rows = []
    backend = GpuBackend([gpu], seed=11)
    try:
        evaluator = Evaluator(backend)
        for name, genome in cases:
            spec = find_kernel(name)
            base, best = evaluator.evaluate(spec, [Genome(), genome])
            moved = spec.bytes_read + spec.bytes_written
            row = {"kernel": spec.name, "genome": str(genome), "device": backend.device,
                   "baseline_us": base.notes.get("us_per_launch"), "valid": best.valid,
                   "reason": best.reason, "best_us": best.notes.get("us_per_launch"),
                   "launch": best.notes.get("launch"), "bytes": moved,
                   "copy_gbs_same_bytes": same_bytes(max(moved // 2, 4096))}
            if spec.peer:
                row.update(time_peer(spec, torch))
            rows.append(row)
            print(_line(row), file=sys.stderr, flush=True)
    finally:
        backend.close()
    return {"copy_gbs": copy, "rows": rows}


def _line(row: dict) -> str:
    copy = row["copy_gbs_same_bytes"]

    def gbs(us):
        return row["bytes"] / us / 1e3 if us else None

    parts = [row["kernel"], row["genome"] or "(baseline)"]
    for key in ("baseline_us", "best_us", "peer_us"):
        us = row.get(key)
        parts.append(f"{us:.2f} µs ({gbs(us):.0f} GB/s, {100 * gbs(us) / copy:.0f} %)"
                     if us else "-")
    base, best, peer = row.get("baseline_us"), row.get("best_us"), row.get("peer_us")
    parts.append(f"{base / best:.2f}x" if base and best else "-")
    parts.append(f"{peer / best:.2f}x" if peer and best else "-")
    parts.append({True: "yes", False: "NO", None: "-"}[row.get("peer_agrees")])
    if not row["valid"]:
        parts.append(f"invalid: {row['reason']}")
    return "| " + " | ".join(parts) + " |"


def table(result: dict) -> str:
    head = ("| kernel | genome | baseline | evolved | peer (torch) | evolved vs baseline | "
            "evolved vs peer | peer agrees with reference |")
    lines = [f"DRAM copy bandwidth (torch copy_, 1 GiB, read + write): {result['copy_gbs']:.0f} "
             "GB/s. Each time: µs per launch (GB/s moved, % of a copy of the same bytes).",
             "", head, "|" + " --- |" * 8]
    lines += [_line(r) for r in result["rows"]]
    return "\n".join(lines)


def _cases_from_run(path: Path) -> list[tuple[str, Genome]]:
    best = path / "best"
    if not best.is_dir():
        raise EvoError(f"{path}: no best/ folder (not an evo run, or it found nothing yet)")
    return [(p.name[:-len(".genome.json")], load_genome(str(p)))
            for p in sorted(best.glob("*.genome.json"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.tools.bench_peer",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", action="append", default=[],
                        help="a kernel (suite name or spec); repeat for several")
    parser.add_argument("--genome", action="append", default=[],
                        help="the variant of the --kernel at the same position (inline or JSON)")
    parser.add_argument("--run", type=Path, help="take every kernel's best genome of this run")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    try:
        cases = _cases_from_run(args.run) if args.run else []
        if len(args.genome) not in (0, len(args.kernel)):
            raise EvoError("give one --genome per --kernel (or none: baselines only)")
        genomes = [load_genome(g) for g in args.genome] or [Genome()] * len(args.kernel)
        cases += list(zip(args.kernel, genomes))
        if not cases:
            raise EvoError("nothing to measure: give --kernel (and --genome) or --run")
        result = run(cases, args.gpu)
    except EvoError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
