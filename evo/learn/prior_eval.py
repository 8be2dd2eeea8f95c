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


def main(argv=None) -> int:
    from evo.learn.priors import prior_for
    from evo.learn.source import add_held_out_arguments, held_out_entries

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_held_out_arguments(parser)
    kb, entries = held_out_entries(parser.parse_args(argv))
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
