"""What a captured step costs: each kernel's GPU time under ``torch.profiler`` and the
step's own time, and whether the step waits on the host (its GPU work a small part of it:
faster kernels then shorten only that part). Used by ``evo.capture`` (the manifest's
``step_gpu_us``, ``step_wall_us``), ``evo capture`` of a whole program (``profiled_kernels``)
and the reports that read them. torch is imported where used."""

from __future__ import annotations


def gpu_times(fn, inputs) -> tuple[dict[str, float], float]:
    """(µs of GPU time per kernel name, µs of all kernels) over one call of ``fn``, from
    ``torch.profiler`` (its CUDA events carry the Triton kernels' own names)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*inputs)
        torch.cuda.synchronize()
    times = {name: us for name, (us, _) in profiled_kernels(prof).items()}
    return times, sum(times.values())


WAITS_ON_HOST = 0.8
"""A step whose GPU work is under this part of its time waits on the host: faster kernels
shorten only the GPU's part (transformers' training and inference steps at 8 x 512 tokens:
GPU busy 34-42 %, their steps' A/B within the A/A noise; BENCHMARKS.md, session 24)."""


def step_wall_us(fn, inputs, repeats: int = 3) -> float:
    """Median µs of ``repeats`` unprofiled calls of ``fn(*inputs)``, the GPU synchronized
    before and after each: the step as the program takes it, the host's work included."""
    import statistics
    import time

    import torch

    walls = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*inputs)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e6)
    return statistics.median(walls)


def waits_on_host(manifest: dict) -> str:
    """What to tell a user whose captured step waits on the host (``WAITS_ON_HOST``), else ""."""
    gpu, wall = manifest.get("step_gpu_us"), manifest.get("step_wall_us")
    if not gpu or not wall or gpu >= WAITS_ON_HOST * wall:
        return ""
    return (f"the step waits on the host: its GPU work is {gpu / 1e3:.3f} of its {wall / 1e3:.3f} "
            f"ms ({100 * gpu / wall:.0f} %), and faster kernels shorten only that part (CUDA "
            "graphs, torch.compile(mode=\"reduce-overhead\"), or a larger batch keep the GPU busy)")


def profiled_kernels(prof) -> dict[str, tuple[float, int]]:
    """Kernel name -> (µs of GPU time, runs) from a stopped ``torch.profiler`` (its CUDA
    events carry the Triton kernels' own names, graph nodes' too)."""
    out: dict[str, tuple[float, int]] = {}
    for event in prof.key_averages():
        us = float(getattr(event, "device_time_total", 0.0) or 0.0)
        if us > 0 and str(getattr(event, "device_type", "")).endswith("CUDA"):
            total, runs = out.get(event.key, (0.0, 0))
            out[event.key] = (total + us, runs + int(event.count or 0))
    return out
