"""How a trained policy does on a kernel it has never seen, from measurements already taken.

    python3 -m evo.learn.policy_eval SOURCE... --device NAME [--kernels K,...]

For each kernel of ``--device`` in the sources (stores or priors files, as ``evo train
policy`` reads them): a policy is trained on every OTHER kernel (leave-one-out), twice
from the same seed: cloned only, and cloned then improved by GRPO. Each policy's argmax
rollout then walks the held-out kernel's measured genomes (a move is open only where its
genome was measured, as in training), and its reward (the best ln(baseline / cycles) along
the path, minus 0.005 a gene) is printed beside greedy's on the same measurements.

Nothing here runs on a GPU, and it is optimistic where the held-out kernel's store holds
few genomes (a move to an unmeasured genome is not open): a search on the GPU is the test
(``evo bench --strategies policy1,policy45``); this says whether GRPO's gain on the
training kernels carries over to one it has not seen.
"""

from __future__ import annotations

import argparse
import statistics


def held_out(kb: dict, entry: dict, iterations: int, validation: float | None = None) -> dict:
    """Cloned and GRPO rewards of the argmax rollout on ``entry``'s kernel, and greedy's."""
    import torch

    from evo.learn.policy import Landscape, Policy
    from evo.learn.policy_train import _Prepared, landscapes_from_kb, net_of, rollouts, train

    others = landscapes_from_kb(kb, {entry["kernel"]})
    target = Landscape.from_kb_entry(entry)
    out = {}
    for name, its in (("cloned", 0), ("grpo", iterations)):
        given = {} if validation is None else {"validation": validation}
        policy = Policy(train(others, iterations=its, **given))
        (run,) = rollouts(torch, net_of(torch, policy), [_Prepared(target, policy)], 1, 1.0,
                          None, greedy=True)
        out[name] = run["reward"]
    out["greedy"] = target.greedy_reward(sorted({k for state in target.values for k in state}))
    return out


def main(argv=None) -> int:
    from evo.learn.source import add_held_out_arguments, held_out_entries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_held_out_arguments(parser)
    parser.add_argument("--iterations", type=int, default=150, help="GRPO iterations")
    parser.add_argument("--validation", type=float,
                        help="share of the training kernels GRPO leaves out to choose its "
                             "weights on (default: train's; 0: chosen on those it trained on)")
    args = parser.parse_args(argv)
    kb, entries = held_out_entries(args)
    rows = []
    for entry in entries:
        r = held_out(kb, entry, args.iterations, args.validation)
        rows.append(r)
        print(f"{entry['kernel']:24s} greedy {r['greedy']:+.4f}  cloned {r['cloned']:+.4f}  "
              f"grpo {r['grpo']:+.4f}", flush=True)
    if rows:
        mean = {k: statistics.fmean(r[k] for r in rows) for k in ("greedy", "cloned", "grpo")}
        print(f"{'mean of ' + str(len(rows)):24s} greedy {mean['greedy']:+.4f}  cloned "
              f"{mean['cloned']:+.4f}  grpo {mean['grpo']:+.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
