"""How long applying a genome takes on the host (no GPU): random genomes applied to a few
suite kernels, ms per genome over three rounds, and a digest of the PTX they gave (the same
digest before and after a change to the transforms' code means the same outputs).

    python -m harness.tools.bench_apply [--genomes 150] [KERNEL ...]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import time

KERNELS = ("gemm_tile_4x6x8", "gemm_tile_8x8x8", "softmax", "layernorm")


def main(argv: list[str] | None = None) -> None:
    from genomes.genome import apply_genome
    from genomes.variation import random_genome
    from harness.kernels.suite import find_kernel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", default=list(KERNELS))
    parser.add_argument("--genomes", type=int, default=150)
    args = parser.parse_args(argv)
    for name in args.kernels:
        spec = find_kernel(name)
        ptx = spec.ptx_text()
        genomes = [random_genome(random.Random(f"{name}:{i}")) for i in range(args.genomes)]
        rounds, outputs = [], []
        for _ in range(3):
            start = time.perf_counter()
            outputs = [apply_genome(ptx, g, spec.launch).ptx for g in genomes]
            rounds.append((time.perf_counter() - start) / len(genomes) * 1e3)
        digest = hashlib.sha256("\n".join(outputs).encode()).hexdigest()[:12]
        print(f"{name}: {' / '.join(f'{r:.2f}' for r in rounds)} ms a genome (PTX digest {digest})")


if __name__ == "__main__":
    main()
