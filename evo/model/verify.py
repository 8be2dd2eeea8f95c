"""Verify a program with evolved kernels against itself without them: outputs, then step
time, interleaved A/B (``verify``); and the report that says what was gained (``report``).

The step is timed with CUDA events around one call (its GPU time, and host gaps where the
program waits on the host: what a user's step takes), A and B alternating with the order
flipped every round so that drift in clocks or temperature falls on both; medians. The
outputs of one call with and one without are compared under a tolerance for the whole
program (rounding differences of bf16 kernels grow through layers: 5e-2 by default); the
largest differences are reported either way.
"""

from __future__ import annotations

import statistics


def _tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().clone()]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in _tensors(item)]
    return []


def verify(step, inputs, installed, repeats: int = 30, rtol: float = 5e-2, atol: float = 5e-2) -> dict:
    """Run ``step(*inputs)`` with ``installed`` (``evo.model.install.Installed``, entered)
    disabled and enabled; returns outputs' agreement and both step times (ms, medians)."""
    import torch

    results = {}
    for enabled in (False, True):  # the first call finds the kernels; both warm up
        installed.enable() if enabled else installed.disable()
        results[enabled] = _tensors(step(*inputs))
        torch.cuda.synchronize()
    installed.stop_looking()  # from here on, launches cost what they cost without evo
    worst_abs = worst_rel = 0.0
    agree = len(results[False]) == len(results[True]) and len(results[False]) > 0
    for a, b in zip(results[False], results[True]):
        a, b = a.float(), b.float()
        err = (a - b).abs()
        worst_abs = max(worst_abs, float(err.max()) if err.numel() else 0.0)
        rel = err / a.abs().clamp_min(1e-30)
        worst_rel = max(worst_rel, float(rel[a.abs() > atol].max()) if (a.abs() > atol).any() else 0.0)
        agree = agree and bool(torch.allclose(b, a, rtol=rtol, atol=atol))
    times = {False: [], True: []}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(repeats):
        for enabled in ((False, True) if i % 2 == 0 else (True, False)):
            installed.enable() if enabled else installed.disable()
            start.record()
            step(*inputs)
            stop.record()
            stop.synchronize()
            times[enabled].append(start.elapsed_time(stop))
    installed.enable()
    base, evolved = statistics.median(times[False]), statistics.median(times[True])
    return {"outputs_agree": agree, "rtol": rtol, "atol": atol, "max_abs_err": worst_abs,
            "max_rel_err": worst_rel, "baseline_ms": base, "evolved_ms": evolved,
            "speedup": base / evolved, "repeats": repeats,
            "spread": {"baseline": [min(times[False]), max(times[False])],
                       "evolved": [min(times[True]), max(times[True])]},
            "kernels_installed": sorted(name for name, on in installed.swapped.items() if on),
            "kernels_refused": dict(installed.refused)}


def roofline(measured: dict | None) -> float | None:
    """Share of the copy roofline a measurement reached: the least bytes the kernel must
    move over the time a copy of as many bytes takes, against its own time (events notes:
    ``bytes_moved``, ``copy_gbps``, ``us_per_launch``); None where one is missing."""
    if not measured:
        measured = {}
    notes = {**measured.get("notes", {}), **measured}
    moved, gbps, us = notes.get("bytes_moved"), notes.get("copy_gbps"), notes.get("us_per_launch")
    if not (moved and gbps and us):
        return None
    return moved / (gbps * 1e3) / us  # bytes / (GB/s x 1e3) = µs at the copy's rate


def _installed(choice, verdict: dict) -> str:
    """What happened to one planned kernel in the program: installed, or why not."""
    if choice.cubin is None:
        return f"no: {choice.reason}"
    if "kernels_installed" not in verdict:  # a verdict from before the program ran
        return "yes"
    if choice.kernel in verdict["kernels_installed"]:
        return "yes"
    refused = verdict.get("kernels_refused", {}).get(choice.kernel)
    return f"no: {refused}" if refused else "no: not launched with its captured sizes"


def report(verdict: dict, manifest: dict, choices, results=None) -> str:
    """The lines a user reads: the step before and after, the share of the step in Triton
    kernels and the limits it sets (all free; all at the copy roofline), and per kernel its
    share, speedup, share of the roofline and what was installed."""
    by_name = {r.kernel: r for r in (results or [])}
    step_us, triton_us = manifest.get("step_gpu_us") or 0.0, manifest.get("triton_gpu_us") or 0.0
    lines = [f"step: torch.compile {verdict['baseline_ms']:.3f} ms -> with evo's kernels "
             f"{verdict['evolved_ms']:.3f} ms ({verdict['speedup']:.3f}x end to end, median of "
             f"{verdict['repeats']} A/B rounds)",
             f"outputs {'agree' if verdict['outputs_agree'] else 'DIFFER'} (rtol {verdict['rtol']:g}, "
             f"atol {verdict['atol']:g}; max abs error {verdict['max_abs_err']:.3g}, "
             f"max rel error {verdict['max_rel_err']:.3g})"]
    if step_us and triton_us:
        share = triton_us / step_us
        lines.append(f"Triton kernels: {100 * share:.1f} % of the step's GPU time "
                     f"({triton_us:.1f} of {step_us:.1f} us, profiled); were they free, the "
                     f"step could be at most {1 / (1 - share):.2f}x faster")
    rows, saved = [], 0.0
    for c in choices:
        k = next((k for k in manifest["kernels"] if k["name"] == c.name), {})
        r = by_name.get(c.name)
        result = getattr(r, "result", None)
        base, best = (roofline(getattr(result, "baseline", None)),
                      roofline(getattr(result, "best", None)))
        if base is not None and k.get("gpu_us"):
            saved += k["gpu_us"] * max(0.0, 1.0 - min(base, 1.0))
        gain = f"{r.speedup:.2f}x" if r is not None and r.speedup else "-"
        share = f"{100 * k['share']:.1f} %" if k.get("share") else "-"
        roof = "-" if base is None else (f"{100 * base:.0f} %" + (f" -> {100 * best:.0f} %" if best else ""))
        done = _installed(c, verdict)
        rows.append(f"{c.name} | {share} | {gain} | {roof} | {done}")
    if step_us and saved:
        lines.append(f"at the copy roofline the kernels evolved here would save at most "
                     f"{saved:.1f} us of the step's GPU time ({step_us / (step_us - saved):.3f}x)")
    lines.append("kernel | share | speedup (evo's cycles) | copy roofline | installed")
    return "\n".join(lines + rows)
