"""``evo plot``: fitness curves per kernel and a speedup summary, as PNG (headless).

Reads only ``events.jsonl`` and ``config.toml`` of each run, so it works on a finished,
interrupted or still-running run alike. matplotlib is imported here, lazily, with the
Agg backend: no display is needed.
"""

from __future__ import annotations

import math
import tomllib
from collections import defaultdict
from pathlib import Path

from genomes.errors import EvoError

from evo.rundir import RunDir, write_atomic

STATIC_NOTE = "static estimate, not measured (no GPU)"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def kernel_series(events: list[dict]) -> dict[str, dict]:
    """Per kernel: eval points, generation best/median, baseline, whether static."""
    out: dict[str, dict] = defaultdict(lambda: {"evals": [], "gens": [], "baseline": None,
                                                "static": False})
    for e in events:
        k = out[e["kernel"]]
        if e["type"] == "eval":
            k["evals"].append(e)
            k["static"] |= e.get("timer") == "static"
            if e["genome"] == {"genes": []} and e["valid"]:
                k["baseline"] = e["cycles"]
        elif e["type"] == "generation":
            k["gens"].append(e)
    return dict(out)


def plot_kernel(name: str, series: dict, path: Path) -> Path:
    plt = _pyplot()
    fig, (ax_gen, ax_eval) = plt.subplots(1, 2, figsize=(12, 4.5))
    base = series["baseline"]
    gens = series["gens"]
    xs = [g["generation"] for g in gens]
    ax_gen.plot(xs, [_nan(g["best"]) for g in gens], "o-", label="best")
    ax_gen.plot(xs, [_nan(g["median"]) for g in gens], "s--", label="median")
    ax_gen.set_xlabel("generation")
    evals = series["evals"]
    valid = [(i, e["cycles"]) for i, e in enumerate(evals, 1) if e["valid"] and e["cycles"]]
    invalid = [i for i, e in enumerate(evals, 1) if not e["valid"]]
    if valid:
        ax_eval.scatter(*zip(*valid), s=14, label="valid")
        running, best = [], math.inf
        for i, e in enumerate(evals, 1):
            if e["valid"] and e["cycles"]:
                best = min(best, e["cycles"])
            running.append(_nan(best if math.isfinite(best) else None))
        ax_eval.plot(range(1, len(evals) + 1), running, "-", label="best so far")
    if invalid:
        top = max((c for _, c in valid), default=1.0)
        ax_eval.scatter(invalid, [top * 1.05] * len(invalid), marker="x", color="red",
                        label=f"invalid ({len(invalid)})")
    ax_eval.set_xlabel("evaluation")
    unit = "cycles (static estimate)" if series["static"] else "cycles (median)"
    for ax in (ax_gen, ax_eval):
        ax.set_ylabel(unit)
        if base:
            ax.axhline(base, color="gray", linestyle=":", label="baseline")
            speed = ax.secondary_yaxis("right", functions=(lambda c, b=base: b / _safe(c),
                                                           lambda s, b=base: b / _safe(s)))
            speed.set_ylabel("speedup vs baseline")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    title = name + (f"\n{STATIC_NOTE}" if series["static"] else "")
    fig.suptitle(title, fontsize=11)
    return _save(fig, plt, path)


def _nan(value):
    return float("nan") if value is None else value


def _safe(values):
    import numpy as np

    values = np.asarray(values, dtype=float)
    return np.where(values == 0, np.nan, values)


def run_strategy(run: RunDir) -> str:
    return tomllib.loads(run.config_text())["run"]["strategy"]


def best_speedups(run: RunDir) -> tuple[dict[str, float], bool]:
    """Per kernel: baseline / best valid cycles over the run's evaluations."""
    out, static = {}, False
    for name, s in kernel_series(run.events()).items():
        static |= s["static"]
        cycles = [e["cycles"] for e in s["evals"] if e["valid"] and e["cycles"]]
        if s["baseline"] and cycles:
            out[name] = s["baseline"] / min(cycles)
    return out, static


def plot_summary(runs: list[RunDir], path: Path) -> Path:
    """Speedup per kernel; one bar per strategy (or per run) when several are given."""
    plt = _pyplot()
    groups: dict[str, dict[str, float]] = {}
    static = False
    for run in runs:
        label = run_strategy(run)
        if label in groups:
            label = f"{label} ({run.path.name})"
        groups[label], st = best_speedups(run)
        static |= st
    kernels = sorted({k for g in groups.values() for k in g})
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(kernels) * max(1, len(groups))), 4.5))
    width = 0.8 / max(1, len(groups))
    for i, (label, speeds) in enumerate(groups.items()):
        xs = [j + i * width for j in range(len(kernels))]
        ax.bar(xs, [speeds.get(k, 0.0) for k in kernels], width, label=label)
    ax.axhline(1.0, color="gray", linestyle=":")
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(kernels))])
    ax.set_xticklabels(kernels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup vs baseline" + (" (static estimate)" if static else ""))
    ax.set_title("best speedup per kernel" + (f"\n{STATIC_NOTE}" if static else ""), fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def plot_runs(paths: list[Path]) -> list[Path]:
    """Write ``plots/<kernel>.png`` into each run and ``plots/summary.png`` into the first."""
    runs = [RunDir.open(p) for p in paths]
    series = {run.path: kernel_series(run.events()) for run in runs}
    if not any(series.values()):
        raise EvoError(f"nothing to plot: {', '.join(map(str, paths))} "
                       f"{'holds' if len(paths) == 1 else 'hold'} no evaluations yet (empty "
                       f"events.jsonl); plot once `evo run` has evaluated a generation")
    written = []
    for run in runs:
        for name, kernel in series[run.path].items():
            written.append(plot_kernel(name, kernel, run.path / "plots" / f"{name}.png"))
    written.append(plot_summary(runs, runs[0].path / "plots" / "summary.png"))
    return written


# --------------------------------------------------------------------------- evo bench


def plot_bench(bench_dir: Path, kernels: list[str] | None = None, limit: int = 4) -> list[Path]:
    """From ``evo bench``'s results.json: ``plots/<kernel>.png`` (best cycles so far against
    evaluations, one line per strategy, for ``kernels`` or the first ``limit``) and
    ``plots/reduction.png`` (each strategy's cycle reduction over the kernels, sorted)."""
    import json

    from evo.bench import STRATEGIES
    from evo.bench_report import reduction

    results = json.loads((bench_dir / "results.json").read_text())
    static = "static" in results.get("backend", "")
    note = f"\n{STATIC_NOTE}" if static else f"\n{results.get('backend', '')}"
    chosen = kernels or [k for k, v in results["kernels"].items()
                         if any(e.get("curve") for e in v.values())][:limit]
    plt = _pyplot()
    written = []
    for name in chosen:
        entries = results["kernels"].get(name)
        if not entries:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for strategy in sorted(entries, key=lambda s: (STRATEGIES + (s,)).index(s)):
            e = entries[strategy]
            if e.get("curve"):
                xs, ys = zip(*e["curve"])
                ax.step(xs, ys, where="post", marker="o", markersize=3,
                        label=f"{strategy} ({e['evals']} evals)")
        base = next((e["baseline"] for e in entries.values() if e.get("baseline")), None)
        if base:
            ax.axhline(base, color="gray", linestyle=":", label="baseline")
        ax.set_xscale("log")
        ax.set_xlabel("evaluations (log)")
        ax.set_ylabel("best cycles so far" + (" (static estimate)" if static else ""))
        ax.set_title(name + note, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        written.append(_save(fig, plt, bench_dir / "plots" / f"{name}.png"))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    strategies = [s for s in STRATEGIES if any(s in v for v in results["kernels"].values())]
    for strategy in strategies:
        reds = sorted(r for v in results["kernels"].values() if strategy in v
                      and (r := reduction(v[strategy])) is not None)
        if reds:
            ax.plot(range(1, len(reds) + 1), reds, marker=".", label=strategy)
    ax.set_xlabel("kernels, sorted by the strategy's own reduction")
    ax.set_ylabel("cycle reduction vs baseline (%)")
    ax.set_title("evo bench: cycle reduction per kernel" + note, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save(fig, plt, bench_dir / "plots" / "reduction.png"))
    return written


def _save(fig, plt, path: Path) -> Path:
    """Render to memory, then write the PNG whole (a write that fails leaves no half file)."""
    import io

    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    write_atomic(path, png.getvalue())
    return path
