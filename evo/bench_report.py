"""``evo bench``'s tables: bench.md from results.json (``evo.bench`` writes both).

Per kernel the baseline and each strategy's best (speedup, evaluations); per strategy the
mean / median / best cycle reduction, store dedup, evaluations per second, share of the
oracle, how soon it reaches 95 % of greedy's reduction, wins / ties / losses against
greedy; for events-timed kernels a memory table (GB/s against a device copy of the same
bytes, and the peer's time).
"""

from __future__ import annotations

import math
import statistics

from evo.bench import MATCHED, TIE, WITH_PRIORS

def reduction(entry: dict) -> float | None:
    """Cycle reduction of the best over the baseline, in percent."""
    if not entry.get("baseline") or not entry.get("best"):
        return None
    return 100.0 * (1 - entry["best"] / entry["baseline"])


def summary_lines(results: dict, order: list[str]) -> list[str]:
    lines = []
    kernels = results["kernels"]
    for s in order:
        reds = [r for k in kernels.values() if s in k and (r := reduction(k[s])) is not None]
        evals = sum(k[s]["evals"] for k in kernels.values() if s in k)
        secs = sum(k[s]["seconds"] for k in kernels.values() if s in k)
        if reds:
            lines.append(f"- {s}: cycle reduction mean {statistics.mean(reds):.1f} %, median "
                         f"{statistics.median(reds):.1f} %, best {max(reds):.1f} % over "
                         f"{len(reds)} kernels; {evals} evaluations, "
                         f"{evals / secs if secs else 0:.1f} evaluations/s")
    for s in order:
        entries = [k[s] for k in kernels.values() if s in k and "measured" in k[s]]
        evals = sum(e["evals"] for e in entries)
        if evals:
            measured = sum(e["measured"] for e in entries)
            lines.append(f"- {s}: store dedup {100 * (1 - measured / evals):.0f} % "
                         f"({evals - measured} of {evals} evaluations answered without "
                         "measuring: same PTX or same machine code as an earlier genome)")
    wall = results.get("wall_seconds")
    if wall:  # against real elapsed time: with --jobs the searches' own times overlap
        evals = sum(e["evals"] for k in kernels.values() for e in k.values())
        lines.append(f"- bench wall time {wall:.0f} s over all strategies, "
                     f"{evals / wall:.1f} evaluations/s overall")
    with_oracle = [k for k in kernels.values() if "oracle" in k and reduction(k["oracle"])]
    for s in order:
        shares = [reduction(k[s]) / reduction(k["oracle"]) for k in with_oracle
                  if s != "oracle" and s in k and reduction(k[s]) is not None]
        if shares:
            lines.append(f"- {s} reaches {100 * statistics.mean(shares):.0f} % of the oracle's "
                         f"cycle reduction (mean over {len(shares)} kernels)")
    for s in (*MATCHED, "evolve45", *WITH_PRIORS):
        if s in order and "greedy" in order:
            lines.append(to_greedy_line(kernels, s))
    for s in (*MATCHED, "evolve45", *WITH_PRIORS):
        if s not in order or "greedy" not in order:
            continue
        win = tie = lose = 0
        for k in kernels.values():
            if s in k and "greedy" in k and k[s]["best"] and k["greedy"]["best"]:
                ratio = k[s]["best"] / k["greedy"]["best"]
                win += ratio < 1 - TIE
                lose += ratio > 1 + TIE
                tie += abs(ratio - 1) <= TIE
        lines.append(f"- {s} vs greedy: {win} wins, {tie} ties (within {TIE:.1%}), "
                     f"{lose} losses")
    if "greedy" in order:
        lines += [below_greedy_line(kernels, s) for s in order if s not in ("greedy", "oracle")]
    return [line for line in lines if line]


def evals_to_reach(entry: dict, ratio: float) -> int | None:
    """Evaluations the search needed for best/baseline <= ``ratio`` (from its curve)."""
    if not entry.get("baseline"):
        return None
    return next((n for n, best in entry.get("curve", []) if best / entry["baseline"] <= ratio),
                None)


def to_greedy_line(kernels: dict, s: str, share: float = 0.95) -> str:
    """How soon strategy ``s`` reaches ``share`` of greedy's cycle reduction, per kernel:
    its evaluations to get there over greedy's own, median over every kernel where greedy
    reduced cycles (a kernel ``s`` never brought there counts as infinitely many)."""
    ratios, ours, theirs = [], [], []
    both = [k for k in kernels.values() if s in k and "greedy" in k
            and (reduction(k["greedy"]) or 0) > 0]
    for k in both:
        target = 1 - share * reduction(k["greedy"]) / 100
        n_s, n_g = evals_to_reach(k[s], target), evals_to_reach(k["greedy"], target)
        if n_g:
            ratios.append(n_s / n_g if n_s is not None else math.inf)
        if n_s is not None and n_g:
            ours.append(n_s)
            theirs.append(n_g)
    if not ours:
        return f"- {s} reaches {share:.0%} of greedy's cycle reduction on 0 of {len(both)} kernels"
    return (f"- {s} reaches {share:.0%} of greedy's cycle reduction on {len(ours)} of "
            f"{len(both)} kernels, after a median {statistics.median(ours):.0f} evaluations "
            f"there (greedy {statistics.median(theirs):.0f}); its evaluations over greedy's, "
            f"median over all {len(ratios)} (never = infinite): "
            f"{statistics.median(ratios):.2f}x")


def below_greedy_line(kernels: dict, s: str, share: float = 0.9) -> str:
    """On how many kernels strategy ``s`` stays below ``share`` of greedy's result, read two
    ways: its speedup under ``share`` x greedy's speedup (the names listed), and its cycle
    reduction under ``share`` x greedy's (stricter where greedy's gain is small: 1.03x
    against greedy's 1.04x is 75 % of its reduction). Each against its own baseline."""
    both = [(name, k) for name, k in kernels.items() if s in k and "greedy" in k
            and k[s]["best"] and k["greedy"]["best"] and k[s]["baseline"]
            and k["greedy"]["baseline"]]
    if not both:
        return ""
    slow = [name for name, k in both if k[s]["baseline"] / k[s]["best"]
            < share * k["greedy"]["baseline"] / k["greedy"]["best"]]
    short = sum(reduction(k[s]) < share * reduction(k["greedy"]) for _, k in both)
    names = f" ({', '.join(slow)})" if slow else ""
    return (f"- {s} below {share:.0%} of greedy: by speedup on {len(slow)} of {len(both)} "
            f"kernels{names}; by cycle reduction on {short}")


def render(results: dict, order: list[str], kernels: list[str] | None = None) -> str:
    """bench.md. Rows in suite order, then ``kernels`` order: never the order searches
    finished in (with --jobs) nor results.json's (sorted by name)."""
    from harness.kernels.suite import suite_names

    static = "static" in results.get("backend", "")
    head = ["kernel", "baseline"] + [f"{s} best (x, evals)" for s in order]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    rank: dict[str, int] = {}
    for n in [*suite_names(), *(kernels or [])]:
        rank.setdefault(n, len(rank))
    for name in sorted(results["kernels"], key=lambda n: (rank.get(n, len(rank)), n)):
        k = results["kernels"][name]
        base = next((k[s]["baseline"] for s in order if s in k and k[s]["baseline"]), None)
        cells = [name, f"{base:.0f}" if base else "-"]
        for s in order:
            e = k.get(s)
            if not e or not e["best"]:
                cells.append("-")
                continue
            speed = f"{e['baseline'] / e['best']:.2f}x" if e["baseline"] else "?"
            cells.append(f"{e['best']:.0f} ({speed}, {e['evals']})")
        rows.append("| " + " | ".join(cells) + " |")
    title = f"Measured with {results.get('backend', '?')}."
    if static:
        title += " **Static estimates, not measured.**"
    if results.get("backend", "").startswith("replay"):
        misses = sum(e.get("misses", 0) for k in results["kernels"].values() for e in k.values())
        title = (f"**Replayed** with {results['backend']}: answers from a measurement store, "
                 f"nothing measured now; {misses} genomes the store did not hold counted as "
                 "invalid.")
    if results.get("priors"):
        title += f" Priors of {', '.join(WITH_PRIORS)}: {results['priors']}."
    if results.get("policies"):
        title += f" Policy of policy1, policy45: {results['policies']}."
    if results.get("oracle_plan") and "oracle" in order:
        title += (f" The oracle measured one genome per distinct machine code of its space "
                  f"(plan {results['oracle_plan']}): its evals count those.")
    return "\n".join([title, "", *rows, "", *summary_lines(results, order), "",
                      *memory_table(results, order)])


def memory_table(results: dict, order: list[str]) -> list[str]:
    """Events-timed kernels: GB/s of the baseline and of the best any strategy found, as a
    share of a device copy of the same bytes (the roofline), and the peer's time."""
    rows = []
    for name, k in results["kernels"].items():
        entries = [k[s] for s in order if s in k and k[s].get("baseline_us")]
        if not entries:
            continue
        e = entries[0]
        best = min((x for x in entries if x.get("best_us")), key=lambda x: x["best_us"],
                   default=None)

        def rate(us):
            gbs = e["bytes"] / us / 1e3
            share = f", {100 * gbs / e['copy_gbps']:.0f} %" if e.get("copy_gbps") else ""
            return f"{us:.2f} µs ({gbs:.0f} GB/s{share})"

        peer = results.get("peers", {}).get(name) or {}
        peer_us = peer.get("peer_us")
        versus = f"{peer_us / best['best_us']:.2f}x" if peer_us and best else "-"
        rows.append(f"| {name} | {e['bytes'] / 1e6:.1f} | {e.get('copy_gbps') or 0:.0f} | "
                    f"{rate(e['baseline_us'])} | {rate(best['best_us']) if best else '-'} | "
                    f"{f'{peer_us:.2f} µs' if peer_us else peer.get('reason', '-')} | {versus} |")
    if not rows:
        return []
    caches = {e.get("caches") for k in results["kernels"].values() for e in k.values()} - {None}
    return ["Memory (events-timed kernels; caches: " + "; ".join(sorted(caches)) + "): µs per "
            "launch (GB/s moved, % of a device copy of the same bytes timed the same way); "
            "best over all strategies; vs peer > 1 means faster than the peer.", "",
            "| kernel | MB moved | copy GB/s | baseline | best | peer | best vs peer |",
            "|" + " --- |" * 7, *rows, ""]
