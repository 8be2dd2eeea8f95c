"""How well a prior orders the next gene on a kernel it has not seen, from measurements
already taken.

    python3 -m evo.learn.prior_eval SOURCE... --device NAME [--kernels K,...]

For each kernel of ``--device`` in the sources (stores or priors files): its prior is built
from the OTHER kernels (``prior_for``, leave-one-out), and at every measured genome of the
kernel with two or more measured one-gene extensions, those extensions are ordered by the
prior as MCGS opens them (``evo.learn.priors.expected_gain``): by each gene's effect alone
("alone"), and by what it gained on other kernels after the genes already held ("after",
the prior's gene -> next-gene gains; its effect alone where none was seen). Printed per kernel:
how often the first in each order is the best measured extension, and the mean regret
(the best extension's y minus that of the one ordered first; y = ln(baseline / cycles)).
Ties in weight fall to the gene's name, for both orders alike.

With ``--gains``: per kernel, the gain its prior expects of the best gene alone (the
largest effect, nothing below 0) beside the best y measured on it, and their rank
correlation (Spearman), over all kernels and over those that are not gemm tiles: whether
a prior could say which kernels of a model deserve more trials.

Nothing here runs on a GPU; a search on the GPU (``evo bench --strategies mcgs45_priors``)
is the test of a search. This says whether the gains after the genes held order the next
gene better than the effects alone on kernels whose answers the prior did not see.
"""

from __future__ import annotations

import argparse
import statistics


MODES = ("alone", "after")


def states(entry: dict) -> list[tuple[frozenset, dict[str, float]]]:
    """(a measured genome's gene keys, {gene key: y of the genome with it added}) for every
    measured genome with two or more measured one-gene extensions."""
    from evo.learn.priors import genome_keys

    y_of: dict[frozenset, float] = {}
    for text, y in entry["rows"]:
        keys = genome_keys(text)
        if keys is not None:
            y_of[frozenset(keys)] = y
    out = []
    for held in y_of:
        children = {next(iter(s - held)): y for s, y in y_of.items()
                    if len(s) == len(held) + 1 and held < s}
        if len(children) >= 2:
            out.append((held, children))
    return out


def scores(prior: dict, entry: dict) -> dict[str, tuple[float, float]] | None:
    """{"alone" | "with pairs": (share of states whose first is the best, mean regret)}."""
    from evo.learn.priors import expected_gain

    found = states(entry)
    if not found:
        return None
    out = {}
    for name in MODES:
        hits, regrets = [], []
        for held, children in found:
            context = tuple(sorted(held)) if name == "after" else ()
            # MCGS's order (mcgs._weight): the gain expected, nothing below 0, ties by name
            first = min(children, key=lambda g: (-max(0.0, expected_gain(prior, g, context)), g))
            best = max(children.values())
            hits.append(children[first] == best)
            regrets.append(best - children[first])
        out[name] = (statistics.fmean(hits), statistics.fmean(regrets))
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Rank correlation of ``a`` and ``b`` (ties ranked in order)."""
    def ranks(xs):
        out = [0] * len(xs)
        for rank, i in enumerate(sorted(range(len(xs)), key=lambda i: xs[i])):
            out[i] = rank
        return out

    return statistics.correlation(ranks(a), ranks(b))


def gains(kb: dict, entries: list[dict]) -> list[tuple[str, float, float]]:
    """(kernel, the gain its leave-one-out prior expects of its best gene, the best y
    measured on it) per kernel, printed with the rank correlations (module docstring)."""
    from evo.learn.priors import prior_for

    rows = []
    for entry in entries:
        prior = prior_for(kb, entry["kernel"], entry["device"], entry["features"])
        expected = max([0.0, *prior["genes"].values()])
        best = max((y for _, y in entry["rows"]), default=0.0)
        rows.append((entry["kernel"], expected, best))
        print(f"{entry['kernel']:24s} expected {expected:.3f}  best measured {best:.3f}")
    for label, some in (("all", rows), ("not gemm tiles", [r for r in rows if not r[0].startswith("gemm_tile")])):
        if len(some) > 2:
            print(f"rank correlation, {label} ({len(some)} kernels): "
                  f"{spearman([r[1] for r in some], [r[2] for r in some]):.3f}")
    return rows


def main(argv=None) -> int:
    from evo.learn.priors import prior_for
    from evo.learn.source import add_held_out_arguments, held_out_entries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_held_out_arguments(parser)
    parser.add_argument("--gains", action="store_true",
                        help="each kernel's expected gain beside its best measured one")
    args = parser.parse_args(argv)
    kb, entries = held_out_entries(args)
    if args.gains:
        gains(kb, entries)
        return 0
    rows = []
    for entry in entries:
        prior = prior_for(kb, entry["kernel"], entry["device"], entry["features"])
        r = scores(prior, entry)
        if r is None:
            continue
        rows.append(r)
        print(f"{entry['kernel']:24s} " + "  ".join(
            f"{name}: first best {100 * hit:5.1f} %, regret {regret:.4f}"
            for name, (hit, regret) in r.items()), flush=True)
    if rows:
        print(f"{'mean of ' + str(len(rows)):24s} " + "  ".join(
            f"{name}: first best {100 * statistics.fmean(r[name][0] for r in rows):5.1f} %, "
            f"regret {statistics.fmean(r[name][1] for r in rows):.4f}"
            for name in MODES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
