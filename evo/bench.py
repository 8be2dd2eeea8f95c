"""``evo bench``: strategies side by side on the same kernels, the same GPU, one call.

For each kernel of the chosen suite, every strategy runs its own search with its OWN
empty measurement store (so no strategy profits from another's measurements) through
one shared backend (one GPU worker):

| strategy       | what it is                                                        |
| -------------- | ----------------------------------------------------------------- |
| sweep          | every single gene alone                                           |
| greedy         | sequential greedy, up to 6 steps                                  |
| evolve_matched | evolve with max_evals = what greedy used on that kernel           |
| evolve_ls      | evolve_matched with a local search of 2 neighbors of the best a gen |
| evolve45       | evolve at 9 generations x pop 5 (45 trials, the EvoEngineer budget)|
| oracle         | every combination of one gene per group (only on ``oracle_kernels``)|

Results go to ``OUT/results.json`` after every (kernel, strategy), so a bench split over
several calls (``--resume``, e.g. to fit a 10-minute limit) skips what is done, and to
``OUT/bench.md``: per kernel baseline, best and speedup per strategy, evaluations, wall
time; and per strategy mean / median / best cycle reduction, evolve vs greedy wins / ties
/ losses, evaluations per second.
"""

from __future__ import annotations

import functools
import json
import statistics
import tempfile
import time
from pathlib import Path

from genomes.errors import EvoError
from genomes.genome import Genome

from evo.config import Config
from evo.rundir import write_atomic
from evo.search import new_checkpoint, search_kernel

STRATEGIES = ("sweep", "greedy", "evolve_matched", "evolve_ls", "evolve45", "oracle")
SUITES = {
    "gemm64": "gemm_tile_[2468]x[2468]x[2468]",
    "gemm_large": "gemm_tile_1[0246]x*",
    "many": "!gemm_tile_*",
}
TIE = 0.005  # within 0.5 % counts as a tie: measurement noise, not a win


def suite_kernels(name: str) -> list[str]:
    """Kernel names of a bench suite (or a comma-separated list of kernel names)."""
    import fnmatch

    from harness.suite import list_kernels

    names = [k.name for k in list_kernels()]
    pattern = SUITES.get(name)
    if pattern is None:
        return [n.strip() for n in name.split(",") if n.strip()]
    if pattern.startswith("!"):
        return [n for n in names if not fnmatch.fnmatch(n, pattern[1:])]
    return [n for n in names if fnmatch.fnmatch(n, pattern)]


def strategy_config(base: Config, strategy: str, greedy_evals: int | None) -> Config:
    if strategy == "evolve45":
        return base.override("run", strategy="evolve", generations=9, pop=5, max_evals=0)
    if strategy in ("evolve_matched", "evolve_ls"):
        if greedy_evals is None:
            raise EvoError(f"{strategy} needs greedy's evaluations on the kernel: run greedy too")
        # As many generations as the budget allows; the budget is the binding limit.
        matched = base.override("run", strategy="evolve", generations=1000,
                                max_evals=max(1, greedy_evals))
        return matched.override("evolve", local_search=2) if strategy == "evolve_ls" else matched
    return base.override("run", strategy=strategy, max_evals=0)  # sweep, greedy, oracle


def run_bench(kernels: list[str], strategies: list[str], base: Config, out: Path,
              backend_kind: str = "auto", progress=print, backend=None,
              oracle_kernels: set[str] | None = None, keep_stores: bool = False) -> dict:
    """Run (or continue) the bench; return the results dict also saved in OUT.

    ``backend`` (an object) replaces the one ``backend_kind`` would build (tests).
    ``keep_stores`` keeps each (kernel, strategy) store in OUT/stores/, so that engine
    changes can later be tried offline against them with the replay backend."""
    import contextlib

    from harness.backends import make_backend
    from harness.evaluate import Evaluator
    from harness.store import Store
    from harness.suite import find_kernel

    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {"kernels": {}}
    order = [s for s in STRATEGIES if s in strategies]
    needs_greedy = [s for s in ("evolve_matched", "evolve_ls") if s in order]
    if needs_greedy and "greedy" not in order:
        order.insert(order.index(needs_greedy[0]), "greedy")
    owned = backend is None
    backend = backend or make_backend(backend_kind, seed=base.run.seed,
                                      timing=base.to_dict()["timing"])
    with (backend if owned else contextlib.nullcontext()), \
            tempfile.TemporaryDirectory(prefix="evo-bench-") as tmp:
        stores = out / "stores" if keep_stores else Path(tmp)
        stores.mkdir(exist_ok=True)
        results["device"] = backend.device
        results["backend"] = backend.describe()
        for kernel in kernels:
            spec = find_kernel(kernel)
            done = results["kernels"].setdefault(kernel, {})
            for strategy in order:
                if strategy in done or (strategy == "oracle" and kernel not in
                                        (oracle_kernels or set())):
                    continue
                greedy = done.get("greedy", {}).get("evals")
                config = strategy_config(base, strategy, greedy)
                with Store(stores / f"{kernel}-{strategy}.sqlite") as store:
                    evaluator = Evaluator(backend, store)
                    start = time.perf_counter()
                    try:
                        res = search_kernel(kernel, config,
                                            functools.partial(evaluator.evaluate, spec),
                                            lambda events: None, new_checkpoint(config),
                                            lambda: None)
                    finally:
                        evaluator.close()
                    seconds = time.perf_counter() - start
                done[strategy] = {
                    "baseline": _cycles(res.baseline), "best": _cycles(res.best),
                    "evals": res.evals, "seconds": round(seconds, 2),
                    "genome": str(Genome.from_json(res.best_genome)),
                    "timer": (res.best or {}).get("timer", ""),
                }
                write_atomic(path, json.dumps(results, indent=1, sort_keys=True))
                progress(f"{kernel} {strategy}: {done[strategy]['baseline']} -> "
                         f"{done[strategy]['best']} cycles, {res.evals} evals, {seconds:.1f} s")
    write_atomic(out / "bench.md", render(results, order))
    return results


def _cycles(summary: dict | None) -> float | None:
    return summary["cycles"] if summary and summary.get("valid") else None


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
    with_oracle = [k for k in kernels.values() if "oracle" in k and reduction(k["oracle"])]
    for s in order:
        shares = [reduction(k[s]) / reduction(k["oracle"]) for k in with_oracle
                  if s != "oracle" and s in k and reduction(k[s]) is not None]
        if shares:
            lines.append(f"- {s} reaches {100 * statistics.mean(shares):.0f} % of the oracle's "
                         f"cycle reduction (mean over {len(shares)} kernels)")
    for s in ("evolve_matched", "evolve_ls", "evolve45"):
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
    return lines


def render(results: dict, order: list[str]) -> str:
    static = "static" in results.get("backend", "")
    head = ["kernel", "baseline"] + [f"{s} best (x, evals)" for s in order]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, k in results["kernels"].items():
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
    return "\n".join([title, "", *rows, "", *summary_lines(results, order), ""])
