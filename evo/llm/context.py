"""What the search has learnt about one kernel, as prompt lines (EvoEngineer-style context).

From the search's results so far (``KernelSearch.known``: effective genome key -> result
summary, ``evo.search.summary``) this builds:

- memory figures for an events-timed variant: µs per launch, bytes moved (every input read
  once, every output written once), achieved GB/s and its share of a device copy of the
  same bytes (the copy roofline, ``harness.gpu.timing.copy_gbps``), the caches mode;
- the top-k variants by cycles, with their speedup over the baseline, in genome notation;
- per-gene effects: for every gene seen, how many variants held it, the best and median
  speedup among them and the median of the variants without it;
- what the transform genes already do, from the transform library's own summaries.

The top variants and the gene effects share one character budget (``context_chars``),
each cut where it runs out and saying how much it left out; the transform list holds the
transforms that apply to the kernel, whole (it heads the prompt: see kernel_context.j2). Static-backend figures are labelled as static estimates.
Everything is deterministic: the same results give the same lines (the prompt cache keys
on them).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping

from genomes.genome import Genome
from harness.record import Measurement

TOP_K = 5
CONTEXT_CHARS = 6000  # the default of [llm] context_chars (used where no config is given)
MAX_GENE_ROWS = 16  # gene effects shown at most (the best first)
TRANSFORM_LINE = 110  # characters of one transform's line at most
_MEMORY_KEYS = ("us_per_launch", "bytes_moved", "copy_gbps", "caches")


# --------------------------------------------------------------------------- results


def variants(known: Mapping[str, dict] | None) -> list[tuple[Genome, dict]]:
    """``(genome, summary)`` of every result that reads back, in key order."""
    out = []
    for key, summary in sorted((known or {}).items()):
        try:
            out.append((Genome.from_json(json.loads(key)), dict(summary)))
        except Exception:  # a malformed key must not cost the prompt: skip it
            continue
    return out


def summary_of(known: Mapping[str, dict] | None, genome: Genome) -> dict | None:
    return (known or {}).get(genome.effective().dumps())


def figures(m: Measurement | None, summary: dict | None) -> dict:
    """A measurement's memory figures and timer: the search's summary where it has one,
    else the measurement's own notes (a backend's fresh record)."""
    out: dict = {}
    if m is not None:
        out.update({k: m.notes[k] for k in _MEMORY_KEYS if k in m.notes},
                   valid=m.valid, timer=m.timer, cycles=m.cycles)
    if summary:
        out.update({k: summary[k] for k in (*_MEMORY_KEYS, "valid", "timer", "cycles")
                    if k in summary})
    return out


def _speedup(base: float | None, cycles: float | None) -> float | None:
    return base / cycles if base and cycles else None


def _static(summary: dict) -> bool:
    return summary.get("timer") == "static"


def _valid(summary: dict) -> bool:
    return bool(summary.get("valid")) and bool(summary.get("cycles"))


# --------------------------------------------------------------------------- memory


def memory(spec, label: str, fig: dict) -> dict:
    """One variant's memory line: ``{"measured", "gbps", "share", "text"}``. Measured
    where an events timer left µs per launch; otherwise the bytes alone (a spec fact)."""
    moved = fig.get("bytes_moved") or spec.bytes_read + spec.bytes_written
    us, copy = fig.get("us_per_launch"), fig.get("copy_gbps")
    if not (fig.get("valid") and us and moved):
        return {"measured": False, "gbps": None, "share": None, "text": ""}
    gbps = moved / us / 1e3
    share = gbps / copy if copy else None
    text = f"{label}: {us:.2f} µs per launch = {gbps:.0f} GB/s"
    if share is not None:
        text += f", {100 * share:.0f} % of the copy roofline ({copy:.0f} GB/s)"
    if fig.get("caches"):
        text += f"; caches {fig['caches']}"
    return {"measured": True, "gbps": round(gbps, 1),
            "share": None if share is None else round(share, 4), "text": text}


def bytes_text(spec) -> str:
    """"8.39 MB per launch (4.19 MB read + 4.19 MB written)": each buffer once."""
    r, w = spec.bytes_read, spec.bytes_written
    return (f"{(r + w) / 1e6:.2f} MB per launch ({r / 1e6:.2f} MB read + {w / 1e6:.2f} MB "
            f"written, each buffer once)")


# --------------------------------------------------------------------------- top-k and genes


def top_lines(found: list[tuple[Genome, dict]], base: float | None, k: int = TOP_K) -> list[str]:
    """The ``k`` valid variants with the fewest cycles, best first (ties: genome text)."""
    valid = sorted(((s["cycles"], str(g), g, s) for g, s in found if _valid(s)),
                   key=lambda t: (t[0], t[1]))
    lines = []
    for i, (cycles, name, _, s) in enumerate(valid[:k]):
        tag = " (static estimate)" if _static(s) else ""
        line = f"{i + 1}. `{name}`: {cycles:.0f} cycles{tag}"
        if (x := _speedup(base, cycles)) is not None:
            line += f", {x:.2f}x the baseline"
        if s.get("us_per_launch") and s.get("bytes_moved"):
            gbps = s["bytes_moved"] / s["us_per_launch"] / 1e3
            copy = s.get("copy_gbps")
            share = f", {100 * gbps / copy:.0f} % of the copy" if copy else ""
            line += f", {gbps:.0f} GB/s{share}"
        if s.get("launch"):
            line += f"; launch grid {s['launch']['grid']} block {s['launch']['block']}"
        lines.append(line)
    return lines


def gene_lines(found: list[tuple[Genome, dict]], base: float | None) -> list[str]:
    """Per gene seen in an evaluated genome: variants holding it (and how many of those
    failed), the best and median speedup among the valid ones, and the median speedup of
    the valid variants without it. Best speedup first; genes with no valid variant last."""
    if not base:
        return []
    speed = [({str(y) for y in g.effective().genes},
              _speedup(base, s["cycles"]) if _valid(s) else None) for g, s in found]
    rows = []
    for gene in sorted(set().union(*(names for names, _ in speed))):
        held = [x for names, x in speed if gene in names]
        without = [x for names, x in speed if x is not None and gene not in names]
        ok = [x for x in held if x is not None]
        failed = len(held) - len(ok)
        line = f"`{gene}`: in {len(held)} variant{'s' * (len(held) != 1)}"
        line += f" ({failed} failed)" if failed else ""
        if ok:
            line += f"; best {max(ok):.2f}x, median {statistics.median(ok):.2f}x"
        if without:
            line += f"; without it: median {statistics.median(without):.2f}x of {len(without)}"
        rows.append((-(max(ok) if ok else 0.0), gene, line))
    return [line for *_, line in sorted(rows)]


def transform_lines(only: set[str] | None = None) -> list[str]:
    """One line per transform of the library (``only``: of those named): ``name(params):
    what it does``."""
    from genomes import transforms

    lines = []
    for t in transforms.registry().values():
        if only is not None and t.name not in only:
            continue
        params = ",".join(p.describe() for p in t.params)
        line = f"`{t.name}({params})`: {t.summary}" if params else f"`{t.name}`: {t.summary}"
        if len(line) > TRANSFORM_LINE:
            line = line[:TRANSFORM_LINE - 3].rsplit(" ", 1)[0] + "..."
        lines.append(line)
    return lines


# --------------------------------------------------------------------------- the budget


def fit(sections: list[list[str]], budget: int) -> tuple[list[list[str]], list[int]]:
    """The sections' lines, in order, within ``budget`` characters (each line counts its
    length + 1); a section stops at its first line that does not fit. Returns the kept
    lines of each section and how many each left out."""
    kept, left, used = [], [], 0
    for lines in sections:
        out = []
        for line in lines:
            if used + len(line) + 1 > budget:
                break
            out.append(line)
            used += len(line) + 1
        kept.append(out)
        left.append(len(lines) - len(out))
    return kept, left


def search_context(known: Mapping[str, dict] | None, base_cycles: float | None,
                   budget: int = CONTEXT_CHARS, k: int = TOP_K,
                   applicable: set[str] | None = None) -> dict:
    """The prompt's ``search`` section: top variants and gene effects (at most
    ``MAX_GENE_ROWS``) within ``budget`` characters, with the counts each left out and
    whether any figure is a static estimate; and the transforms that apply to the kernel
    (``applicable``; None: all), whole: they head the prompt, the same for every call on
    the kernel, so no budget may cut them differently from one call to the next."""
    found = variants(known)
    all_genes = gene_lines(found, base_cycles)
    (top, genes), (top_out, _) = fit(
        [top_lines(found, base_cycles, k), all_genes[:MAX_GENE_ROWS]], max(0, budget))
    genes_out = len(all_genes) - len(genes)
    library = transform_lines(applicable)
    library_out = len(transform_lines()) - len(library)
    return {"evaluated": len(found), "valid": sum(_valid(s) for _, s in found), "k": k,
            "top": top, "top_left_out": top_out, "genes": genes, "genes_left_out": genes_out,
            "transforms": library, "transforms_left_out": library_out,
            "static": any(_static(s) for _, s in found), "chars": budget}
