"""What became of each LLM patch, per kernel: the failure memory that mutate prompts quote.

Every patch outcome is one entry: an answer with no edit in it, an edit that matched no
PTX (did not apply), one that ptxas rejected, one that the correctness gate rejected
(with its reason), and a measured one, slower or faster than its parent. The next mutate
prompts for that kernel quote them in genome notation (``str(Genome)``, e.g.
``vec_ld(width=4),patch(vectorize loads@1a2b3c4d)``) with the edit's own changed lines
(``-old`` / ``+new``, clipped: the label alone does not say what was tried), most recent
and most instructive first, within a character budget (``[llm] history_chars``).

The history is plain JSON kept in the checkpoint (``LlmMutator.stats()["history"]``), so a
resumed run prompts exactly as the interrupted one did; everything here is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Outcome kinds, and how instructive each is: a boost, in places of recency, when
#: ordering. A rejection with its error teaches the most; a speedup shows what works.
OUTCOMES = {"gate": 3, "ptxas": 3, "faster": 2, "no_match": 2, "slower": 1, "correct": 1,
            "no_edit": 0}
KEEP = 200  # entries kept per kernel (the oldest go first)
DETAIL_CHARS = 300  # of an error or reason quoted in one entry
EDIT_CHARS = 200  # of the edit's changed lines quoted in one entry
BOOST = 2  # places of recency per point of instructiveness


class PatchHistory:
    """Entries per kernel: ``{"seq", "genome", "outcome", "detail", "edit"}`` (plain
    JSON; ``edit``: the patch's changed lines, "" where there was no edit)."""

    def __init__(self) -> None:
        self.entries: dict[str, list[dict]] = {}

    def add(self, kernel: str, genome: str, outcome: str, detail: str = "",
            edit: list[str] = ()) -> dict:
        """Record one outcome (``OUTCOMES``) of the patch ending ``genome`` (its str()),
        ``edit`` its changed lines (``genomes.patch.changed_lines``)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown patch outcome {outcome!r}")
        rows = self.entries.setdefault(kernel, [])
        entry = {"seq": rows[-1]["seq"] + 1 if rows else 1, "genome": genome,
                 "outcome": outcome, "detail": _one_line(detail, DETAIL_CHARS),
                 "edit": _clip(" ".join(f"`{ln}`" for ln in edit), EDIT_CHARS)}
        rows.append(entry)
        del rows[:-KEEP]
        return entry

    def lines(self, kernel: str, budget: int) -> tuple[list[str], int]:
        """The kernel's entries as prompt lines within ``budget`` characters, most recent
        and most instructive first (a repeated genome and outcome once, with a count),
        and how many entries were left out."""
        rows = self.entries.get(kernel, [])
        if budget <= 0 or not rows:
            return [], 0
        latest: dict[tuple[str, str], dict] = {}
        times: dict[tuple[str, str], int] = {}
        for row in rows:  # in order: the latest of each (genome, outcome) wins
            key = (row["genome"], row["outcome"])
            latest[key] = row
            times[key] = times.get(key, 0) + 1
        order = sorted(latest, key=lambda k: (-(latest[k]["seq"]
                                                + BOOST * OUTCOMES[latest[k]["outcome"]]),
                                               -latest[k]["seq"]))
        out, used, shown = [], 0, 0
        for key in order:
            line = render(latest[key], times[key])
            if used + len(line) + 1 > budget:
                break
            out.append(line)
            used += len(line) + 1
            shown += times[key]
        return out, len(rows) - shown

    def genomes(self, kernel: str) -> set[str]:
        return {row["genome"] for row in self.entries.get(kernel, [])}

    def to_json(self) -> dict:
        return {k: [dict(r) for r in rows] for k, rows in sorted(self.entries.items())}

    def restore(self, data) -> None:
        """The history of a checkpoint; malformed entries are skipped, not fatal."""
        self.entries = {}
        if not isinstance(data, Mapping):
            return
        for kernel, rows in data.items():
            if isinstance(kernel, str) and isinstance(rows, list):
                self.entries[kernel] = [
                    {"seq": r["seq"], "genome": r["genome"], "outcome": r["outcome"],
                     "detail": str(r.get("detail", "")), "edit": str(r.get("edit", ""))}
                    for r in rows if isinstance(r, Mapping) and isinstance(r.get("seq"), int)
                    and isinstance(r.get("genome"), str) and r.get("outcome") in OUTCOMES][-KEEP:]


def render(entry: dict, times: int = 1) -> str:
    """One entry as a prompt line (Markdown): the genome in backticks, then its fate."""
    what = {"no_edit": "your answer held no edit in the required format",
            "no_match": "did not apply (its old lines match no PTX lines)",
            "ptxas": "ptxas rejected it",
            "gate": "REJECTED by the correctness check",
            "slower": "correct but not faster than its parent",
            "correct": "correct (faster or not: unknown)",
            "faster": "correct and faster than its parent"}[entry["outcome"]]
    genome = entry["genome"]
    head = f"after `{genome}`: {what}" if entry["outcome"] == "no_edit" else f"`{genome}`: {what}"
    detail = f": {entry['detail']}" if entry["detail"] else ""
    again = f" ({times} times)" if times > 1 else ""
    edit = f"; the edit: {entry['edit']}" if entry.get("edit") else ""
    return f"{head}{detail}{again}{edit}"


def _one_line(text: str, limit: int) -> str:
    """``text`` on one line (its lines joined with "; "), clipped to ``limit``."""
    text = "; ".join(" ".join(line.split()) for line in str(text).splitlines() if line.strip())
    return _clip(text, limit)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
