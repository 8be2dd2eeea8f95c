"""A run's checkpoint (``checkpoint.json``): plain JSON, and this module the one owner of
its layout. Every reader and writer goes through the names here, not through string keys
of its own.

The sections:

- ``version``, ``config_hash``: whether a config may continue it (``evo.search``);
- ``backend``: what measured the run (its description); ``events_bytes``: how much of
  events.jsonl the checkpoint covers (``evo.rundir``: a resume cuts the rest);
- ``kernels``: kernel name -> its entry (``KernelEntry``): the strategy's state, the RNG's,
  the evaluations spent, what was measured (``known``: effective genome key -> summary,
  ``evo.search.summary``), and what the steps after the search decided (``exact``,
  ``finalist``, ``confirmed``, ``peer``, ``sizes``);
- ``priors``: kernel name -> the prior its search used (``evo.learn.source``);
- ``seconds``: kernel name -> step -> wall seconds (report.md's time table);
- ``reduced``: kernel name -> the reduction of its best to the genes that matter;
- ``llm``: the LLM operator's state and accounting.

Sections ``PER_KERNEL`` hold one entry per kernel: each kernel's search works on its own
share of them (``evo.driver.KernelLedger``), so searches run at once never share an entry.
"""

from __future__ import annotations

import json
from pathlib import Path

from genomes.genome import Genome

KERNELS, PRIORS, SECONDS, REDUCED, LLM = "kernels", "priors", "seconds", "reduced", "llm"
VERSION, CONFIG_HASH, BACKEND, EVENTS_BYTES = "version", "config_hash", "backend", "events_bytes"
PER_KERNEL = (KERNELS, PRIORS, SECONDS, REDUCED)
FILE = "checkpoint.json"


def dumps(data: dict, encoded: dict | None = None) -> str:
    """``data`` as ``json.dumps(data, sort_keys=True)`` writes it, byte for byte, where the
    entries of the ``PER_KERNEL`` sections found in ``encoded`` ((section, kernel) -> their
    JSON text, as that kernel's last save encoded them) are taken from there. Every kernel's
    save writes the whole checkpoint: encoding only the saving kernel's entries keeps a
    save's cost from growing with every other kernel's (a fake-GPU run of 5 kernels,
    ``--generations 30 --pop 20``, under cProfile: 15 s in saves, copying and encoding,
    beside 52 s of the process's CPU; BENCHMARKS.md, session 20)."""
    if not encoded:
        return json.dumps(data, sort_keys=True)

    def section(name: str, entries: dict) -> str:
        return "{" + ", ".join(f"{json.dumps(kernel)}: " + (
            encoded.get((name, kernel)) or json.dumps(entries[kernel], sort_keys=True))
            for kernel in sorted(entries)) + "}"

    return "{" + ", ".join(f"{json.dumps(key)}: " + (
        section(key, data[key]) if key in PER_KERNEL and isinstance(data[key], dict)
        else json.dumps(data[key], sort_keys=True)) for key in sorted(data)) + "}"


def _field(key: str, doc: str):
    """A property over one key of the entry's JSON (None where it is missing)."""

    def get(self):
        return self.data.get(key)

    def set_(self, value):
        self.data[key] = value

    return property(get, set_, doc=doc)


class KernelEntry:
    """A typed view of one kernel's entry in ``checkpoint["kernels"]``: attributes read and
    write the JSON in place, so the checkpoint stays the plain data that is saved."""

    state = _field("state", "the strategy's state (plain JSON: ``evo.strategies``)")
    done = _field("done", "whether the search ended")
    evals = _field("evals", "evaluations spent")
    rng = _field("rng", "the search's RNG state: [version, internal state, gauss]")
    exact = _field("exact", "the exact twin's decision (``evo.exact.prefer_exact``)")
    finalist = _field("finalist", "the finalist check's result (``evo.run``)")
    confirmed = _field("confirmed", "baseline and best measured again back to back")
    peer = _field("peer", "the spec's torch peer timed, or why not")
    sizes = _field("sizes", "the best checked at the capture's other sizes of its code")

    def __init__(self, data: dict):
        self.data = data

    @property
    def known(self) -> dict:
        """Effective genome key -> summary of its measurement ({} before any)."""
        return self.data.get("known") or {}

    def measured(self, genome: Genome) -> dict | None:
        """The summary of ``genome``'s measurement, or None."""
        return self.known.get(genome.effective().dumps())

    @property
    def baseline(self) -> dict | None:
        return self.known.get(Genome().dumps())


def search_entry(state: dict, done: bool, evals: int, known: dict, rng: list) -> dict:
    """A kernel's entry as a search saves it after a generation."""
    return {"state": state, "done": done, "evals": evals, "known": known, "rng": rng}


def kernel(checkpoint: dict, name: str) -> KernelEntry | None:
    """The entry of kernel ``name``, or None where it has none yet."""
    data = checkpoint.get(KERNELS, {}).get(name)
    return None if data is None else KernelEntry(data)


def kernels(checkpoint: dict) -> dict[str, KernelEntry]:
    """Every kernel's entry, in the checkpoint's order."""
    return {name: KernelEntry(data) for name, data in checkpoint.get(KERNELS, {}).items()}


def estimated(checkpoint: dict) -> bool:
    """Whether the run's figures are the static backend's (``BACKEND``, its description):
    estimates from ptxas and the SASS, no GPU ran or checked any of its kernels."""
    return "static" in checkpoint.get(BACKEND, "").split(" on ", 1)[0]


def section(checkpoint: dict, name: str) -> dict:
    """A per-kernel section (``PER_KERNEL``), made where missing."""
    if name not in PER_KERNEL:
        raise KeyError(f"{name!r} is not a per-kernel section of a checkpoint")
    return checkpoint.setdefault(name, {})


def read(run_dir) -> dict:
    """The checkpoint of a run folder ({} where there is none or it does not parse)."""
    try:
        data = json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
