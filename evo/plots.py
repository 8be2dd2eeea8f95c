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

from evo.checkpoint import LLM
from evo.checkpoint import kernels as kernel_entries
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


CLIP = 1.5  # the y axis stops at this many times the baseline: slower outliers are clipped


def plot_kernel(name: str, series: dict, path: Path) -> Path:
    """Three panels: every evaluated variant per generation (colour = generation) with the
    best so far on top; the best speedup so far against evaluations; which transforms the
    population carried in each generation (a heatmap)."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, (ax_pop, ax_speed, ax_genes) = plt.subplots(
        1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1.2, 1, 1]})
    base, evals = series["baseline"], series["evals"]
    unit = "cycles (static estimate)" if series["static"] else "cycles (median)"
    valid = [e for e in evals if e["valid"] and e["cycles"]]
    top = CLIP * base if base else max((e["cycles"] for e in valid), default=1.0) * 1.05
    shown = [e for e in valid if e["cycles"] <= top]
    clipped = len(valid) - len(shown)
    if shown:
        points = ax_pop.scatter([_gen(e) for e in shown], [e["cycles"] for e in shown],
                                c=[_gen(e) for e in shown], cmap="viridis", s=18, alpha=0.8,
                                label="variants")
        bar = fig.colorbar(points, ax=ax_pop, label="generation", pad=0.01)
        bar.locator = MaxNLocator(integer=True)
        bar.update_ticks()
    out_of_view = [e for e in evals if not e["valid"] or not e["cycles"]] + \
        [e for e in valid if e["cycles"] > top]
    if out_of_view:
        ax_pop.scatter([_gen(e) for e in out_of_view], [top] * len(out_of_view), marker="x",
                       color="red", label=f"invalid ({len(evals) - len(valid)}) or slower "
                                          f"than {CLIP:g}x baseline ({clipped}), at the top")
    best_by_gen = _best_so_far_by_generation(evals)
    if best_by_gen:
        ax_pop.plot(*zip(*best_by_gen), "k-", linewidth=2, label="best so far", zorder=3)
    ax_pop.set_xlabel("generation")
    ax_pop.set_ylabel(unit)
    ax_pop.xaxis.set_major_locator(MaxNLocator(integer=True))
    if base:
        ax_pop.axhline(base, color="gray", linestyle=":", label="baseline")
        ax_pop.set_ylim(top=top * 1.02)
    ax_pop.legend(fontsize=7, loc="upper right", framealpha=0.9)
    ax_pop.grid(alpha=0.3)
    ax_pop.set_title("every variant, by generation", fontsize=9)

    if base and valid:
        best, xs, ys = math.inf, [], []
        for i, e in enumerate(evals, 1):
            if e["valid"] and e["cycles"]:
                best = min(best, e["cycles"])
            if math.isfinite(best):
                xs.append(i)
                ys.append(base / best)
        ax_speed.step(xs, ys, where="post", color="C2", linewidth=2)
        ax_speed.axhline(1.0, color="gray", linestyle=":", label="baseline (1.00x)")
        ax_speed.annotate(f"{ys[-1]:.2f}x", (xs[-1], ys[-1]), textcoords="offset points",
                          xytext=(-30, 6), fontsize=9)
        ax_speed.legend(fontsize=7, loc="lower right")
    ax_speed.set_xlabel("evaluation")
    ax_speed.set_ylabel("best speedup so far (baseline / best)")
    ax_speed.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_speed.grid(alpha=0.3)
    ax_speed.set_title("best so far", fontsize=9)

    transforms, gens, share = gene_frequencies(evals)
    if transforms:
        image = ax_genes.imshow(share, aspect="auto", cmap="Blues", vmin=0, vmax=1,
                                extent=(gens[0] - 0.5, gens[-1] + 0.5, len(transforms) - 0.5,
                                        -0.5))
        ax_genes.set_yticks(range(len(transforms)))
        ax_genes.set_yticklabels(transforms, fontsize=7)
        fig.colorbar(image, ax=ax_genes, label="share of the generation's variants", pad=0.01)
    ax_genes.set_xlabel("generation")
    ax_genes.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_genes.set_title("transforms carried, per generation", fontsize=9)
    title = name + (f"\n{STATIC_NOTE}" if series["static"] else "")
    fig.suptitle(title, fontsize=11)
    return _save(fig, plt, path)


def _gen(event: dict) -> int:
    return event.get("generation") or 0


def _best_so_far_by_generation(evals: list[dict]) -> list[tuple[int, float]]:
    """(generation, best valid cycles up to and including it), for each generation."""
    best, out = math.inf, []
    for gen in sorted({_gen(e) for e in evals}):
        here = [e["cycles"] for e in evals if _gen(e) == gen and e["valid"] and e["cycles"]]
        best = min([best, *here])
        if math.isfinite(best):
            out.append((gen, best))
    return out


def gene_frequencies(evals: list[dict]) -> tuple[list[str], list[int], list[list[float]]]:
    """(transforms, generations, share[t][g]): the share of each generation's evaluated
    variants whose genome holds transform t (most used transforms first)."""
    gens = sorted({_gen(e) for e in evals})
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    sizes: dict[int, int] = defaultdict(int)
    for e in evals:
        sizes[_gen(e)] += 1
        # an LLM patch gene has no transform: its row is "patch (LLM)"
        for t in {g.get("transform", "patch (LLM)")
                  for g in (e.get("genome") or {}).get("genes", [])}:
            counts[t][_gen(e)] += 1
    transforms = sorted(counts, key=lambda t: (-sum(counts[t].values()), t))
    return transforms, gens, [[counts[t][g] / sizes[g] for g in gens] for t in transforms]


def run_strategy(run: RunDir) -> str:
    return tomllib.loads(run.config_text())["run"]["strategy"]


def best_speedups(run: RunDir) -> tuple[dict[str, float], bool, set[str]]:
    """Per kernel: the speedup to quote (the baseline and best measured again at the end,
    ``evo.run.confirm``, where the run did), else baseline / best valid cycles over the
    run's evaluations; whether static; the kernels whose figure was measured again."""
    out, static, again = {}, False, set()
    for name, s in kernel_series(run.events()).items():
        static |= s["static"]
        cycles = [e["cycles"] for e in s["evals"] if e["valid"] and e["cycles"]]
        if s["baseline"] and cycles:
            out[name] = s["baseline"] / min(cycles)
    entries = kernel_entries(run.read_checkpoint()) if run.has_checkpoint() else {}
    for name, entry in entries.items():
        c = entry.confirmed or {}
        if c.get("baseline") and c.get("best"):
            out[name] = c["baseline"] / c["best"]
            again.add(name)
    return out, static, again


def plot_summary(runs: list[RunDir], path: Path) -> Path:
    """Speedup per kernel (only kernels with a result), labelled; one bar per strategy (or
    per run) when several are given; hatched where measured again at the end."""
    plt = _pyplot()
    groups: dict[str, tuple[dict[str, float], set[str]]] = {}
    static = False
    for run in runs:
        label = run_strategy(run)
        if label in groups:
            label = f"{label} ({run.path.name})"
        speeds, st, again = best_speedups(run)
        groups[label] = (speeds, again)
        static |= st
    kernels = sorted({k for speeds, _ in groups.values() for k in speeds})
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(kernels) * max(1, len(groups))), 4.8))
    width = 0.8 / max(1, len(groups))
    for i, (label, (speeds, again)) in enumerate(groups.items()):
        xs = [j + i * width for j, k in enumerate(kernels) if k in speeds]
        ys = [speeds[k] for k in kernels if k in speeds]
        bars = ax.bar(xs, ys, width, label=label, color=f"C{i}",
                      hatch=["//" if k in again else "" for k in kernels if k in speeds])
        ax.bar_label(bars, labels=[f"{y:.2f}x" for y in ys], fontsize=7, padding=2)
    ax.axhline(1.0, color="gray", linestyle=":", label="baseline (1.00x)")
    ax.set_xticks([j + width * (len(groups) - 1) / 2 for j in range(len(kernels))])
    ax.set_xticklabels(kernels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup vs baseline" + (" (static estimate)" if static else ""))
    ax.set_ylim(bottom=min([1.0, *[y for s, _ in groups.values() for y in s.values()]]) * 0.9)
    hatched = any(again for _, again in groups.values())
    ax.set_title("best speedup per kernel"
                 + ("\nhatched: baseline and best measured again at the end" if hatched else "")
                 + (f"\n{STATIC_NOTE}" if static else ""), fontsize=9)
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
    for run in runs:
        llm = run.read_checkpoint().get(LLM) if run.has_checkpoint() else None
        if llm and llm.get("calls", 0) + llm.get("cached", 0):
            written.append(plot_llm_funnel(llm, run.path / "plots" / "llm_funnel.png"))
    return written


#: the LLM funnel's stages: (label, the checkpoint's ``llm`` key)
FUNNEL = (("asked", "asked"), ("answered", "answers"), ("proposed a patch", "proposed"),
          ("applied", "applied"), ("assembled", "assembled"), ("passed the gate", "correct"),
          ("faster than its parent", "faster"))


def plot_llm_funnel(llm: dict, path: Path) -> Path:
    """How far the LLM's calls got: asked, answered, patch proposed, applied, assembled,
    correct, faster (``evo.llm.mutation`` counts them); one labelled bar per stage."""
    plt = _pyplot()
    counts = {"asked": llm.get("calls", 0) + llm.get("cached", 0),
              "answers": llm.get("calls", 0) - llm.get("failures", 0) + llm.get("cached", 0),
              **{key: llm.get(key, 0) for _, key in FUNNEL[2:]}}
    labels = [label for label, _ in FUNNEL]
    values = [counts[key] for _, key in FUNNEL]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    bars = ax.barh(labels[::-1], values[::-1], color="C0")
    ax.bar_label(bars, labels=[str(v) for v in values[::-1]], fontsize=8, padding=2)
    ax.set_xlabel("LLM calls and patches")
    ax.set_title(f"LLM funnel ({llm.get('repairs', 0)} repair prompts; answers include "
                 f"{llm.get('cached', 0)} replayed from the cache)", fontsize=9)
    return _save(fig, plt, path)


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
                ax.step(xs, ys, where="post", label=f"{strategy} ({e['evals']} evals)",
                        **_style(strategy))
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
            ax.plot(range(1, len(reds) + 1), reds, label=strategy, **_style(strategy))
    ax.set_xlabel("kernels, sorted by the strategy's own reduction")
    ax.set_ylabel("cycle reduction vs baseline (%)")
    ax.set_title("evo bench: cycle reduction per kernel" + note, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save(fig, plt, bench_dir / "plots" / "reduction.png"))
    return written


def _style(strategy: str) -> dict:
    """A line style, marker and colour per strategy, so no strategy hides another where
    their curves coincide (the same strategy looks the same in every plot)."""
    from evo.bench import STRATEGIES

    i = STRATEGIES.index(strategy) if strategy in STRATEGIES else len(STRATEGIES)
    return {"color": f"C{i}", "linestyle": ("-", "--", "-.", ":")[i % 4],
            "marker": "os^vDP*X"[i % 8], "markersize": 4, "linewidth": 1.5, "alpha": 0.9}


def _save(fig, plt, path: Path) -> Path:
    """Render to memory, then write each file whole (a write that fails leaves no half
    file): the PNG, and an SVG beside it (scales for papers and slides)."""
    import io

    fig.tight_layout()
    for fmt, target in (("png", path), ("svg", path.with_suffix(".svg"))):
        data = io.BytesIO()
        fig.savefig(data, format=fmt, dpi=100)
        write_atomic(target, data.getvalue())
    plt.close(fig)
    return path
