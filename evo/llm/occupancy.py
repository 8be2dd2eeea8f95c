"""The target architecture of a kernel and its theoretical occupancy, for the LLM's prompt.

``target_of`` names the architecture the prompt talks about: the one ptxas assembles for
(the PTX's own ``.target`` when that is arch-specific, such as Triton's ``sm_90a``, else
the configured compile arch; ``harness.compile.target_arch``), with the PTX's declared
``.target`` beside it. Nothing here assumes sm_90.

``occupancy`` is the CUDA occupancy calculator's arithmetic (``cuda_occupancy.h``:
``cudaOccMaxActiveBlocksPerMultiprocessor`` with partitioned global caching off, the
default since compute capability 7.0) over the limits of ``SM_LIMITS``: resident blocks
per SM as the least of what the warp slots, the register file, shared memory and the
block slots allow, and which of them binds. It is a static figure (ptxas's registers and
shared memory, the launch's block size), never a measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WARP = 32


@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits of one compute capability."""

    family: str
    regs_per_sm: int  # 32-bit registers in the register file
    max_regs_per_thread: int
    reg_unit: int  # registers are allocated per warp in units of this many
    reg_partitions: int  # the register file is split over this many sub-partitions
    regs_per_block: int
    smem_per_sm: int  # bytes of shared memory at the largest carveout
    smem_per_block: int  # bytes a block may use at most (opt-in)
    smem_unit: int  # shared memory is allocated per block in units of this many bytes
    smem_reserved: int  # bytes the driver reserves in every block (CUDA >= 11, cc >= 8.0)
    max_threads_per_sm: int
    max_blocks_per_sm: int


# Source: the CUDA C Programming Guide, "Compute Capabilities", table "Technical
# Specifications per Compute Capability" (registers, shared memory, resident threads and
# blocks per SM), and the CUDA occupancy calculator, cuda_occupancy.h (register
# allocation unit 256 per warp, 4 register sub-partitions, shared memory allocation
# unit 128 B, 1 KB reserved per block). Keyed by the arch without its a/f suffix.
SM_LIMITS: dict[str, SmLimits] = {
    "sm_80": SmLimits("Ampere", 65536, 255, 256, 4, 65536, 164 * 1024, 163 * 1024, 128,
                      1024, 2048, 32),
    "sm_90": SmLimits("Hopper", 65536, 255, 256, 4, 65536, 228 * 1024, 227 * 1024, 128,
                      1024, 2048, 32),
    "sm_100": SmLimits("Blackwell", 65536, 255, 256, 4, 65536, 228 * 1024, 227 * 1024, 128,
                       1024, 2048, 32),
}

_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+(sm_\d+[a-z]?)\b", re.M)
_FAMILY = {"sm_7": "Volta/Turing", "sm_8": "Ampere/Ada", "sm_9": "Hopper", "sm_10": "Blackwell",
           "sm_12": "Blackwell"}


def ptx_target(ptx: str) -> str | None:
    """The PTX's declared ``.target`` (``sm_90a``), or None when it names none."""
    m = _TARGET_RE.search(ptx)
    return m.group(1) if m else None


def base_arch(arch: str) -> str:
    """``sm_90a`` -> ``sm_90``: the arch whose limits apply."""
    return re.sub(r"(?<=\d)[a-z]$", "", arch)


def target_of(ptx: str, compile_arch: str, compiled_for: str | None = None) -> dict:
    """What the prompt says about the architecture: ``arch`` (what ptxas assembles for:
    ``compiled_for`` when a compile said so, else ``harness.compile.target_arch``),
    ``family`` (e.g. Hopper, "" when unknown) and ``ptx_target`` (the PTX's ``.target``)."""
    from harness.compile import target_arch

    arch = compiled_for or target_arch(ptx, compile_arch)
    limits = SM_LIMITS.get(base_arch(arch))
    family = limits.family if limits else next(
        (name for prefix, name in _FAMILY.items() if re.fullmatch(rf"{prefix}\d[a-z]?", arch)), "")
    return {"arch": arch, "family": family, "ptx_target": ptx_target(ptx) or ""}


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def occupancy(arch: str, registers: int | None, threads_per_block: int,
              static_smem: int = 0, dynamic_smem: int = 0) -> dict:
    """Resident blocks per SM and the share of the SM's warp slots they fill.

    Returns ``{"available", "arch", "blocks_per_sm", "warps_per_sm", "max_warps",
    "occupancy" (0..1), "limits" {threads, registers, shared_mem, blocks: blocks each
    allows}, "binding" [the limits equal to the least, in that order], "smem_per_block"
    (bytes allocated, reserve included), "reason", "text"}``; ``available`` is False (with
    the reason) for an arch without a limits table or without a register count.
    """
    out = {"available": False, "arch": arch, "blocks_per_sm": 0, "warps_per_sm": 0,
           "max_warps": 0, "occupancy": 0.0, "limits": {}, "binding": [],
           "smem_per_block": 0, "reason": "", "text": ""}
    lim = SM_LIMITS.get(base_arch(arch))
    if lim is None:
        out["reason"] = f"no occupancy limits table for {arch}"
    elif registers is None:
        out["reason"] = "ptxas gave no register count"
    elif threads_per_block <= 0:
        out["reason"] = "no threads per block"
    if out["reason"]:
        out["text"] = f"unknown ({out['reason']})"
        return out
    warps = -(-threads_per_block // WARP)
    max_warps = lim.max_threads_per_sm // WARP
    by_threads = max_warps // warps
    # Registers: allocated per warp in units of reg_unit, warps placed per sub-partition;
    # the hardware's per-block check rounds the block's warps up to the sub-partitions.
    regs_per_warp = _round_up(max(registers, 1) * WARP, lim.reg_unit)
    if (registers > lim.max_regs_per_thread
            or regs_per_warp * _round_up(warps, lim.reg_partitions) > lim.regs_per_block):
        by_regs = 0
    else:
        per_partition = (lim.regs_per_sm // lim.reg_partitions) // regs_per_warp
        by_regs = per_partition * lim.reg_partitions // warps
    smem = _round_up(static_smem + dynamic_smem + lim.smem_reserved, lim.smem_unit)
    by_smem = 0 if static_smem + dynamic_smem > lim.smem_per_block else lim.smem_per_sm // smem
    limits = {"threads": by_threads, "registers": by_regs, "shared_mem": by_smem,
              "blocks": lim.max_blocks_per_sm}
    blocks = min(limits.values())
    binding = [k for k, v in limits.items() if v == blocks]
    out.update(available=True, blocks_per_sm=blocks, warps_per_sm=blocks * warps,
               max_warps=max_warps, occupancy=blocks * warps / max_warps, limits=limits,
               binding=binding, smem_per_block=smem)
    out["text"] = _text(out, lim, registers, threads_per_block, static_smem + dynamic_smem)
    return out


_WHY = {"threads": "threads ({n} per SM)", "registers": "registers ({n} per SM)",
        "shared_mem": "shared memory ({n} bytes per SM)", "blocks": "the block slots ({n} per SM)"}


def _text(o: dict, lim: SmLimits, registers: int, threads: int, smem: int) -> str:
    sizes = {"threads": lim.max_threads_per_sm, "registers": lim.regs_per_sm,
             "shared_mem": lim.smem_per_sm, "blocks": lim.max_blocks_per_sm}
    why = " and ".join(_WHY[k].format(n=sizes[k]) for k in o["binding"])
    if o["blocks_per_sm"] == 0:
        return (f"a block of {threads} threads x {registers} registers with {smem} bytes of "
                f"shared memory does not fit on one {o['arch']} SM: {why}")
    each = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in o["limits"].items())
    return (f"{o['blocks_per_sm']} blocks of {threads} threads per SM = {o['warps_per_sm']} of "
            f"{o['max_warps']} warps ({100 * o['occupancy']:.0f} %), limited by {why}; blocks each "
            f"limit allows: {each} ({registers} registers per thread, {smem} bytes of shared "
            f"memory per block + {lim.smem_reserved} reserved)")
