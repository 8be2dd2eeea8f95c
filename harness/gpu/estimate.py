"""How a variant's timing samples become one cycle figure, and when to stop taking them.

Applied in the GPU worker (``harness.gpu.timing`` asks ``precise_enough`` after each batch;
``harness.gpu.runner`` records ``summarize``). Plain NumPy: tested on the CPU.
"""

from __future__ import annotations

import numpy as np

CENTRAL_FRACTION = 0.8
"""``central`` averages this fraction of the sorted batch medians, around the middle one: a
tenth is left out at each end, since a batch median already ignores its batch's outliers."""


def _middle(sorted_rows: np.ndarray) -> np.ndarray:
    """The mean of the middle ``CENTRAL_FRACTION`` of each row of sorted values."""
    n = sorted_rows.shape[-1]
    k = max(1, round(n * CENTRAL_FRACTION))
    k += (n - k) % 2  # as many values left out below as above
    lo = (n - k) // 2
    return sorted_rows[..., lo:lo + k].mean(axis=-1)


def batch_medians(samples, batch: int = 1) -> np.ndarray:
    """The median of each run of ``batch`` consecutive samples (the last run may be shorter).

    The clock64 timer launches in batches, one upload of the inputs each, and an upload
    can leave the GPU in one of a few states: on an H100 all launches after one upload ran
    ~1243 or all ~1246 cycles. A batch's median is its upload's figure, free of that
    batch's rare outliers."""
    x = np.asarray(samples, dtype=np.float64)
    if batch <= 1 or x.size == 0:
        return x
    return np.array([np.median(x[i:i + batch]) for i in range(0, x.size, batch)])


def central(samples, batch: int = 1) -> float:
    """The reported cycle count: the mean of the sorted batch medians, a tenth trimmed at
    each end.

    A median, smoothed. Launches fall in close modes (``batch_medians``), and which mode
    a whole batch lands in varies from upload to upload. A median sits on one mode or
    the other, and so did the mean of the middle fifth of the samples. Averaging the batch
    figures moves smoothly with the modes' mix, and still ignores outliers (an interrupt,
    a clock change) as the median does: within a batch by its median, across batches by
    the trim. (A lightly used H200 also switches ~0.3 % between whole measurements, which
    no estimator within one measurement removes: BENCHMARKS.md, Precision.)
    ``batch=1``: the samples themselves, trimmed.
    """
    x = np.sort(batch_medians(samples, batch))
    return float(_middle(x)) if x.size else float("nan")


def central_sem(samples, batch: int = 1, resamples: int = 200) -> float:
    """Standard error of ``central``, by bootstrap over batches (fixed RNG seed: same
    samples, same answer).

    Batches, not samples, are resampled: launches of one batch share its upload's state,
    so they are not independent draws. A bootstrap rather than normal theory because
    clock64 samples are integers in close modes with rare far outliers, far from normal.
    """
    x = batch_medians(samples, batch)
    if x.size < 2:
        return float("inf")
    picks = np.random.default_rng(0).integers(0, x.size, size=(resamples, x.size))
    return float(_middle(np.sort(x[picks], axis=1)).std())


def precise_enough(samples, min_reps: int, max_reps: int, target_rel_sem: float,
                   batch: int = 1) -> bool:
    """True once the timing loop may stop: ``max_reps`` reached, or ``min_reps`` reached and
    the standard error of ``central`` is under ``target_rel_sem`` of it."""
    n = len(samples)
    if n >= max_reps:
        return True
    if n < min_reps:
        return False
    center = central(samples, batch)
    return center > 0 and central_sem(samples, batch) <= target_rel_sem * center


def summarize(samples, batch: int = 1) -> dict:
    """cycles (``central``), the plain median, p10, p90, n, std, robust std and the relative
    SEM, as floats; ``batch``: launches per upload (``batch_medians``).

    ``robust_std`` is 1.4826 x the median absolute deviation: the std of the bulk of the
    samples. A rare launch that an interrupt or clock event stretched by a thousand cycles
    inflates ``std`` (both are recorded); it does not move the median we report.
    """
    x = np.asarray(samples, dtype=np.float64)
    cycles = central(x, batch)
    median = float(np.median(x))
    return {"cycles": cycles, "median": median, "p10": float(np.percentile(x, 10)),
            "p90": float(np.percentile(x, 90)), "n": int(x.size), "std": float(x.std()),
            "robust_std": 1.4826 * float(np.median(np.abs(x - median))),
            "rel_sem": central_sem(x, batch) / cycles if cycles else float("inf")}
