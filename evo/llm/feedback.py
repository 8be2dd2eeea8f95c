"""What the LLM is told: the contexts that the mutate and repair templates render.

``build_mutate_context`` gathers everything one mutation prompt shows: the kernel's
role and launch shape (the variant's own where a launch gene changed it), the target
architecture (from the PTX's ``.target`` or the compile arch, ``evo.llm.occupancy``),
the current PTX with line numbers (cut to its hottest region when long, see
``ptx_view``), what ptxas and the SASS say about it, its theoretical occupancy and which
limit binds, the cycles measured so far (labelled static estimates where no GPU measured
them) and, for events-timed kernels, µs per launch, GB/s and the share of the copy
roofline; the genes already applied and what each did, the best genome, the top
variants so far, per-gene effects and what the transform genes already do
(``evo.llm.context``, within ``context_chars``), recent failures, what became of the
LLM's earlier patches to this kernel (``evo.llm.history``) and the methods that have
paid off.
``build_repair_context`` gives a patch that failed to apply or to assemble, the error,
and the PTX lines the patch aimed at. Both return plain dicts (JSON-safe), so that the
templates and the prompt cache see the same data.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from genomes.genome import GeneOutcome, Genome, PatchGene, apply_genome
from harness.record import Measurement
from harness.kernels.spec import BufferParam, KernelSpec
from harness.kernels.spec_ptx import ptx_entries

from evo.llm import context as search_facts
from evo.llm.occupancy import occupancy, target_of
from evo.llm.ptx_view import ptx_view, render_kept

MAX_FAILURES = 8  # recent failures shown: older ones add length, not information
MAX_METHODS = 8
TOP_OPCODES = 15
_PTXAS_LINE_RE = re.compile(r"line (\d+):")


@dataclass
class MutateContext:
    """Everything ``mutate.j2`` renders; every value is JSON-safe."""

    kernel: dict  # name, entry, description, params [{name, ptx_name, kind, dtype, count,
    #               role, value}]
    launch: dict  # grid, block, blocks, threads_per_block, shared_mem (dynamic bytes), timer,
    #               variant: the current variant's {grid, block, blocks, threads_per_block}
    #               where its genes changed the launch, else None
    target: dict  # arch (what ptxas assembles for), family (e.g. Hopper), ptx_target
    profile: dict  # bytes (text), baseline / current ({measured, gbps, share, text}),
    #                measured (any of them), occupancy (evo.llm.occupancy.occupancy)
    genome: str
    genes: list  # [{index, gene, kind, status, changes, detail, method, rationale, summary}]
    ptx: dict  # text (numbered), total_lines, shown_lines, truncated, region, elided
    resources: dict  # ok, registers, spill_stores, spill_loads, stack_frame, shared_mem, error
    sass: dict  # available, top [[opcode, count]], instructions, reason, hot (region, text)
    baseline: dict  # see _cycles
    current: dict
    best: dict | None  # genome, cycles
    recent_failures: list
    history: list  # lines: the kernel's earlier LLM patches and their outcomes
    history_left_out: int  # older history entries that did not fit the budget
    methods: list  # [{label, attempts, successes, mean_gain, gain_text}]
    search: dict  # evo.llm.context.search_context: top variants, gene effects, transforms
    static: bool  # True when any cycle figure is a static estimate
    mode: str = "full"  # or "explore": the mutator left the search's history out
    ncu: dict | None = None  # harness.gpu.ncu.profile of a variant, with its "genome" (or None)
    lessons: list = field(default_factory=list)  # the LLM's LESSON lines on this kernel


def _applicable_transforms(spec: KernelSpec) -> set[str]:
    """The transforms with a gene that changes this kernel's baseline: the search's own
    alphabet (``evo.search.applicable_genes``, computed once per kernel in a process)."""
    from evo.search import applicable_genes

    return {g.transform for g in applicable_genes(spec.ptx_text(), spec.launch)}


def build_mutate_context(spec: KernelSpec, genome: Genome, baseline: Measurement | None,
                         current: Measurement | None, best_genome: Genome | None,
                         outcomes: Sequence[GeneOutcome] | None, recent_failures: list[str],
                         methods: list[dict], max_ptx_lines: int = 400, *,
                         best: Measurement | None = None, arch: str = "sm_90",
                         history: Sequence[str] = (), history_left_out: int = 0,
                         known: Mapping[str, dict] | None = None,
                         context_chars: int = search_facts.CONTEXT_CHARS,
                         top_k: int = search_facts.TOP_K) -> dict:
    """The mutate prompt's context for ``genome`` applied to ``spec``'s baseline PTX.

    ``outcomes`` are those of ``apply_genome`` if the caller has them (None: recomputed);
    ``best`` is the best genome's measurement; ``history`` the lines of
    ``PatchHistory.lines`` (and how many entries they left out); ``known`` the search's
    results so far (``KernelSearch.known``: effective genome key -> result summary), for
    the top variants, the gene effects and the memory figures; ``arch`` the arch evo
    compiles for (the PTX's own arch-specific ``.target`` wins). The current PTX is
    compiled here (ptxas, then cuobjdump for the opcode histogram) because the prompt
    must describe exactly the code it shows.
    """
    applied = apply_genome(spec.ptx_text(), genome, spec.launch)
    outcomes = list(applied.outcomes if outcomes is None else outcomes)
    base_cycles, cur_cycles = _cycle_figure(baseline), _cycle_figure(current)
    if base_cycles["cycles"] and cur_cycles["cycles"]:
        change = cur_cycles["cycles"] / base_cycles["cycles"] - 1
        cur_cycles["vs_baseline"] = f"{change:+.1%} vs baseline"
    best_info = None
    if best_genome is not None:
        best_info = {"genome": str(best_genome), "cycles": _cycle_figure(best)}
    resources, sass = _compile_figures(applied.ptx, arch)
    launch = applied.launch or spec.launch
    base_summary = search_facts.summary_of(known, Genome())
    cur_summary = search_facts.summary_of(known, genome)
    base_ref = base_cycles["cycles"] or (base_summary or {}).get("cycles")
    ctx = MutateContext(
        kernel=_kernel_info(spec), genome=str(genome),
        launch={"grid": list(spec.grid), "block": list(spec.block), "blocks": spec.blocks,
                "threads_per_block": spec.threads_per_block, "shared_mem": spec.shared_mem,
                "timer": spec.timing,
                "variant": None if launch == spec.launch else {
                    "grid": list(launch.grid), "block": list(launch.block),
                    "blocks": math.prod(launch.grid),
                    "threads_per_block": math.prod(launch.block)}},
        target=target_of(applied.ptx, arch, resources.get("arch")),
        profile={"bytes": search_facts.bytes_text(spec),
                 # a tiny kernel's "0.00 MB" says nothing a model can use
                 "bytes_shown": spec.bytes_read + spec.bytes_written >= 1e6,
                 "baseline": search_facts.memory(
                     spec, "Baseline", search_facts.figures(baseline, base_summary)),
                 "current": search_facts.memory(
                     spec, "Current variant", search_facts.figures(current, cur_summary)),
                 "occupancy": occupancy(
                     resources.get("arch") or arch,
                     resources.get("registers") if resources.get("ok") else None,
                     math.prod(launch.block), resources.get("shared_mem") or 0,
                     spec.shared_mem)},
        genes=[_gene_info(i, o) for i, o in enumerate(outcomes)],
        ptx=ptx_view(applied.ptx, spec.entry, max_ptx_lines),
        resources=resources, sass=sass, baseline=base_cycles, current=cur_cycles,
        best=best_info, recent_failures=[_clip(f, 400) for f in recent_failures[-MAX_FAILURES:]],
        history=list(history), history_left_out=history_left_out,
        methods=_top_methods(methods),
        search=search_facts.search_context(known, base_ref, context_chars, top_k,
                                           applicable=_applicable_transforms(spec)),
        static=any(m is not None and m.is_static for m in (baseline, current, best)),
    )
    ctx.profile["measured"] = ctx.profile["baseline"]["measured"] or \
        ctx.profile["current"]["measured"]
    ctx.static = ctx.static or ctx.search["static"]
    return asdict(ctx)


def build_repair_context(spec: KernelSpec, ptx: str, patch: PatchGene | str, error: str, *,
                         stage: str = "apply", patched_ptx: str | None = None,
                         context_lines: int = 8, max_region_lines: int = 160,
                         arch: str = "sm_90") -> dict:
    """The repair prompt's context: a patch that failed at ``stage`` ("apply": it did not
    match ``ptx``; "assemble": ptxas rejected ``patched_ptx``), its error, the lines of
    ``ptx`` it targeted (numbered, with ``context_lines`` around them) and the target
    architecture (``arch``: the compile arch; the PTX's arch-specific ``.target`` wins)."""
    gene = patch if isinstance(patch, PatchGene) else PatchGene(str(patch))
    lines = ptx.splitlines()
    hits = _targeted_lines(lines, gene.diff)
    region = _numbered_region(lines, hits, context_lines, max_region_lines)
    error_region = None
    if stage == "assemble":
        # ptxas line numbers refer to the patched text: show that text around them.
        source = (patched_ptx or ptx).splitlines()
        bad = [int(n) - 1 for n in _PTXAS_LINE_RE.findall(error) if 0 < int(n) <= len(source)]
        if bad:
            error_region = _numbered_region(source, bad, 3, 60)["text"]
    return {
        "kernel": {"name": spec.name, "entry": spec.entry, "description": spec.description},
        "patch": {"diff": gene.diff, "method": gene.method, "rationale": gene.rationale},
        "stage": stage, "error": _clip(error.strip() or "(no error text)", 4000),
        "region": region, "error_region": error_region, "target": target_of(ptx, arch),
    }


# --------------------------------------------------------------------------- kernel facts


def _kernel_info(spec: KernelSpec) -> dict:
    ptx_params = ptx_entries(spec.ptx_text()).get(spec.entry, [])
    params = []
    for i, p in enumerate(spec.params):
        info: dict[str, Any] = {"name": p.name, "kind": p.kind, "dtype": p.dtype,
                                "ptx_name": ptx_params[i].name if i < len(ptx_params) else p.name}
        if isinstance(p, BufferParam):
            info.update(count=p.count, role=p.role, value=None)
        else:
            info.update(count=None, role="scalar", value=p.value)
        params.append(info)
    from harness.gpu.buffers import BUFFER_ALIGN

    return {"name": spec.name, "entry": spec.entry, "description": spec.description,
            "params": params, "buffer_align": BUFFER_ALIGN}


def _gene_info(index: int, outcome: GeneOutcome) -> dict:
    gene = outcome.gene
    is_patch = isinstance(gene, PatchGene)
    summary = {"applied": f"applied ({outcome.changes} change{'s' * (outcome.changes != 1)})",
               "no-op": "no-op", "replaced": "replaced by a later gene of its group",
               "failed": "failed", "error": "error"}.get(outcome.status, outcome.status)
    if outcome.detail and outcome.status not in ("applied", "replaced"):
        summary += f": {_clip(outcome.detail, 300)}"
    return {"index": index + 1, "gene": str(gene), "kind": "patch" if is_patch else "transform",
            "status": outcome.status, "changes": outcome.changes, "detail": outcome.detail,
            "method": gene.method if is_patch else "", "summary": summary,
            "rationale": gene.rationale if is_patch else ""}


def _cycle_figure(m: Measurement | None) -> dict:
    """One cycle figure with a label that says where it came from."""
    out = {"cycles": None, "timer": "", "static": False, "valid": False, "reason": "",
           "vs_baseline": "", "text": "not measured yet"}
    if m is None:
        return out
    out.update(timer=m.timer, static=m.is_static, valid=m.valid, reason=m.reason)
    if not m.valid or m.cycles is None:
        out["text"] = f"invalid: {m.reason}"
    elif m.is_static:
        out.update(cycles=float(m.cycles), text=f"{m.cycles:.0f} (static estimate, not measured)")
    else:
        spread = "" if m.p10 is None or m.p90 is None else f", p10-p90 {m.p10:.0f}-{m.p90:.0f}"
        runs = f", median of {m.n}" if m.n else ""
        out.update(cycles=float(m.cycles), text=f"{m.cycles:.0f} cycles ({m.timer}{runs}{spread})")
    return out


def _compile_figures(ptx: str, arch: str) -> tuple[dict, dict]:
    """ptxas resources and the SASS opcode histogram of ``ptx`` (never raises)."""
    from harness.compile import compile_ptx
    from harness.sass import disassemble, hot_region, opcode_histogram
    from harness.toolchain import MissingToolError

    sass = {"available": False, "top": [], "instructions": 0, "reason": "ptxas failed",
            "hot": None}
    try:
        result = compile_ptx(ptx, arch)
    except MissingToolError as err:  # a prompt without figures beats no prompt at all
        sass["reason"] = "ptxas unavailable"
        return {"ok": False, "error": f"ptxas unavailable: {err}",
                "arch": target_of(ptx, arch)["arch"]}, sass
    keys = ("registers", "spill_stores", "spill_loads", "stack_frame", "shared_mem")
    resources = {"ok": result.ok, "error": result.error, "arch": result.arch or arch,
                 **{k: getattr(result, k) for k in keys}}
    if result.ok:
        text = disassemble(result.cubin)
        if text is None:
            sass["reason"] = "unavailable (cuobjdump not found or failed)"
        else:
            hist = opcode_histogram(text)
            sass.update(available=True, reason="", instructions=sum(hist.values()),
                        top=[[op, n] for op, n in hist.most_common(TOP_OPCODES)],
                        hot=hot_region(text))  # the SASS the prompt shows beside the PTX
    return resources, sass


def _top_methods(methods: list[dict]) -> list[dict]:
    """The catalogue's best methods (``Store.top_methods`` rows): most successes, then the
    best mean gain (a fraction of cycles saved)."""
    rows = [{"label": str(m.get("label", "")), "attempts": int(m.get("attempts", 0)),
             "successes": int(m.get("successes", 0)), "mean_gain": float(m.get("mean_gain", 0.0))}
            for m in methods]
    rows.sort(key=lambda m: (-m["successes"], -m["mean_gain"], m["label"]))
    return [{**m, "gain_text": f"{m['mean_gain']:.1%} fewer cycles on average"}
            for m in rows[:MAX_METHODS]]


def _clip(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 15] + " ... (clipped)"


# --------------------------------------------------------------------------- the PTX shown


def _diff_targets(diff: str) -> tuple[list[list[str]], list[int]]:
    """Old-side line groups of a unified diff or of SEARCH blocks, and hunk start lines."""
    groups: list[list[str]] = []
    starts, cur, state = [], [], "diff"  # state: "diff", "search" or "replace"
    for raw in diff.splitlines():
        marker = raw.startswith(("<<<<<<<", ">>>>>>>"))
        if marker or raw.startswith("=======") and state == "search":
            groups.append(cur)
            cur, state = [], {"<": "search", "=": "replace", ">": "diff"}[raw[0]]
        elif state != "diff":
            cur.extend([raw] if state == "search" else [])
        elif raw.startswith("@@"):
            groups.append(cur)
            cur = []
            if m := re.match(r"@@ -(\d+)", raw):
                starts.append(int(m.group(1)) - 1)
        elif raw.startswith(("--- ", "+++ ")) and not starts:
            continue  # file headers come before the first hunk
        elif raw.startswith(("-", " ")):
            cur.append(raw[1:])
    groups.append(cur)
    return [g for g in groups if g], starts


def _targeted_lines(lines: Sequence[str], diff: str) -> list[int]:
    """Indices of ``lines`` that the patch's old side names (whitespace-normalized).

    Each group of old lines is anchored on its rarest line that occurs in the PTX, at
    the occurrence where most of the group lines up (a context line such as ``ret;``
    occurs everywhere); a group with no exact line falls back to close matches, and a
    patch with none at all to its hunk headers' line numbers.
    """
    norm = [" ".join(l.split()) for l in lines]
    where: dict[str, list[int]] = {}
    for i, n in enumerate(norm):
        where.setdefault(n, []).append(i)
    groups, starts = _diff_targets(diff)
    hits: list[int] = []
    for group in groups:
        wanted = [" ".join(g.split()) for g in group]
        present = [k for k, w in enumerate(wanted) if w and w in where]
        if present:
            k = min(present, key=lambda k: len(where[wanted[k]]))
            start = max((p - k for p in where[wanted[k]]),
                        key=lambda s, wanted=wanted: (_lined_up(norm, wanted, s), -s))
            hits.extend(i for i in range(start, start + len(wanted)) if 0 <= i < len(lines))
            continue
        for w in [w for w in wanted if w][:10]:  # difflib is slow: a few lines suffice
            if close := difflib.get_close_matches(w, norm, n=1, cutoff=0.75):
                hits.append(where[close[0]][0])
    if not hits:
        hits = [s for s in starts if 0 <= s < len(lines)]
    return sorted(set(hits))


def _lined_up(norm: Sequence[str], wanted: Sequence[str], start: int) -> int:
    """How many of ``wanted`` equal the lines of ``norm`` from ``start`` on."""
    return sum(0 <= start + j < len(norm) and norm[start + j] == w for j, w in enumerate(wanted))


def _numbered_region(lines: Sequence[str], hits: list[int], around: int, limit: int) -> dict:
    """Numbered lines within ``around`` of each hit (at most ``limit``, elisions marked);
    the first ``limit`` lines if there is no hit."""
    kept = sorted({i for h in hits for i in range(h - around, h + around + 1)
                   if 0 <= i < len(lines)}) if hits else list(range(len(lines)))
    kept = kept[:limit]
    text, _ = render_kept(lines, kept)
    return {"text": text, "first": kept[0] + 1 if kept else 0,
            "last": kept[-1] + 1 if kept else 0, "found": bool(hits)}
