"""How large the LLM's prompts are, and how much of one a later call repeats as a prefix
(what an endpoint's prompt cache can reuse): ``python3 -m evo.llm.bench_prompts RUN
KERNEL [KERNEL ...]`` (RUN: a run folder whose results the prompts quote).

Per kernel: the pre-tokens of the prompt for its best variant (system + user message; a
pre-token is a word with its leading space, a run of punctuation or a run of whitespace,
as GPT-style tokenizers split text first: a proxy where no tokenizer is installed), and
the share of it that two other prompts repeat from its start: the same variant when the
search knew half its results (an earlier call on the same parent), and the baseline.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

PRE_TOKEN = re.compile(r" ?\w+| ?[^\w\s]+|\s+")


def shared(a: list[str], b: list[str]) -> int:
    """Pre-tokens two prompts share from their start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder (its checkpoint's results)")
    parser.add_argument("kernels", nargs="+", help="suite kernels of that run")
    args = parser.parse_args(argv)

    from evo.llm.feedback import build_mutate_context
    from evo.llm.prompts import PromptSet
    from genomes.genome import Genome
    from harness.suite import find_kernel

    checkpoint = json.loads((args.run / "checkpoint.json").read_text())
    prompts = PromptSet()

    def prompt(spec, genome, known) -> list[str]:
        ctx = build_mutate_context(spec, genome, None, None, None, None, [], [], known=known)
        return PRE_TOKEN.findall(prompts.render("system", **ctx) + prompts.render("mutate", **ctx))

    for kernel in args.kernels:
        spec, known = find_kernel(kernel), checkpoint["kernels"][kernel]["known"]
        half = dict(sorted(known.items())[: len(known) // 2])
        best = min((s["cycles"], k) for k, s in known.items() if s["valid"] and s["cycles"])[1]
        genome = Genome.from_json(json.loads(best))
        now, before, base = (prompt(spec, genome, known), prompt(spec, genome, half),
                             prompt(spec, Genome(), known))
        print(f"{kernel:20s} {len(now):6d} pre-tokens; an earlier call on the same parent "
              f"shares {100 * shared(before, now) / len(now):5.1f} %, the baseline's "
              f"{100 * shared(base, now) / len(now):5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
