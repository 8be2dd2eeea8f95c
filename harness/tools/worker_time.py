"""Where a GPU worker's time went, from a measurement store: per kernel, the measurements,
the worker's seconds over them, and the phases that took the most (each measurement's
``notes["phases"]``, as ``evo measure -v`` prints one)::

    python3 -m harness.tools.worker_time STORE.sqlite [--top 4] [--kernel NAME ...]
    python3 -m harness.tools.worker_time STORE.sqlite --whole [--gpus N]

``--whole``: the store's phases summed over every kernel, and how busy the workers of its
``N`` GPUs were (measuring, their host part included) in each 5 s of the window from the first measurement's start to the last one's end (each
measurement's start is its ``created`` less its ``seconds``): where a run on several GPUs
left them idle (resnet50's model job on four H200s: the last 16 s, BENCHMARKS.md session 27).

A run's store holds its search's measurements (not the ones measured again at its end,
which use a store of their own). What it showed on issue 27's ten-kernel mix: the baselines
of the five large kernels held the worker 18 of its 35 s, comparing with the NumPy
reference on the host (BENCHMARKS.md, session 22).
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3


def _rows(path: str, columns: str) -> list[tuple]:
    """``columns`` of every measurement in the store at ``path``, opened read-only."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(f"SELECT {columns} FROM measurements").fetchall()
    finally:
        db.close()


def worker_time(path: str, kernels: list[str] | None = None) -> dict:
    """{kernel: {"n": measurements, "seconds": their sum, "slowest": the largest one,
    "phases": Counter of seconds by phase}} from the store at ``path``."""
    rows = _rows(path, "kernel, seconds, notes")
    out: dict = {}
    for kernel, seconds, notes in rows:
        if kernels and kernel not in kernels:
            continue
        entry = out.setdefault(kernel, {"n": 0, "seconds": 0.0, "slowest": 0.0,
                                        "phases": collections.Counter()})
        entry["n"] += 1
        entry["seconds"] += seconds or 0.0
        entry["slowest"] = max(entry["slowest"], seconds or 0.0)
        for phase, spent in (json.loads(notes or "{}").get("phases") or {}).items():
            entry["phases"][phase] += spent
    return out


def busy_bins(spans: list[tuple[float, float]], gpus: int, bin_s: float = 5.0) -> list[float]:
    """Share of ``gpus`` GPU workers busy in each ``bin_s`` seconds from the first start on, given
    each measurement's (end time, seconds)."""
    if not spans:
        return []
    t0 = min(end - seconds for end, seconds in spans)
    bins = [0.0] * (int((max(end for end, _ in spans) - t0) // bin_s) + 1)
    for end, seconds in spans:  # each measurement spread over the bins it covers
        a, b = end - seconds - t0, end - t0
        while a < b:
            edge = min(b, (int(a // bin_s) + 1) * bin_s)
            bins[min(int(a // bin_s), len(bins) - 1)] += edge - a
            a = edge
    return [busy / (bin_s * gpus) for busy in bins]


def whole(path: str, gpus: int = 1, top: int = 12) -> list[str]:
    """The whole store's worker seconds by phase and its workers' busy share over time."""
    rows = _rows(path, "created, seconds, notes")
    phases: collections.Counter = collections.Counter()
    for _, _, notes in rows:
        phases.update((json.loads(notes or "{}").get("phases") or {}))
    spans = [(created, seconds or 0.0) for created, seconds, _ in rows]
    window = max(c for c, _ in spans) - min(c - s for c, s in spans) if spans else 0.0
    lines = [f"{len(rows)} measurements, {sum(s for _, s in spans):.1f} s of the worker, "
             f"window {window:.1f} s on {gpus} GPU(s)", "", "| phase | worker s |", "| --- | --- |"]
    lines += [f"| {phase} | {s:.2f} |" for phase, s in phases.most_common(top)]
    lines += ["", "workers busy per 5 s: " + " ".join(f"{b:.2f}" for b in busy_bins(spans, gpus))]
    return lines


def table(times: dict, top: int = 4) -> list[str]:
    """One line per kernel, the most time first, and the total."""
    lines = ["| kernel | measurements | worker s | ms each | slowest s | largest phases (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for kernel, t in sorted(times.items(), key=lambda kv: -kv[1]["seconds"]):
        phases = ", ".join(f"{p} {s:.2f}" for p, s in t["phases"].most_common(top))
        lines.append(f"| {kernel} | {t['n']} | {t['seconds']:.2f} | "
                     f"{1000 * t['seconds'] / t['n']:.1f} | {t['slowest']:.2f} | {phases} |")
    total = sum(t["seconds"] for t in times.values())
    lines.append(f"\n{sum(t['n'] for t in times.values())} measurements, {total:.1f} s of the worker")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.tools.worker_time",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("store", help="a measurement store (.sqlite), e.g. a run's --store")
    parser.add_argument("--kernel", action="append", help="only these kernels (repeatable)")
    parser.add_argument("--top", type=int, default=4, help="phases shown per kernel")
    parser.add_argument("--whole", action="store_true",
                        help="phases over all kernels and the workers' busy share over time")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs the run measured on (--whole)")
    args = parser.parse_args(argv)
    try:
        if args.whole:
            print("\n".join(whole(args.store, max(1, args.gpus))))
            return 0
        times = worker_time(args.store, args.kernel)
    except sqlite3.Error as err:
        print(f"worker_time: {args.store}: not a measurement store ({err})")
        return 2
    if not times:
        print(f"worker_time: {args.store}: no measurements" + (" of those kernels" if args.kernel else ""))
        return 1
    print("\n".join(table(times, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
