"""The GPU tests on several GPUs at once: the ``gpu``-marked test files dealt to one shard
per GPU by their count of tests (largest first, each to the lightest shard), each shard a
pytest process that sees only its GPU (``CUDA_VISIBLE_DEVICES``)::

    python -m harness.tools.gpu_shards --gpus 0,1,2,3 [--logs DIR] [--timeout S]

Prints each shard's summary line; exits 1 when a shard failed or timed out. Dealt this way
(by a shell script doing the same), the suite took 3:44 on a 4 x H200 machine, its
slowest shard, against 8:34 on one H200 (BENCHMARKS.md, sessions 18 and 19).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def gpu_test_files() -> collections.Counter:
    """Test count per file of the ``gpu``-marked tests pytest collects here."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], capture_output=True, text=True)
    return collections.Counter(line.split("::")[0] for line in out.stdout.splitlines() if "::" in line)


def deal(counts: dict, shards: int) -> list[list[str]]:
    """Files to ``shards`` lists, the largest first to the lightest list."""
    loads, out = [0] * shards, [[] for _ in range(shards)]
    for path, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        i = loads.index(min(loads))
        loads[i] += n
        out[i].append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.tools.gpu_shards", description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", default="0", help="comma-separated GPU ids, one shard each")
    parser.add_argument("--logs", type=Path, default=None, help="folder for gpu_shardI.log (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds each shard may take")
    args = parser.parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    logs = args.logs or Path(tempfile.mkdtemp(prefix="gpu_shards_"))
    logs.mkdir(parents=True, exist_ok=True)
    shards = deal(gpu_test_files(), len(gpus))
    procs = []
    for i, (gpu, files) in enumerate(zip(gpus, shards)):
        if not files:
            continue
        log = open(logs / f"gpu_shard{i}.log", "w")
        procs.append((i, log, subprocess.Popen(
            [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider", *files],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu})))
    failed = False
    for i, log, proc in procs:
        try:
            code = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "timed out"
        log.close()
        lines = (logs / f"gpu_shard{i}.log").read_text().splitlines()
        print(f"shard {i} (GPU {gpus[i]}): {lines[-1] if lines else ''} [{code}]")
        failed = failed or code != 0
    print(f"logs: {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
