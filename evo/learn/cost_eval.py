"""How well the cost model ranks a kernel it has never seen, from measurements on a GPU.

    python3 -m evo.learn.cost_eval evo/learn/data/priors.json [--keep 0.33]

For each kernel of a priors file (or store): its prior is built from the OTHER kernels
(leave-one-out, as ``evo run`` would get it), the cost model (``evo.learn.cost``) is
trained on that prior's rows alone (a search's first screen, before any of its own
results), and it ranks the kernel's own measured genomes (its ``rows``: up to
``evo.learn.priors.ROWS`` measured (genome, y), y = ln(baseline / cycles)). Printed per
kernel and as medians:

- rank correlation (Spearman) of predicted and measured y;
- recall: of the measured best tenth, the share the screen keeps when it keeps the
  ``--keep`` share it ranks best (what ``[evolve] screen = 1/keep`` would measure);
- GPU share: the screen measures ``keep`` of what it is offered, so 1 - keep of the
  measurements are saved, at the cost of the best-tenth genomes it drops (1 - recall).

Nothing here runs on a GPU: the figures come from measurements already taken.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from evo.learn.cost import CostModel, rank_correlation
from evo.learn.priors import genome_keys

MIN_OWN_ROWS = 20  # kernels with fewer measured genomes say nothing about ranking


def evaluate_kernel(kb: dict, entry: dict, keep: float) -> dict | None:
    """The figures of one kernel (``entry`` of ``kb``), or None when it cannot be judged."""
    from evo.learn.source import kernel_prior
    from harness.kernels.suite import find_kernel

    own = [(keys, y) for text, y in entry.get("rows", [])
           if (keys := genome_keys(text)) is not None]
    if len(own) < MIN_OWN_ROWS or len({y for _, y in own}) < 3:
        return None
    prior = kernel_prior(kb, find_kernel(entry["kernel"]), entry["device"])
    rows = [(keys, y, w) for text, y, w in prior.get("rows", [])
            if (keys := genome_keys(text)) is not None]
    if len(rows) < 8:
        return None
    model = CostModel(prior.get("genes")).fit(rows)
    predicted = model.predict([keys for keys, _ in own])
    measured = [y for _, y in own]
    order = sorted(range(len(own)), key=lambda i: -predicted[i])
    kept = set(order[:max(1, round(keep * len(own)))])
    best = sorted(range(len(own)), key=lambda i: -measured[i])[:max(1, len(own) // 10)]
    return {"kernel": entry["kernel"], "n": len(own),
            "rho": rank_correlation(predicted, measured),
            "recall": sum(i in kept for i in best) / len(best)}


def main(argv: list[str] | None = None) -> int:
    from evo.learn.source import kb_from_paths

    parser = argparse.ArgumentParser(prog="python3 -m evo.learn.cost_eval",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("paths", type=Path, nargs="+", help="priors files or stores")
    parser.add_argument("--keep", type=float, default=1 / 3,
                        help="share of the offered genomes the screen measures (default 1/3)")
    args = parser.parse_args(argv)
    kb = kb_from_paths(args.paths)
    results = [r for e in kb["kernels"] if (r := evaluate_kernel(kb, e, args.keep))]
    for r in results:
        print(f"{r['kernel']:18} {r['n']:4} genomes  rho {r['rho']:+.2f}  "
              f"best-tenth recall {r['recall']:.2f}")
    if not results:
        print("no kernel with enough measured genomes to judge", file=sys.stderr)
        return 1
    print(f"{len(results)} kernels, leave-one-out: median rank correlation "
          f"{statistics.median(r['rho'] for r in results):+.2f}; keeping {args.keep:.0%} "
          f"(saving {1 - args.keep:.0%} of the measurements) keeps a median "
          f"{statistics.median(r['recall'] for r in results):.0%} of each kernel's best tenth "
          f"(chance: {args.keep:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
