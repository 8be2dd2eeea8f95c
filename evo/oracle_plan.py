"""The oracle's space grouped by machine code on the CPU: the genomes a GPU must measure.

The oracle (``evo.strategies.oracle``) evaluates every genome of its space, 56,700 a
kernel, and most of them share their machine code with another (93 % of the oracle's
evaluations on four gemm tiles were answered by the store, BENCHMARKS.md session 3). Two
genomes with the same machine code, registers, shared memory and launch run the same
kernel, so only one of each group needs the GPU. What the oracle spends is ptxas time, and
ptxas runs on any machine: this module applies and compiles the whole space here, groups
it by what the harness keys measurements by (``harness.evaluate.compiled_key``: the code
of every function the kernel can reach, its registers and shared memory, plus its launch), and writes the first
genome of each group in the oracle's order. ``evo bench --oracle-genomes FILE`` then
measures those alone; the best of them is the oracle's best.

The grouping holds for the ptxas that made it (the plan records its version and the oracle
reports it beside the device's): a GPU host whose ptxas differs would group otherwise.

    python3 -m evo.oracle_plan -o oracle_plan.json.gz              # the four oracle kernels
    python3 -m evo.oracle_plan --kernels gemm_tile_4x4x4 -o plan.json

Kernels already in the output file are kept (run it again to go on after an interruption).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import itertools
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

from evo.strategies.oracle import KERNELS

CHUNK = 2048  # genomes applied (and their new PTX compiled) per round


def plan_kernel(name: str, workers: int, progress=print, limit: int | None = None) -> dict:
    """One kernel's entry of the plan: the space's size, distinct PTX and machine code,
    the genomes that failed to assemble, and one genome per distinct machine code
    (``limit``: the space's first genomes only, for tests)."""
    from genomes.variation import CHRONOS_TRANSFORMS, gene_alphabet, group_combinations
    from harness.compile import compile_many, ptx_hash
    from harness.apply_pool import apply_from_file
    from harness.evaluate import compiled_key
    from harness.kernels.suite import find_kernel

    spec = find_kernel(name)
    combos = itertools.islice(group_combinations(gene_alphabet(names=CHRONOS_TRANSFORMS)),
                              limit)
    code_of_ptx: dict[str, str | None] = {}  # PTX hash -> code key (None: ptxas refused it)
    representatives: dict[str, str] = {}  # code key -> the first genome with it
    total = failed = 0
    start = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        while chunk := list(itertools.islice(combos, CHUNK)):
            n = len(chunk)  # applied as the Evaluator's pool applies (baseline parsed once)
            applied = [a for a, _ in pool.map(
                apply_from_file, [str(spec.ptx_path)] * n, [spec.entry] * n,
                [g.to_json() for g in chunk], [None] * n, [spec.launch.to_json()] * n,
                chunksize=64)]
            digests = [ptx_hash(a.ptx) for a in applied]
            fresh = {}
            for digest, a in zip(digests, applied):
                if digest not in code_of_ptx:
                    fresh.setdefault(digest, a.ptx)
            results = compile_many(list(fresh.values()), workers=workers)
            for digest, result in zip(fresh, results):
                code_of_ptx[digest] = (compiled_key(spec, result)
                                       if result.ok else None)
            for genome, digest, a in zip(chunk, digests, applied):
                key = code_of_ptx[digest]
                if key is None:
                    failed += 1
                    continue
                # inline text, the baseline as "" (what parse_inline reads back)
                representatives.setdefault(key + spec.launch_suffix(a.launch),
                                           str(genome) if genome.genes else "")
            total += len(chunk)
            progress(f"{name}: {total} genomes, {len(code_of_ptx)} distinct PTX, "
                     f"{len(representatives)} distinct code ({time.perf_counter() - start:.0f} s)")
    return {"genomes": total, "distinct_ptx": len(code_of_ptx),
            "distinct_code": len(representatives), "ptxas_failed": failed,
            "representatives": list(representatives.values())}


def load_plan(path: str | Path) -> dict:
    """A plan written by this module, checked enough to fail clearly on another file."""
    from genomes.errors import EvoError

    try:
        raw = Path(path).read_bytes()
        plan = json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)
    except (OSError, ValueError) as err:
        raise EvoError(f"cannot read the oracle plan {path}: {err}") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("kernels"), dict):
        raise EvoError(f"{path} is not an oracle plan (python3 -m evo.oracle_plan writes one)")
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evo.oracle_plan",
        description="Apply and compile the oracle's whole space on this machine's CPUs and "
                    "keep one genome per distinct machine code (evo bench --oracle-genomes).")
    parser.add_argument("--kernels", default=",".join(KERNELS),
                        help=f"comma-separated (default: the oracle's, {','.join(KERNELS)})")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes applying genomes, threads running ptxas")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from evo.rundir import write_atomic
    from harness.toolchain import ptxas_version

    plan = load_plan(args.out) if args.out.exists() else {"kernels": {}}
    plan.update(ptxas=ptxas_version(), arch="sm_90",
                space="every genome with at most one gene per conflict group over the "
                      "Chronos transforms (evo.strategies.oracle)")
    for name in [k.strip() for k in args.kernels.split(",") if k.strip()]:
        if name in plan["kernels"]:
            print(f"{name}: in {args.out} already")
            continue
        plan["kernels"][name] = plan_kernel(name, max(1, args.workers),
                                            lambda line: print(line, file=sys.stderr))
        text = json.dumps(plan, indent=1)
        write_atomic(args.out, gzip.compress(text.encode(), mtime=0)
                     if args.out.suffix == ".gz" else text)
        entry = plan["kernels"][name]
        print(f"{name}: {entry['genomes']} genomes, {entry['distinct_ptx']} distinct PTX, "
              f"{entry['distinct_code']} distinct machine code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
