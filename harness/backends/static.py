"""The static backend: rank variants without a GPU, from ptxas and SASS figures alone.

This is a cost *proxy*, not a measurement: every record it makes has ``timer="static"``,
``device="static"``, ``backend="static"`` and ``notes["static"] = "static estimate, not
measured"``, and everything that prints one says so. It is meant for CPU-only machines, CI
and smoke tests, where a plausible ranking beats no ranking.

The formula (units are "cycle-like"; the weights are rough figures for one thread on sm_90):

    cost = sum over SASS instructions i of weight(i)                      (straight-line count)
         + SPILL_BYTE_WEIGHT * (ptxas spill store bytes + spill load bytes)
    cost = cost * (1 + REGISTER_PENALTY * max(0, registers - register_budget))

    weight(LDG/STG/LD/ST/ATOM*/RED)  = GLOBAL_WEIGHT + WORD_WEIGHT * words moved (32-bit)
                                       -- issue cost per instruction plus bandwidth per word,
                                          so one 128-bit access (8 + 4) beats four 32-bit ones
                                          (4 * (8 + 1)): width-efficiency, as vectorizing buys
    weight(LDL/STL)                  = LOCAL_WEIGHT      -- spill traffic: heavily penalized
    weight(LDS/STS)                  = SHARED_WEIGHT
    weight(BAR, MUFU)                = 4
    weight(anything else)            = 1

``register_budget`` is 255 for a kernel whose grid is one thread (registers cannot cost it
occupancy), else the registers per thread at which the kernel's threads (up to 2048 per
SM) still fit the 64K-register file; every register beyond it costs 2 % (lost occupancy).

Known blind spots: loops count once (static, not dynamic counts); latency hiding, cache
policies and instruction order are invisible (a ``cache_cg`` or ``reorder`` gene that changes
no instruction scores the same). A development check on an H200 (random genomes, not a
recorded benchmark) found it ranking variants of mid-size gemm tiles fairly well and those
of the tiniest tiles and of many-thread kernels (where it is a per-thread count) poorly:
use it for smoke tests and CPU-only runs, not for decisions.
"""

from __future__ import annotations

import concurrent.futures
import os
import time

from harness.backends import Backend, Variant
from harness.record import Measurement
from harness.sass import sass_stats
from harness.store import STATIC_DEVICE
from harness.toolchain import cuobjdump_env, find_cuobjdump

STATIC_NOTE = "static estimate, not measured"
GLOBAL_WEIGHT = 8.0
WORD_WEIGHT = 1.0
LOCAL_WEIGHT = 16.0
SHARED_WEIGHT = 2.0
SPILL_BYTE_WEIGHT = 1.0
REGISTER_PENALTY = 0.02
_GLOBAL_OPS = ("LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED")
_OTHER_WEIGHTS = {"LDL": LOCAL_WEIGHT, "STL": LOCAL_WEIGHT, "LDS": SHARED_WEIGHT,
                  "STS": SHARED_WEIGHT, "BAR": 4.0, "MUFU": 4.0}
_REGISTER_FILE = 65536
_MAX_THREADS_PER_SM = 2048


def register_budget(spec) -> int:
    """Registers per thread before occupancy suffers (255 for a one-thread kernel)."""
    threads = min(spec.threads, _MAX_THREADS_PER_SM)
    if threads <= 1:
        return 255
    return max(32, min(255, _REGISTER_FILE // threads))


def static_cost(stats: dict, registers: int, spill_bytes: int, budget: int) -> tuple[float, dict]:
    """The formula of the module docstring; returns (cost, its terms for the notes)."""
    opcodes = dict(stats["opcodes"])
    widths = {**{f"ld{k}": v for k, v in stats["global_loads"].items()},
              **{f"st{k}": v for k, v in stats["global_stores"].items()}}
    words = sum(int(k[2:]) // 32 * v for k, v in widths.items())
    global_count = sum(opcodes.pop(op, 0) for op in _GLOBAL_OPS)
    # LD/ST (generic) accesses are not in the width tables; count them as one word each.
    words += global_count - sum(widths.values())
    memory = GLOBAL_WEIGHT * global_count + WORD_WEIGHT * words
    other = sum(_OTHER_WEIGHTS.get(op, 1.0) * n for op, n in opcodes.items())
    spills = SPILL_BYTE_WEIGHT * spill_bytes
    over = max(0, registers - budget)
    cost = (memory + other + spills) * (1 + REGISTER_PENALTY * over)
    terms = {"global_memory_instructions": global_count, "global_words": words,
             "memory_cost": memory, "other_cost": other, "spill_cost": spills,
             "registers_over_budget": over, "register_budget": budget}
    return cost, terms


class StaticBackend(Backend):
    """No GPU: a weighted SASS instruction count (see the module docstring)."""

    name = "static"
    device = STATIC_DEVICE

    def __init__(self, workers: int | None = None):
        # Without cuobjdump there is nothing to estimate from: fail once, here, clearly.
        find_cuobjdump()
        cuobjdump_env()
        self.workers = workers or os.cpu_count() or 1
        self.chosen_because = STATIC_NOTE
        self._stats: dict[str, dict] = {}  # code_hash -> sass_stats: cuobjdump costs ~0.4 s

    def measure_many(self, spec, variants: list[Variant],
                     baseline: Measurement | None = None) -> list[Measurement]:
        """Estimate every variant; cuobjdump runs in parallel (each waits on a subprocess)."""
        todo = [v for v in variants if v.code_hash not in self._stats]
        if todo:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(self.workers, len(todo))) as pool:
                for v, stats in zip(todo, pool.map(lambda v: sass_stats(v.compiled.cubin), todo)):
                    self._stats[v.code_hash] = stats
        return [self._estimate(spec, v) for v in variants]

    def _estimate(self, spec, v: Variant) -> Measurement:
        start = time.perf_counter()
        c = v.compiled
        stats = self._stats[v.code_hash]
        common = dict(kernel=spec.name, device=STATIC_DEVICE, timer="static", backend="static",
                      registers=c.registers, spill_stores=c.spill_stores, spill_loads=c.spill_loads,
                      shared_mem=c.shared_mem, ptx_hash=v.ptx_hash, sass_hash=v.code_hash)
        if not stats.get("available"):
            return Measurement(valid=False, reason=f"static estimate unavailable: {stats.get('reason')}",
                               notes={"static": STATIC_NOTE, "transient": True}, **common)
        spill_bytes = (c.spill_stores or 0) + (c.spill_loads or 0)
        cost, terms = static_cost(stats, c.registers or 0, spill_bytes, register_budget(spec))
        notes = {"static": STATIC_NOTE, "formula": terms, "sass_instructions": stats["instructions"]}
        return Measurement(valid=True, cycles=round(cost, 1), n=0, notes=notes,
                           seconds=time.perf_counter() - start, **common)

