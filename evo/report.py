"""What a run found, as a table (``evo show``) and as ``report.md``.

Both read the run's checkpoint, so they agree with what ``--resume`` would continue from.
Numbers from the static backend are labelled "static estimate, not measured" wherever
they appear.
"""

from __future__ import annotations

import json

from genomes.genome import Genome

from evo import kernel_run, strategies
from evo.checkpoint import REDUCED, SECONDS
from evo.checkpoint import kernels as kernel_entries
from evo.rundir import RunDir
from evo.search import KernelResult

STATIC = "static estimate, not measured"


def results_from_checkpoint(run: RunDir, strategy_name: str) -> list[KernelResult]:
    checkpoint = run.read_checkpoint()
    strategy = strategies.get(strategy_name)
    out = []
    for kernel, entry in kernel_entries(checkpoint).items():
        genome_json, _ = strategy.best(entry.state)
        key = Genome.from_json(genome_json).effective().dumps()
        best = entry.known.get(key)
        exact = entry.exact
        if exact and exact["from"] == key and exact["kept"] != key:  # evo.exact's choice
            key, best = exact["kept"], exact["kept_result"]
            genome_json = json.loads(key)
        key, genome_json, best = _kept_at_sizes(entry, key, genome_json, best)
        finalist = entry.finalist
        if finalist and finalist["kept"] != key:  # the search's best failed the finalist check
            key = finalist["kept"]
            genome_json = json.loads(key)
            best = entry.known.get(key)
        key, genome_json, best = _kept_at_sizes(entry, key, genome_json, best)
        out.append(KernelResult(kernel, entry.baseline, genome_json, best, entry.evals,
                                entry.state.get("generation", 0), entry.confirmed))
    return out


def _kept_at_sizes(entry, key: str, genome_json, best):
    """(key, genome, summary) after ``evo.run._check_other_sizes``'s choice where it started
    from ``key`` (it runs before the finalist check, and again on a runner-up that check
    kept: the entry holds its last)."""
    sizes = entry.sizes
    if sizes and sizes.get("from") == key and sizes.get("kept") not in (None, key):
        key = sizes["kept"]
        return key, json.loads(key), entry.known.get(key)
    return key, genome_json, best


def _cycles_text(summary: dict | None) -> str:
    if not summary:
        return "-"
    if not summary["valid"] or summary["cycles"] is None:
        return f"invalid ({summary['reason']})"
    return f"{summary['cycles']:.0f}"


def speedup(result: KernelResult) -> float | None:
    b, x = result.baseline, result.best
    if not (b and x and b["valid"] and x["valid"] and b["cycles"] and x["cycles"]):
        return None
    return b["cycles"] / x["cycles"]


def confirmed(result: KernelResult) -> str:
    """The baseline and best measured again back to back (``evo.run.confirm``), or "-"."""
    c = result.confirmed
    if not c:
        return "-"
    if c["baseline"] is None or c["best"] is None:
        return f"invalid ({c['reason']})"
    return f"{c['baseline']:.0f} -> {c['best']:.0f} ({c['baseline'] / c['best']:.2f}x)"


def quoted_speedup(result: KernelResult) -> float | None:
    """The speedup to quote: measured again back to back where it was, else the search's."""
    c = result.confirmed
    if c and c.get("baseline") and c.get("best"):
        return c["baseline"] / c["best"]
    return speedup(result)


def model_lines(run: RunDir, results: list[KernelResult]) -> list[str]:
    """For the kernels of capture folders (``evo run --model``): their share of what the
    capture timed and what the speedups above would take off it (Amdahl on the captured
    shares): an estimate from evo's timing of each kernel alone, which ``evo verify`` and
    ``evo.model.roundtrip`` measure in the program."""
    import tomllib
    from pathlib import Path

    from evo.model.budget import shares
    from evo.model.capture import MANIFEST
    from evo.model.step_time import waits_on_host

    try:
        suite = tomllib.loads(run.config_text())["run"]["suite"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return []
    by_name = {r.kernel: r for r in results}
    lines = []
    for pattern in suite:
        path = Path(pattern).expanduser() / MANIFEST
        if not path.is_file():
            continue
        manifest = json.loads(path.read_text())
        # a code evolved once for all the sizes one launcher runs it at: their shares
        rows = [(share, by_name[name]) for name, share in shares([pattern]).items()
                if name in by_name]
        if not rows:
            continue
        share = sum(s for s, _ in rows)
        saved = sum(s * (1 - 1 / x) for s, r in rows if (x := quoted_speedup(r)))
        static = " (static estimates, not measured)" if any(is_static(r) for _, r in rows) else ""
        of = manifest.get("share_of", "the step's GPU time")
        lines.append(f"- {pattern}: the {len(rows)} kernel(s) evolved are {100 * share:.1f} % of "
                     f"{of}; at the speedups above{static} they would take {100 * saved:.1f} % "
                     f"of it less ({1 / (1 - saved):.3f}x on it)")
        if host := waits_on_host(manifest):
            lines.append(f"  {host[0].upper()}{host[1:]}.")
    if lines:
        lines.insert(0, "What it would do to the model (each kernel's share of the capture "
                        "times its speedup; an estimate: `evo verify` times them in the program):")
    return lines


def is_static(result: KernelResult) -> bool:
    return any(s and s.get("timer") == "static" for s in (result.baseline, result.best))


def best_genome(result: KernelResult) -> str:
    """The best genome, with the launch it implies where that is not the spec's."""
    text = str(Genome.from_json(result.best_genome))
    launch = (result.best or {}).get("launch")
    if launch:
        text += f" [launch grid {'x'.join(map(str, launch['grid']))}, block " \
                f"{'x'.join(map(str, launch['block']))}]"
    best = result.best or {}
    if best.get("max_rel_err"):  # a relative error alone reads large where values are near zero
        up_to = f"up to {best['max_abs_err']:.2g}, " if "max_abs_err" in best else ""
        text += f" (outputs differ from the baseline's by {up_to}{best['max_rel_err']:.2g} relative)"
    return text


def kernel_line(result: KernelResult) -> str:
    s = speedup(result)
    tag = f" [{STATIC}]" if is_static(result) else ""
    gain = f"{s:.2f}x" if s else "-"
    again = f"; measured again: {confirmed(result)}" if result.confirmed else ""
    return (f"{result.kernel}: baseline {_cycles_text(result.baseline)} -> best "
            f"{_cycles_text(result.best)} cycles ({gain}), {result.evals} evaluations, "
            f"best genome {best_genome(result)}{tag}{again}")


HEADER = ("kernel", "baseline", "best", "speedup", "measured again", "best genome", "evals",
          "timer")
AGAIN = HEADER.index("measured again")


def table(results: list[KernelResult]) -> list[tuple]:
    """The header and a row per kernel; the "measured again" column only where some kernel
    was (``evo.run.confirm``: gpu runs)."""
    rows = [HEADER]
    for r in results:
        s = speedup(r)
        rows.append((r.kernel, _cycles_text(r.baseline), _cycles_text(r.best),
                     f"{s:.2f}x" if s else "-", confirmed(r), best_genome(r),
                     str(r.evals), "static" if is_static(r) else (r.best or {}).get("timer", "")))
    if not any(r.confirmed for r in results):
        rows = [row[:AGAIN] + row[AGAIN + 1:] for row in rows]
    return rows


def render_table(results: list[KernelResult]) -> str:
    rows = table(results)
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if any(is_static(r) for r in results):
        lines.append(f"cycles: {STATIC} (no GPU; ranked by ptxas/SASS figures; "
                     f"correctness not checked)")
    return "\n".join(lines)


def llm_lines(stats: dict | None) -> list[str]:
    """The LLM's account: calls, tokens, cost, and patches at each stage."""
    if not stats:
        return []
    cost = f", cost {stats['cost']:.4f}" if stats.get("cost") else ""
    answers = stats["calls"] - stats["failures"] + stats["cached"]
    # "distinct": different answer texts; "replayed": answers a resumed run took from the
    # cache (checkpoints older than the draw-aware cache have no "unique": not shown).
    unique = f"{stats['unique']} distinct, " if "unique" in stats else ""
    tries = f"{stats['attempts']} HTTP attempts, " if stats.get("attempts") else ""
    return [f"LLM: {stats['calls']} calls ({tries}{stats['failures']} failed), {answers} answers "
            f"({unique}{stats['cached']} replayed from the cache), {stats['prompt_tokens']} "
            f"prompt + {stats['completion_tokens']} completion tokens{cost}",
            f"patches: {stats['proposed']} proposed, {stats['applied']} applied, "
            f"{stats['assembled']} assembled, {stats['correct']} correct, "
            f"{stats['faster']} faster ({stats['repairs']} repair prompts)"
            + (f"; {stats['cut']} answers cut at [llm] max_tokens before a patch: raise it"
               if stats.get("cut") else "")]


def finalist_lines(checkpoint: dict) -> list[str]:
    """What the finalist check (``evo.finalists.check_best``) said of each kernel's best."""
    lines = []
    for kernel, entry in kernel_entries(checkpoint).items():
        f = entry.finalist
        if not f:
            continue
        kept = Genome.from_json(json.loads(f["kept"]))
        for d in f["demoted"]:
            lines.append(f"- {kernel}: best variant {d['genome']} DEMOTED by the finalist check: "
                         f"{d['reason']}")
        if f["reason"].startswith("not run"):
            lines.append(f"- {kernel}: finalist check NOT RUN ({f['reason']}); {kept} is kept "
                         "unchecked")
        else:
            lines.append(f"- {kernel}: kept {kept}: finalist check {f['reason']}")
    if lines:
        lines.insert(0, "Finalist check (compute-sanitizer memcheck and racecheck, no .nc load "
                        "of a written buffer, two runs bitwise identical):")
    return lines


SEARCH_PARTS = (kernel_run.PTXAS, kernel_run.LOOKUPS, kernel_run.GPU)  # within "search"
FINALIST_GPU = "finalist check: GPU"  # the seconds its processes held a GPU, within the step
PEER_GPU = "peer: GPU"
PARTS = (*SEARCH_PARTS, FINALIST_GPU, PEER_GPU)  # within another step: not added to the total
TIME_STEPS = ("search", *SEARCH_PARTS, "exact", "finalist check", FINALIST_GPU, "reduce",
              "measured again", "other sizes", "peer", PEER_GPU)


def exact_lines(checkpoint: dict) -> list[str]:
    """Where a best genome rounds differently from the baseline, what ``evo.exact`` kept."""
    lines = []
    for kernel, entry in kernel_entries(checkpoint).items():
        e = entry.exact
        if not e:
            continue
        best = Genome.from_json(json.loads(e["from"]))
        if e["kept"] != e["from"]:
            lines.append(f"- {kernel}: kept {Genome.from_json(json.loads(e['kept']))}: {e['reason']}")
        else:
            err = entry.known.get(e["from"], {}).get("max_rel_err")
            lines.append(f"- {kernel}: the best, {best}, rounds differently from the baseline "
                         f"(largest relative error {err:.3g}), kept: {e['reason']}"
                         if err else f"- {kernel}: kept {best}: {e['reason']}")
    if lines:
        lines.insert(0, "Outputs against the baseline's (a variant with the same bits is kept "
                        "where it is within [run] exact_slack of the best):")
    return lines


def reduced_lines(checkpoint: dict) -> list[str]:
    """Each best genome reduced to the genes that matter (``evo.reduce``): without those
    whose removal leaves its machine code, and on a GPU its time within the noise."""
    lines, timed = [], False
    for kernel, r in checkpoint.get(REDUCED, {}).items():
        noisy = r.get("within_noise", [])
        same = [g for g in r.get("dropped", []) if g not in noisy]
        why = ([f"{', '.join(same)}: the same machine code without them"] if same else []) + (
            [f"{', '.join(noisy)}: within {100 * r['noise']:g} % of the best's time without "
             f"them ({r['cycles']['best']:.0f} -> {r['cycles']['reduced']:.0f} cycles)"] if noisy else [])
        timed = timed or "noise" in r
        if why:
            lines.append(f"- {kernel}: {r['text'] or 'the baseline'} (dropped {'; '.join(why)})")
        else:
            lines.append(f"- {kernel}: every gene of the best counts")
    if lines:
        lines.insert(0, "The genes that matter (each best genome without the genes whose removal "
                        "leaves its machine code unchanged" + (", then those whose removal costs "
                        "no more than the noise, measured" if timed else "; measured or not, the "
                        "same kernel") + "):")
    return lines


HOST_BOUND = 0.75  # evo's own process busy for this share of a run: it sets the pace


def time_lines(checkpoint: dict, host: dict | None = None) -> list[str]:
    """Where the run's time went: each kernel's steps in wall seconds (``evo.run._Seconds``),
    and how busy evo's own process was (``host``: this invocation's ``wall`` and ``cpu``
    seconds and its ``jobs``)."""
    rows = [(kernel, sec) for kernel, sec in checkpoint.get(SECONDS, {}).items() if sec]
    if not rows:
        return host_lines(host)
    steps = [s for s in TIME_STEPS if any(s in sec for _, sec in rows)]
    lines = ["Where the time went (wall seconds per kernel; a search cut midway counts from "
             "the resume):", "",
             "| kernel | " + " | ".join(steps) + " | total |", "|" + " --- |" * (len(steps) + 2)]
    for kernel, sec in rows:
        cells = [f"{sec[s]:.1f}" if s in sec else "-" for s in steps]
        total = sum(v for step, v in sec.items() if step not in PARTS)
        lines.append(f"| {kernel} | " + " | ".join(cells) + f" | {total:.1f} |")
    if any(s in steps for s in SEARCH_PARTS):
        lines += ["", "*search: ptxas*: the measured genomes applied and assembled, the "
                  "static gate; *search: look-ups*: genomes applied and assembled only for "
                  "their machine code (the novelty look-ups), the library's genes tried alone "
                  "(the alphabet); *search: GPU*: the worker's checks and timing, the wait for "
                  "it included; all within *search*."]
    if FINALIST_GPU in steps or PEER_GPU in steps:
        lines += ["", "*finalist check: GPU*, *peer: GPU*: the seconds the step held a GPU "
                  "(no measurement ran on it meanwhile); the finalist check's within its step. "
                  "*peer*: the wait for the peer's timing after the search; it begins with "
                  "the search, so its GPU seconds may fall within the search."]
    return lines + [""] * bool(host) + host_lines(host)


def host_lines(host: dict | None) -> list[str]:
    """This invocation's wall time and how much of it evo's own process was busy: kernels
    searched at once are threads of that one process (one core at a time), and where it is
    busy nearly all the run, more GPUs or jobs do not shorten it (resnet50's model job:
    46 s on four H200s, 37 s of it busy; BENCHMARKS.md, session 20)."""
    if not host or host.get("wall", 0) <= 0:
        return []
    share = host["cpu"] / host["wall"]
    line = (f"This invocation took {host['wall']:.1f} s; evo's own process was busy "
            f"{host['cpu']:.1f} s of it ({100 * share:.0f} %: its searches run as threads, "
            "one core at a time).")
    if share >= HOST_BOUND and host.get("jobs", 1) > 1:
        line += (" At this share that process, not the GPUs, set the pace: more GPUs or "
                 "`--jobs` would hardly shorten it.")
    return [line]


def _rate(summary: dict | None) -> str | None:
    """"2.26 µs = 3712 GB/s (107 % of the copy)" for an events-timed valid measurement."""
    s = summary or {}
    us, moved, copy = s.get("us_per_launch"), s.get("bytes_moved"), s.get("copy_gbps")
    if not (s.get("valid") and us and moved):
        return None
    gbs = moved / us / 1e3
    share = f" ({100 * gbs / copy:.0f} % of the copy)" if copy else ""
    return f"{us:.2f} µs = {gbs:.0f} GB/s{share}"


def memory_lines(results: list[KernelResult], checkpoint: dict) -> list[str]:
    """Per many-thread (events-timed) kernel: bytes moved, the baseline's and the best's
    GB/s against a device copy of the same bytes timed the same way (the roofline,
    ``harness.gpu.timing.copy_gbps``), the caches, and the peer's time where it ran."""
    lines = []
    entries = kernel_entries(checkpoint)
    for r in results:
        base, best = _rate(r.baseline), _rate(r.best)
        if base is None:
            continue
        s = r.baseline
        line = (f"- {r.kernel}: {s['bytes_moved'] / 1e6:.1f} MB moved per launch, caches "
                f"{s.get('caches', '?')}; copy of the same bytes {s.get('copy_gbps', 0):.0f} "
                f"GB/s; baseline {base}; best {best or '-'}")
        peer = entries[r.kernel].peer if r.kernel in entries else None
        if peer and peer.get("peer_us"):
            us = (r.best or {}).get("us_per_launch") if best else None
            versus = f", best {peer['peer_us'] / us:.2f}x the peer's speed" if us else ""
            agree = {True: "", False: " (its output DISAGREES with the reference)",
                     None: ""}[peer.get("peer_agrees")]
            line += f"; peer {peer['peer']}: {peer['peer_us']:.2f} µs{agree}{versus}"
        elif peer:
            line += f"; peer {peer['peer']} not timed: {peer['reason']}"
        lines.append(line)
    if lines:
        lines.insert(0, "Memory (events timer; µs per launch from the search's figures; GB/s "
                        "counts each input read once and each output written once):")
    return lines


def render_report(run: RunDir, results: list[KernelResult], backend: str,
                  llm: dict | None = None, host: dict | None = None) -> str:
    static = any(is_static(r) for r in results)
    lines = [f"# evo run `{run.path.name}`", "", f"Measured with: {backend}."]
    if static:
        lines += ["", f"**All cycle figures are a {STATIC}**: no GPU was used, so no "
                  "variant's output was checked for correctness (registers and spills are "
                  "ptxas's own, exact)."]
    header, *rows = table(results)
    lines += ["", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    if llm:
        lines += [""] + [f"- {line}" for line in llm_lines(llm)]
    checkpoint = run.read_checkpoint() if run.has_checkpoint() else {}
    for section in (model_lines(run, results), memory_lines(results, checkpoint),
                    exact_lines(checkpoint), finalist_lines(checkpoint),
                    reduced_lines(checkpoint), time_lines(checkpoint, host)):
        if section:
            lines += [""] + section
    if any(r.confirmed for r in results):
        lines += ["", "*measured again*: the baseline and the best measured once more at the "
                  "end, back to back, past the store: the speedup to quote "
                  "(the search's figures were taken at different moments, as the search went)."]
    lines += ["", "Best PTX, genomes and launches (`<kernel>.launch.json`: the grid and block "
              "to run the best PTX with) are in `best/`; every evaluation is in `events.jsonl`.",
              "Plots: `evo plot " + str(run.path) + "`.", ""]
    return "\n".join(lines)
