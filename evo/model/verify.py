"""Verify a program with evolved kernels against itself without them: outputs, then step
time, interleaved A/B (``verify``); and the report that says what was gained (``report``).

The step is timed with CUDA events around one call (its GPU time, and host gaps where the
program waits on the host: what a user's step takes): its own kernels, evo's, and its own
again (an A/A control: what the same step reads against itself is the noise any end to
end figure carries), the order changed every round so that drift in clocks or
temperature falls on all three; medians. The
outputs of one call with and one without (a training step: from the same weights, the
weights it leaves included) are compared: bitwise, else under a tolerance for the whole
program (rounding differences of bf16 kernels grow through layers: 5e-2 by default), else
against how far torch.compile's own outputs are from the eager step's; the largest
differences are reported either way. Each kernel's own proof is its check on the model's
data (``evo.model.check.ProgramCheck``, run by ``evo.model.roundtrip``).
"""

from __future__ import annotations

import itertools
import statistics

from evo.model.step_time import WAITS_ON_HOST


def _tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().clone()]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in _tensors(item)]
    return []


def _outputs(step, inputs, call=None) -> list:
    """The tensors one call of the step computes (``call`` instead of ``step`` where given:
    its eager twin), from the step's starting state where it keeps one (``step.reset``),
    the state it leaves included (``step.state``: a training step's weights)."""
    import torch

    if hasattr(step, "reset"):
        step.reset()
    out = _tensors((call or step)(*inputs))
    if hasattr(step, "state"):
        out += _tensors(step.state())
    torch.cuda.synchronize()
    return out


def _max_abs(a_list, b_list) -> float:
    return max((float((a.float() - b.float()).abs().max()) for a, b in zip(a_list, b_list)
                if a.numel()), default=0.0)


def verify(step, inputs, installed, repeats: int = 30, rtol: float = 5e-2, atol: float = 5e-2) -> dict:
    """Run ``step(*inputs)`` with ``installed`` (``evo.model.install.Installed``, entered)
    disabled and enabled; returns outputs' agreement and both step times (ms, medians).

    Outputs agree bitwise, or within ``rtol``/``atol``, or no further from torch.compile's
    than torch.compile's are from the eager step's (``step.eager``, where the step has
    one): rounding that compiling alone already moves the outputs by."""
    import torch

    results = {}
    for enabled in (False, True):  # the first call finds the kernels; both warm up
        installed.enable() if enabled else installed.disable()
        results[enabled] = _outputs(step, inputs)
    installed.stop_looking()  # from here on, launches cost what they cost without evo
    worst_abs = worst_rel = 0.0
    agree = len(results[False]) == len(results[True]) and len(results[False]) > 0
    bitwise = agree and all(torch.equal(a, b) for a, b in zip(results[False], results[True]))
    for a, b in zip(results[False], results[True]):
        a, b = a.float(), b.float()
        err = (a - b).abs()
        worst_abs = max(worst_abs, float(err.max()) if err.numel() else 0.0)
        rel = err / a.abs().clamp_min(1e-30)
        worst_rel = max(worst_rel, float(rel[a.abs() > atol].max()) if (a.abs() > atol).any() else 0.0)
        agree = agree and bool(torch.allclose(b, a, rtol=rtol, atol=atol))
    eager_abs = None
    if hasattr(step, "eager"):
        installed.disable()
        eager_abs = _max_abs(results[False], _outputs(step, inputs, step.eager))
        installed.enable()
    within_eager = eager_abs is not None and worst_abs <= eager_abs
    # three arms: its own kernels, evo's, and its own again (the A/A control: how far the
    # same step reads from itself), in every order in turn
    arms = ("own", "evolved", "own again")
    times = {arm: [] for arm in arms}
    orders = list(itertools.permutations(arms))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(repeats):
        for arm in orders[i % len(orders)]:
            installed.enable() if arm == "evolved" else installed.disable()
            start.record()
            step(*inputs)
            stop.record()
            stop.synchronize()
            times[arm].append(start.elapsed_time(stop))
    installed.enable()
    base, evolved, again = (statistics.median(times[arm]) for arm in arms)
    return {"outputs_agree": agree or within_eager, "bitwise": bitwise, "within_tolerance": agree,
            "eager_max_abs_err": eager_abs, "rtol": rtol, "atol": atol, "max_abs_err": worst_abs,
            "max_rel_err": worst_rel, "baseline_ms": base, "evolved_ms": evolved,
            "speedup": base / evolved, "repeats": repeats, "control_ms": again,
            "control": base / again,
            "spread": {"baseline": [min(times["own"]), max(times["own"])],
                       "evolved": [min(times["evolved"]), max(times["evolved"])]},
            "kernels_installed": sorted(name for name, on in installed.swapped.items() if on),
            "kernels_refused": dict(installed.refused),
            "kernels_not_found": {c.kernel: installed.not_found(c.kernel) for c in installed.plan
                                  if c.cubin is not None and not installed.swapped.get(c.kernel)
                                  and c.kernel not in installed.refused}}


def outputs_line(verdict: dict) -> str:
    """What the comparison of the step's outputs with and without evo's kernels found."""
    eager = verdict.get("eager_max_abs_err")
    floor = "" if eager is None else f"; torch.compile's own differ from eager by {eager:.3g}"
    errors = (f"max abs error {verdict['max_abs_err']:.3g}, max rel error "
              f"{verdict['max_rel_err']:.3g}{floor}")
    if verdict.get("bitwise"):
        return "outputs bitwise equal" + floor
    if verdict.get("within_tolerance", verdict["outputs_agree"]):
        return f"outputs agree (rtol {verdict['rtol']:g}, atol {verdict['atol']:g}; {errors})"
    if verdict["outputs_agree"]:
        return f"outputs differ no more than compiling alone moves them from eager ({errors})"
    return f"outputs DIFFER (rtol {verdict['rtol']:g}, atol {verdict['atol']:g}; {errors})"


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
    missed = verdict.get("kernels_not_found", {}).get(choice.kernel)
    return f"no: {refused or missed or 'not launched with its captured code and sizes'}"


def _checked(runs: list | None) -> str:
    """A kernel's launches checked in the model against its own code (ProgramCheck)."""
    if not runs:
        return "-"
    if not all(r["agree"] for r in runs):
        return "DIFFERS: " + next(r["worst"] for r in runs if not r["agree"])
    if all(r["bitwise"] for r in runs):
        return f"bitwise equal ({len(runs)} launches)"
    return f"agrees (max abs error {max(r['max_abs_err'] for r in runs):.3g}, {len(runs)} launches)"


def _in_model(t: dict | None) -> str:
    """A kernel's time a launch in the model, its own code against evo's (ProgramCheck)."""
    from evo.model.check import MIN_TIMED

    if not t:
        return "-"
    if t["timed"] < MIN_TIMED:
        return f"not timed: {t['timed']} launch(es) of each code, {MIN_TIMED} needed"
    return (f"{t['own_us']:.2f} -> {t['evolved_us']:.2f} us ({t['own_us'] / t['evolved_us']:.2f}x, "
            f"{t['timed']} each)")




def report(verdict: dict, manifest: dict, choices, results=None) -> str:
    """The lines a user reads: the step before and after, the share of the step in Triton
    kernels and the limits it sets (all free; all at the copy roofline), and per kernel its
    share, speedup, share of the roofline and what was installed."""
    by_name = {r.kernel: r for r in (results or [])}
    step_us, triton_us = manifest.get("step_gpu_us") or 0.0, manifest.get("triton_gpu_us") or 0.0
    control = (f"; the A/A control, its own kernels timed again in the same rounds: "
               f"{verdict['control']:.3f}x" if verdict.get("control") else "")
    if verdict.get("control") and abs(verdict["speedup"] - 1) <= abs(verdict["control"] - 1):
        control += ": the change is within that noise"
    lines = [f"step: torch.compile {verdict['baseline_ms']:.3f} ms -> with evo's kernels "
             f"{verdict['evolved_ms']:.3f} ms ({verdict['speedup']:.3f}x end to end, median of "
             f"{verdict['repeats']} rounds{control})", outputs_line(verdict)]
    step_ms = verdict["baseline_ms"]
    if step_us and step_us < WAITS_ON_HOST * 1e3 * step_ms:
        lines.append(f"the GPU is busy {step_us / 1e3:.3f} ms of the {step_ms:.3f} ms step "
                     f"({100 * step_us / (1e3 * step_ms):.0f} %): the rest is the host launching "
                     "work, which faster kernels do not shorten (CUDA graphs do: "
                     "torch.compile(mode=\"reduce-overhead\"))")
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
        rows.append(f"{c.name} | {share} | {gain} | {roof} | {done}"
                    + (f" | {_checked(verdict['checks'].get(c.kernel))}" if "checks" in verdict else "")
                    + (f" | {_in_model(verdict['in_model'].get(c.kernel))}" if "in_model" in verdict else ""))
    if step_us and saved:
        lines.append(f"at the copy roofline the kernels evolved here would save at most "
                     f"{saved:.1f} us of the step's GPU time ({step_us / (step_us - saved):.3f}x)")
        took = (verdict["baseline_ms"] - verdict["evolved_ms"]) * 1e3  # the step's own change
        if took > saved:  # a "194 % of the gap closed" (H200, session 24) was noise, not gain
            lines.append(f"with evo's kernels the step took {took:.1f} us less: more than these "
                         "kernels could save at the copy roofline, so that is the step's noise "
                         "(the host's, where it waits on the host), not their gain")
        elif took >= 0:
            lines.append(f"with evo's kernels the step took {took:.1f} us less: "
                         f"{100 * took / saved:.0f} % of that gap closed (the step's median "
                         "change, its noise included)")
        else:  # "-5 us less: -3 % closed" said nothing plainly
            lines.append(f"with evo's kernels the step took {-took:.1f} us more: none of that "
                         "gap closed (the step's median change, its noise included)")
    lines.append("kernel | share | speedup (evo's cycles) | copy roofline | installed"
                 + (" | checked on the model's data" if "checks" in verdict else "")
                 + (" | in the model, a launch (CUDA events, median)" if "in_model" in verdict else ""))
    return "\n".join(lines + rows)
