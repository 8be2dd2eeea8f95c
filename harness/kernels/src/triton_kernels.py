"""Suite kernels written in Triton, compiled to PTX without a GPU (Triton 3.6).

``python -m harness.kernels.regenerate 'triton_*'`` calls ``compile_to_ptx``. Triton
emits ``.target sm_90a`` for compute capability 9.0; these kernels use no sm_90a-only
instruction (no wgmma, no TMA), so the target is rewritten to ``sm_90`` to go through the
same ptxas flags as the rest of the suite (ptxas would reject anything sm_90a-only).
Triton adds two pointer parameters after the kernel's own (global and profile scratch);
the specs pass small zeroed buffers for them.
"""

from __future__ import annotations

from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def triton_softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def triton_add(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


KERNELS = {
    "triton_softmax": (triton_softmax, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32"},
                       {"BLOCK": 1024}, 4),
    "triton_add": (triton_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "n": "i32"},
                   {"BLOCK": 1024}, 4),
}


def compile_to_ptx(name: str) -> tuple[str, int, int]:
    """(PTX retargeted to sm_90, dynamic shared memory bytes, threads per block)."""
    fn, signature, constexprs, warps = KERNELS[name]
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ptx = kernel.asm["ptx"].replace(".target sm_90a", ".target sm_90", 1)
    # Debug info names this file: keep it relative, so the PTX is the same on every machine.
    ptx = ptx.replace(str(Path(__file__).resolve().parent), "src")
    ptx = ptx.replace(str(Path(triton.__file__).resolve().parent), "triton")
    return ptx, kernel.metadata.shared, warps * 32
