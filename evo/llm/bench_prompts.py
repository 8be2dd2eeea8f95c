"""How large the LLM's prompts are, and how much of one a later call repeats as a prefix
(what an endpoint's prompt cache can reuse): ``python3 -m evo.llm.bench_prompts RUN
KERNEL [KERNEL ...]`` (RUN: a run folder whose results the prompts quote; ``-`` for none,
each kernel's baseline prompt; a kernel is a suite name or a spec path).

Per kernel: the size of the prompt for its best variant (system + user message) and the
share of it that two other prompts repeat from its start: the same variant when the search
knew half its results (an earlier call on the same parent), and the baseline. Sizes are
pre-tokens (a word with its leading space, a run of punctuation or a run of whitespace,
as GPT-style tokenizers split text first), or real tokens with ``--tiktoken ENCODING``
where the ``tiktoken`` package and that encoding are installed (this tool only).
"""

from __future__ import annotations

import argparse
import json
import re

PRE_TOKEN = re.compile(r" ?\w+| ?[^\w\s]+|\s+")


def shared(a: list, b: list) -> int:
    """Tokens two prompts share from their start."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run folder (its checkpoint's results), or - for none")
    parser.add_argument("kernels", nargs="+", help="suite kernels or spec paths")
    parser.add_argument("--tiktoken", metavar="ENCODING",
                        help="count real tokens with this tiktoken encoding")
    args = parser.parse_args(argv)

    from evo.checkpoint import kernels as kernel_entries
    from evo.checkpoint import read as read_checkpoint
    from evo.llm.feedback import build_mutate_context
    from evo.llm.prompts import PromptSet
    from genomes.genome import Genome
    from harness.kernels.suite import find_kernel

    split = PRE_TOKEN.findall
    if args.tiktoken:
        import tiktoken  # a measuring aid, not a dependency of evo
        split = tiktoken.get_encoding(args.tiktoken).encode
    entries = {} if args.run == "-" else kernel_entries(read_checkpoint(args.run))
    prompts = PromptSet()

    def prompt(spec, genome, known) -> list:
        ctx = build_mutate_context(spec, genome, None, None, None, None, [], [], known=known)
        return split(prompts.render("system", **ctx) + prompts.render("mutate", **ctx))

    total = 0
    for kernel in args.kernels:
        spec = find_kernel(kernel)
        known = entries[spec.name].known if spec.name in entries else None
        if not known:
            now = prompt(spec, Genome(), None)
            total += len(now)
            print(f"{spec.name[:40]:40s} {len(now):6d} tokens (baseline, nothing known)")
            continue
        half = dict(sorted(known.items())[: len(known) // 2])
        best = min((s["cycles"], k) for k, s in known.items() if s["valid"] and s["cycles"])[1]
        genome = Genome.from_json(json.loads(best))
        now, before, base = (prompt(spec, genome, known), prompt(spec, genome, half),
                             prompt(spec, Genome(), known))
        total += len(now)
        print(f"{spec.name[:40]:40s} {len(now):6d} tokens; an earlier call on the same parent "
              f"shares {100 * shared(before, now) / len(now):5.1f} %, the baseline's "
              f"{100 * shared(base, now) / len(now):5.1f} %")
    print(f"{'all':40s} {total:6d} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
