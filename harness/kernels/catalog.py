"""The kernel suite as data: one entry per kernel, from which `regenerate` writes the specs.

Each entry is a plain dict in the spec's TOML shape (see `harness.kernels.spec`) plus `source`
(the `.cu` in `src/`) and `defines` (extra `-D` flags). Keeping the launch shapes, sizes
and fills here, next to nothing else, means a kernel's spec and its sources cannot drift:
`python -m harness.kernels.regenerate` rewrites both the `.ptx` and the `.toml` from this.
"""

from __future__ import annotations

import itertools

GEMM_SIZES = (2, 4, 6, 8)
"""m, n, k of the 64-kernel gemm_tile family."""

GEMM_CUBES = (10, 12, 14, 16)
"""The larger square gemm_tile kernels (m = n = k)."""


def buf(name: str, dtype: str, count: int, role: str, fill: str | None = None, **opts) -> dict:
    """A buffer param; `fill` defaults (in the spec) to normal and is ignored for outputs."""
    param = {"name": name, "kind": "buffer", "dtype": dtype, "count": count, "role": role}
    if fill is not None:
        param["fill"] = fill
    param.update(opts)
    return param


def scalar(name: str, dtype: str, value: int | float) -> dict:
    """A scalar param passed by value."""
    return {"name": name, "kind": "scalar", "dtype": dtype, "value": value}


def gemm_name(m: int, n: int, k: int) -> str:
    """Suite (and PTX entry) name of one gemm_tile kernel."""
    return f"gemm_tile_{m}x{n}x{k}"


def gemm_shapes() -> list[tuple[int, int, int]]:
    """Every (m, n, k) in the suite: the {2,4,6,8}^3 family, then the larger cubes."""
    family = list(itertools.product(GEMM_SIZES, repeat=3))
    return family + [(s, s, s) for s in GEMM_CUBES]


def gemm_entry(m: int, n: int, k: int) -> dict:
    """Catalog entry of gemm_tile_MxNxK: one thread, clock64 timing."""
    return {
        "name": gemm_name(m, n, k),
        "source": "gemm_tile.cu",
        "defines": {"GEMM_M": m, "GEMM_N": n, "GEMM_K": k},
        "grid": [1, 1, 1],
        "block": [1, 1, 1],
        "timing": "clock64",
        "reference": "gemm",
        "description": f"C[{m}x{n}] = A[{m}x{k}] @ B[{k}x{n}], row-major f32, one thread, fully unrolled",
        # Outputs reach |C| ~ sqrt(k); an atol of 1e-4 covers f32 rounding of k-term fma chains.
        "tolerance": {"rtol": 1e-5, "atol": 1e-4},
        "meta": {"m": m, "n": n, "k": k},
        "params": [
            buf("A", "f32", m * k, "in", "normal"),
            buf("B", "f32", k * n, "in", "normal"),
            buf("C", "f32", m * n, "out"),
        ],
    }


N_1M = 1 << 20
ROWS, COLS = 1024, 1024


def _many_block() -> list[dict]:
    """The many-thread, many-block kernels (CUDA events timing)."""
    return [
        {
            "name": "reduce_sum", "peer": "harness.kernels.peers:reduce_sum", "grid": [N_1M // 512, 1, 1], "block": [256, 1, 1],
            "reference": "reduce_sum", "tolerance": {"rtol": 1e-5, "atol": 1e-4},
            "description": "one partial sum per block of 512 floats (shared-memory tree reduction), 1M floats",
            "meta": {"per_block": 512},
            "params": [buf("x", "f32", N_1M, "in", "normal"),
                       buf("partial", "f32", N_1M // 512, "out"), scalar("n", "u32", N_1M)],
        },
        {
            "name": "reduce_max", "peer": "harness.kernels.peers:reduce_max", "grid": [N_1M // 512, 1, 1], "block": [256, 1, 1],
            "reference": "reduce_max", "tolerance": {"rtol": 0.0, "atol": 0.0},
            "description": "one partial maximum per block of 512 floats (shared-memory tree reduction), 1M floats",
            "meta": {"per_block": 512},
            "params": [buf("x", "f32", N_1M, "in", "normal"),
                       buf("partial", "f32", N_1M // 512, "out"), scalar("n", "u32", N_1M)],
        },
        {
            "name": "softmax", "peer": "harness.kernels.peers:softmax", "grid": [ROWS, 1, 1], "block": [256, 1, 1],
            "reference": "softmax", "tolerance": {"rtol": 1e-5, "atol": 1e-7},
            "description": "row-wise softmax of a 1024x1024 f32 matrix, one block per row",
            "meta": {"rows": ROWS, "cols": COLS},
            "params": [buf("x", "f32", ROWS * COLS, "in", "normal", std=2.0),
                       buf("y", "f32", ROWS * COLS, "out"), scalar("cols", "u32", COLS)],
        },
        {
            "name": "layernorm", "peer": "harness.kernels.peers:layernorm", "grid": [ROWS, 1, 1], "block": [256, 1, 1],
            "reference": "layernorm", "tolerance": {"rtol": 1e-5, "atol": 1e-5},
            "description": "layer norm over each row of a 1024x1024 f32 matrix (affine), one block per row",
            "meta": {"rows": ROWS, "cols": COLS},
            "params": [buf("x", "f32", ROWS * COLS, "in", "normal", mean=1.0, std=2.0),
                       buf("gamma", "f32", COLS, "in", "uniform", low=0.5, high=1.5),
                       buf("beta", "f32", COLS, "in", "normal", std=0.1),
                       buf("y", "f32", ROWS * COLS, "out"),
                       scalar("cols", "u32", COLS), scalar("eps", "f32", 1e-5)],
        },
        {
            "name": "relu", "peer": "harness.kernels.peers:relu", "grid": [N_1M // 256, 1, 1], "block": [256, 1, 1],
            "reference": "relu", "tolerance": {"rtol": 0.0, "atol": 0.0},
            "description": "y = max(x, 0) elementwise, 1M floats",
            "params": [buf("x", "f32", N_1M, "in", "normal"), buf("y", "f32", N_1M, "out"),
                       scalar("n", "u32", N_1M)],
        },
        {
            "name": "gelu", "peer": "harness.kernels.peers:gelu", "grid": [N_1M // 256, 1, 1], "block": [256, 1, 1],
            "reference": "gelu", "tolerance": {"rtol": 1e-5, "atol": 1e-6},
            "description": "GELU (tanh approximation) elementwise, 1M floats",
            "params": [buf("x", "f32", N_1M, "in", "normal", std=2.0), buf("y", "f32", N_1M, "out"),
                       scalar("n", "u32", N_1M)],
        },
        {
            "name": "saxpy", "peer": "harness.kernels.peers:saxpy", "grid": [N_1M // 256, 1, 1], "block": [256, 1, 1],
            "reference": "saxpy", "tolerance": {"rtol": 1e-6, "atol": 1e-6},
            "description": "y = a*x + y in place, 1M floats",
            "params": [buf("x", "f32", N_1M, "in", "normal"), buf("y", "f32", N_1M, "inout", "normal"),
                       scalar("a", "f32", 2.5), scalar("n", "u32", N_1M)],
        },
        {
            "name": "scan_inclusive", "grid": [N_1M // 256, 1, 1], "block": [256, 1, 1],
            "shared_mem": 2 * 256 * 4,
            "reference": "scan_inclusive", "tolerance": {"rtol": 1e-5, "atol": 1e-4},
            "description": "inclusive prefix sum within each block of 256 floats "
                           "(Hillis-Steele, dynamic shared memory), 1M floats",
            "params": [buf("x", "f32", N_1M, "in", "normal"), buf("y", "f32", N_1M, "out"),
                       scalar("n", "u32", N_1M)],
        },
        {
            "name": "attention", "peer": "harness.kernels.peers:attention", "grid": [128, 8, 1], "block": [128, 1, 1],
            "reference": "attention", "tolerance": {"rtol": 1e-5, "atol": 1e-5},
            "description": "softmax(Q K^T / sqrt(d)) V, 8 heads, seq 128, head dim 32, "
                           "one query row per block (grid x = row, y = head)",
            "meta": {"heads": 8, "seq": 128, "head_dim": 32},
            "params": [buf("Q", "f32", 8 * 128 * 32, "in", "normal"),
                       buf("K", "f32", 8 * 128 * 32, "in", "normal"),
                       buf("V", "f32", 8 * 128 * 32, "in", "normal"),
                       buf("O", "f32", 8 * 128 * 32, "out"),
                       scalar("scale", "f32", 32 ** -0.5)],
        },
        {
            "name": "embedding_gather", "peer": "harness.kernels.peers:embedding_gather", "grid": [4096 * 64 // 256, 1, 1], "block": [256, 1, 1],
            "reference": "embedding_gather", "tolerance": {"rtol": 0.0, "atol": 0.0},
            "description": "out[t] = table[idx[t]] for 4096 int32 token ids, 8192 x 64 f32 table",
            "meta": {"vocab": 8192, "tokens": 4096, "dim": 64},
            "params": [buf("idx", "i32", 4096, "in", "int", low=0, high=8192),
                       buf("table", "f32", 8192 * 64, "in", "normal"),
                       buf("out", "f32", 4096 * 64, "out"),
                       scalar("n_tokens", "u32", 4096), scalar("dim", "u32", 64)],
        },
        {
            "name": "cross_entropy", "grid": [ROWS, 1, 1], "block": [256, 1, 1],
            "reference": "cross_entropy", "tolerance": {"rtol": 1e-5, "atol": 1e-5},
            "description": "per-row loss logsumexp(logits) - logits[label], 1024 rows x 1000 classes, "
                           "one block per row",
            "meta": {"rows": ROWS, "classes": 1000},
            "params": [buf("logits", "f32", ROWS * 1000, "in", "normal", std=2.0),
                       buf("labels", "i32", ROWS, "in", "int", low=0, high=1000),
                       buf("loss", "f32", ROWS, "out"), scalar("classes", "u32", 1000)],
        },
        {
            "name": "batchnorm_infer", "peer": "harness.kernels.peers:batchnorm_infer", "grid": [N_1M // 256, 1, 1], "block": [256, 1, 1],
            "reference": "batchnorm_infer", "tolerance": {"rtol": 1e-5, "atol": 1e-5},
            "description": "batch norm, inference mode (per-channel running mean/var are inputs), "
                           "NCHW 16x64x32x32",
            "meta": {"batch": 16, "channels": 64, "hw": 1024},
            "params": [buf("x", "f32", N_1M, "in", "normal"),
                       buf("mean", "f32", 64, "in", "normal", std=0.5),
                       buf("var", "f32", 64, "in", "uniform", low=0.5, high=2.0),
                       buf("gamma", "f32", 64, "in", "uniform", low=0.5, high=1.5),
                       buf("beta", "f32", 64, "in", "normal", std=0.1),
                       buf("y", "f32", N_1M, "out"),
                       scalar("n", "u32", N_1M), scalar("channels", "u32", 64),
                       scalar("hw", "u32", 1024), scalar("eps", "f32", 1e-5)],
        },
        {
            "name": "transpose", "peer": "harness.kernels.peers:transpose", "grid": [1024 // 32, 512 // 32, 1], "block": [32, 8, 1],
            "reference": "transpose", "tolerance": {"rtol": 0.0, "atol": 0.0},
            "description": "out[1024x512] = in[512x1024]^T via 32x32 shared tiles padded to 33 columns",
            "meta": {"rows": 512, "cols": 1024},
            "params": [buf("inp", "f32", 512 * 1024, "in", "normal"),
                       buf("out", "f32", 512 * 1024, "out"),
                       scalar("rows", "u32", 512), scalar("cols", "u32", 1024)],
        },
    ]


N_DRAM = 1 << 26
"""Elements of each buffer of the DRAM-sized kernels: 256 MB of f32, over 4x the L2 of an
H100 (50 MB) or H200 (60 MB), so every launch streams from DRAM."""


def _dram_sized() -> list[dict]:
    """The memory-bound many-thread kernels again at DRAM sizes (the same PTX: ``ptx`` and
    ``entry`` name the L2-sized kernel's), timed the same way."""
    rows = N_DRAM // COLS
    out = []
    for entry in _many_block():
        if entry["name"] not in ("relu", "gelu", "saxpy", "softmax", "layernorm"):
            continue
        big = dict(entry, name=entry["name"] + "_dram", entry=entry["name"],
                   ptx=entry["name"] + ".ptx", source=entry["name"] + ".cu")
        if "rows" in entry.get("meta", {}):
            big["grid"] = [rows, 1, 1]
            big["meta"] = dict(entry["meta"], rows=rows)
        else:
            big["grid"] = [N_DRAM // entry["block"][0], 1, 1]
        big["params"] = [dict(p, count=N_DRAM) if p.get("count") == N_1M or
                         p.get("count") == ROWS * COLS else
                         dict(p, value=N_DRAM) if p.get("value") == N_1M else p
                         for p in entry["params"]]
        big["description"] = entry["description"].replace("1M floats", "64M floats (DRAM)") \
            .replace("1024x1024", f"{rows}x{COLS} (DRAM)")
        out.append(big)
    return out


def _triton() -> list[dict]:
    """Kernels from Triton (src/triton_kernels.py): Triton's own PTX form, predicated
    loads in braces, two extra scratch-pointer params at the end."""
    scratch = [buf("global_scratch", "u8", 256, "in", "const", value=0),
               buf("profile_scratch", "u8", 256, "in", "const", value=0)]
    return [
        {
            "name": "triton_softmax", "peer": "harness.kernels.peers:softmax", "source": "triton_kernels.py", "triton": True,
            "grid": [ROWS, 1, 1], "block": [128, 1, 1], "shared_mem": 16, "timing": "events",
            "reference": "softmax", "tolerance": {"rtol": 1e-5, "atol": 1e-7},
            "description": "row-wise softmax of a 1024x1024 f32 matrix in Triton, one program "
                           "(4 warps) per row",
            "meta": {"rows": ROWS, "cols": COLS},
            "params": [buf("x", "f32", ROWS * COLS, "in", "normal", std=2.0),
                       buf("y", "f32", ROWS * COLS, "out"), scalar("cols", "i32", COLS),
                       *scratch],
        },
        {
            "name": "triton_add", "peer": "harness.kernels.peers:vector_add", "source": "triton_kernels.py", "triton": True,
            "grid": [N_1M // 1024, 1, 1], "block": [128, 1, 1], "shared_mem": 0,
            "timing": "events", "reference": "vector_add", "tolerance": {"rtol": 0.0, "atol": 0.0},
            "description": "z = x + y elementwise in Triton, 1M floats, 1024 per program",
            "params": [buf("x", "f32", N_1M, "in", "normal"), buf("y", "f32", N_1M, "in", "normal"),
                       buf("z", "f32", N_1M, "out"), scalar("n", "i32", N_1M), *scratch],
        },
    ]


def catalog() -> list[dict]:
    """Every kernel of the suite, gemm_tile first (by m, n, k), then the many-block ones."""
    entries = [gemm_entry(*shape) for shape in gemm_shapes()]
    for entry in _many_block():
        entry.setdefault("source", entry["name"] + ".cu")
        entry.setdefault("timing", "events")
        entries.append(entry)
    for entry in _dram_sized():
        entry.setdefault("timing", "events")
        entries.append(entry)
    entries.extend(_triton())
    return entries
