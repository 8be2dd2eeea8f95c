"""Kernel features from the baseline alone, on the CPU, and a distance between kernels.

A kernel's features are a plain ``dict[str, float]`` from four sources:

* the PTX of its entry (``genomes.ptx.parse``): instructions; global loads and stores by
  count, vector width and bytes; shared and param accesses; the arithmetic mix as
  fractions of all instructions (fma, mul, add, special functions, integer/bit logic,
  conversions, compares, moves, shuffles, barriers, atomics, branches); the share of
  float-typed and of predicated instructions; loops (branches back to an earlier label);
* ptxas (``harness.compile.compile_ptx``): registers, spilled bytes, stack frame, static
  shared memory;
* the SASS (``harness.sass.sass_stats``): instruction count and the share of LDG, STG,
  FFMA, LDS/STS, SHFL, BAR, BRA, LDL/STL, and of 128-bit global loads;
* the spec: threads per block, blocks, threads, dynamic shared memory, bytes read and
  written, whether it is timed with clock64 (single block) or events.

Names starting ``frac_`` or ``is_`` are in [0, 1]; every other value is a count or a size,
compared on a log scale. :func:`distance` is the root mean square difference of the
(log-scaled) features, each divided by a scale (their spread over a set of kernels, from
:func:`feature_scales`), so that no single large count dominates.

Computing one kernel's features costs ~1 s (mostly the disassembly); :func:`features_many`
runs several in threads and keeps results in a caller's cache keyed by
:func:`feature_key` (the PTX and launch, not the name).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import os
import statistics

FEATURES_VERSION = 1

_ARITH = {
    "fma": ("fma", "mad"), "mul": ("mul",), "add": ("add", "sub", "neg", "abs", "min", "max"),
    "sfu": ("ex2", "lg2", "rcp", "sqrt", "rsqrt", "sin", "cos", "tanh", "div"),
    "logic": ("and", "or", "xor", "not", "shl", "shr", "bfe", "bfi", "popc", "clz", "prmt",
              "lop3"),
    "cvt": ("cvt", "cvta"), "cmp": ("setp", "selp", "set", "slct"), "mov": ("mov",),
    "shfl": ("shfl",), "sync": ("bar", "barrier", "membar", "fence"), "atom": ("atom", "red"),
    "bra": ("bra", "brx"),
}
_OP_CLASS = {op: cls for cls, ops in _ARITH.items() for op in ops}
_FLOAT_TYPES = ("f16", "f16x2", "bf16", "bf16x2", "f32", "f64")
_SASS_SHARES = {"ldg": ("LDG",), "stg": ("STG",), "ffma": ("FFMA",), "lds_sts": ("LDS", "STS"),
                "shfl": ("SHFL",), "bar": ("BAR",), "bra": ("BRA",), "ldl_stl": ("LDL", "STL")}


def ptx_features(text: str, entry: str | None = None) -> dict[str, float]:
    """The PTX part: counts of the entry's instructions by kind (see the module docstring)."""
    from genomes import ptx
    from genomes.ptx import Instruction, Label

    func = ptx.parse_shared(text).entry(entry)  # read only
    body = func.body
    out = {"ptx_instructions": 0.0, "ld_global": 0.0, "ld_global_vec": 0.0,
           "ld_global_bytes": 0.0, "st_global": 0.0, "st_global_vec": 0.0,
           "st_global_bytes": 0.0, "ld_shared": 0.0, "st_shared": 0.0, "ld_param": 0.0,
           "loops": 0.0}
    classes = dict.fromkeys(_ARITH, 0)
    floats = predicated = 0
    labels: set[str] = set()
    for line in body:
        stmt = line.stmt
        if isinstance(stmt, Label):
            labels.add(stmt.name)
            continue
        if not isinstance(stmt, Instruction):
            continue
        out["ptx_instructions"] += 1
        op, mods = stmt.op, stmt.mods
        predicated += stmt.pred is not None
        floats += any(m in _FLOAT_TYPES for m in mods)
        if op in _OP_CLASS:
            classes[_OP_CLASS[op]] += 1
        if op == "bra" and stmt.operands and stmt.operands[-1].strip() in labels:
            out["loops"] += 1  # a branch back to a label already seen: a loop's back edge
        if op in ("ld", "st") and stmt.space in ("global", "shared", "param"):
            kind = f"{op}_{stmt.space}"
            if kind in out:
                out[kind] += 1
            if stmt.space == "global":
                vec = next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)
                bits = next((int(m[1:]) for m in reversed(mods)
                             if m[:1] in "fbus" and m[1:].isdigit()), 32)
                out[f"{op}_global_vec"] += vec > 1
                out[f"{op}_global_bytes"] += vec * bits / 8
    n = max(out["ptx_instructions"], 1.0)
    out.update({f"frac_{cls}": count / n for cls, count in classes.items()})
    out["frac_float"] = floats / n
    out["frac_predicated"] = predicated / n
    return out


def resource_features(compiled) -> dict[str, float]:
    """The ptxas part, from a ``CompileResult`` (zeros where ptxas failed)."""
    if not compiled.ok:
        return {"ptxas_ok": 0.0}
    return {"registers": float(compiled.registers or 0),
            "spill_bytes": float((compiled.spill_stores or 0) + (compiled.spill_loads or 0)),
            "stack_frame": float(compiled.stack_frame or 0),
            "static_shared": float(compiled.shared_mem or 0)}


def sass_features(cubin: bytes | None) -> dict[str, float]:
    """The SASS part: instruction count and opcode shares (empty when it cannot be
    disassembled: no cuobjdump, or no cubin)."""
    from harness.sass import sass_stats

    stats = sass_stats(cubin) if cubin else {"available": False}
    if not stats.get("available"):
        return {}
    n = max(stats["instructions"], 1)
    ops = stats["opcodes"]
    out = {"sass_instructions": float(stats["instructions"])}
    for name, names in _SASS_SHARES.items():
        out[f"frac_sass_{name}"] = sum(ops.get(o, 0) for o in names) / n
    loads = stats["global_loads"]
    total = sum(loads.values())
    out["frac_ldg_128"] = loads.get("128", 0) / total if total else 0.0
    return out


def spec_features(spec) -> dict[str, float]:
    """The launch and data part, from a ``KernelSpec``."""
    return {"threads_per_block": float(spec.threads_per_block), "blocks": float(spec.blocks),
            "threads": float(spec.threads), "dynamic_shared": float(spec.shared_mem),
            "bytes_read": float(spec.bytes_read), "bytes_written": float(spec.bytes_written),
            "is_clock64": 1.0 if spec.timing == "clock64" else 0.0}


def kernel_features(spec) -> dict[str, float]:
    """Every feature of the module docstring for one kernel spec."""
    from genomes import ptx
    from harness.compile import compile_ptx

    text = spec.ptx_text()
    target = ptx.parse_shared(text).target or "sm_90"  # read only
    compiled = compile_ptx(text, target if target.startswith("sm_") else "sm_90")
    return {**ptx_features(text, spec.entry), **resource_features(compiled),
            **sass_features(compiled.cubin), **spec_features(spec)}


def feature_key(spec) -> str:
    """What a kernel's features depend on: its PTX, entry, launch and buffers."""
    parts = (FEATURES_VERSION, spec.ptx_text(), spec.entry, spec.grid, spec.block,
             spec.shared_mem, spec.timing, [(b.dtype, b.count, b.role) for b in spec.buffers()])
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def named_key(store_name: str) -> str:
    """The cache key of a kernel's features under the name the store keeps its rows by
    (``KernelSpec.store_name``): how a knowledge base built from a store finds the
    features of a kernel outside the suite (a captured or a user's kernel), whose spec it
    does not have."""
    return f"{store_name}|features {FEATURES_VERSION}"


_SEEN: dict[str, dict[str, float]] = {}  # feature_key -> features, for this process


def features_many(specs: list, cache: dict | None = None, workers: int | None = None
                  ) -> dict[str, dict[str, float]]:
    """Features per kernel name; ``cache`` (feature_key -> features, a store's file) is read
    and filled, and so is this process's own memo: a kernel's features (~1 s of ptxas and
    cuobjdump) are computed once, whether its prior or a policy asks first. ptxas and
    cuobjdump are subprocesses, so threads run them in parallel."""
    cache = {} if cache is None else cache
    # Keyed per spec, not per name: two kernels of one name (two users' specs, name#digest
    # apart) each get their own features, and each store name its own kernel's.
    keys = [feature_key(spec) for spec in specs]
    for key in keys:
        if key not in cache and key in _SEEN:
            cache[key] = _SEEN[key]
    todo = list({key: spec for spec, key in zip(specs, keys) if key not in cache}.items())
    if todo:
        with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
            for (key, _), feats in zip(todo, pool.map(kernel_features, [s for _, s in todo])):
                cache[key] = _SEEN[key] = feats  # computed here only
    for spec, key in zip(specs, keys):  # a kernel stored under another name than the
        if spec.store_name != spec.name:  # suite's (name#digest, name@cold): kept under it
            cache[named_key(spec.store_name)] = cache[key]  # for priors' builds
    return {spec.name: dict(cache[key]) for spec, key in zip(specs, keys)}


def _scaled(name: str, value: float) -> float:
    return value if name.startswith(("frac_", "is_")) else math.log2(1.0 + max(value, 0.0))


def feature_scales(table: list[dict[str, float]]) -> dict[str, float]:
    """Per feature, the standard deviation of its (log-scaled) values over ``table``;
    features that do not vary get 0 and are left out of distances."""
    names = sorted({k for feats in table for k in feats})
    out = {}
    for name in names:
        values = [_scaled(name, feats.get(name, 0.0)) for feats in table]
        out[name] = statistics.pstdev(values) if len(values) > 1 else 0.0
    return out


def distance(a: dict[str, float], b: dict[str, float],
             scales: dict[str, float] | None = None) -> float:
    """Root mean square of the per-feature differences (log scale for counts), each over
    its scale (1 where ``scales`` is None); 0 for identical features."""
    names = sorted(set(a) | set(b))
    if scales is not None:
        names = [n for n in names if scales.get(n, 0.0) > 1e-9]
    if not names:
        return 0.0
    total = 0.0
    for n in names:
        diff = _scaled(n, a.get(n, 0.0)) - _scaled(n, b.get(n, 0.0))
        total += (diff / (scales[n] if scales is not None else 1.0)) ** 2
    return math.sqrt(total / len(names))
