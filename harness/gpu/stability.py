"""How far apart does the same cubin read on this GPU? (``evo stability``)

Before trusting a comparison, a kernel engineer wants to know the measuring noise of the
machine: this measures one variant of one kernel in several *fresh* worker processes, one
after another (``repeats`` measurements each), and reports each figure, its launch-to-launch
spread and where its buffers lay, plus the spread across workers. A fitness difference
smaller than that spread is noise.

With ``keep_arena`` (the default, as in every evo run) the workers measure in the arena lent
by ``harness.gpu.arena``'s keeper, so buffer placement is the same in all of them; without it
each worker allocates its own, which shows how much placement alone moves the figure
(2.4 % between fresh processes on an H200).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from genomes.genome import Genome, apply_genome
from harness.compile import compile_ptx
from harness.record import Measurement
from harness.kernels.spec import KernelSpec


@dataclass
class StabilityReport:
    """Figures per worker (a list of ``repeats`` Measurements each) and their spread."""

    kernel: str
    genome: str
    keep_arena: bool
    workers: list[list[Measurement]] = field(default_factory=list)

    def figures(self) -> list[float]:
        """Every valid reported figure, worker by worker."""
        return [m.cycles for ms in self.workers for m in ms if m.valid and m.cycles]

    def spread_across_workers(self) -> float | None:
        """max / min - 1 of the workers' median figures (None with fewer than two)."""
        medians = [statistics.median(c) for ms in self.workers
                   if (c := [m.cycles for m in ms if m.valid and m.cycles])]
        return max(medians) / min(medians) - 1 if len(medians) > 1 else None

    def spread_within_workers(self) -> float | None:
        """The largest max / min - 1 of one worker's repeated figures."""
        spreads = [max(c) / min(c) - 1 for ms in self.workers
                   if len(c := [m.cycles for m in ms if m.valid and m.cycles]) > 1]
        return max(spreads) if spreads else None


def _cubin(ptx: str, what: str) -> bytes:
    result = compile_ptx(ptx)
    if not result.ok:
        from genomes.errors import EvoError

        raise EvoError(f"{what} does not assemble: {result.error}")
    return result.cubin


def measure_stability(spec: KernelSpec, genome: Genome, workers: int = 5, repeats: int = 3,
                      device: int = 0, keep_arena: bool = True, worker_factory=None,
                      seed: int = 1, progress=None, clock_reader=None) -> StabilityReport:
    """Measure ``genome`` on ``spec`` in ``workers`` fresh workers, ``repeats`` times each.

    The inputs (check and timing seeds) are the same every time, so only the process and
    the moment differ. After each measurement the GPU's clocks and power state are read
    (``harness.gpu.clocks``) into its notes (``gpu_clocks``), to see what moved with the
    figure. ``worker_factory(device, keep_arena)`` replaces ``GpuWorker`` and
    ``clock_reader(device)`` replaces ``read_clocks`` (tests).
    """
    from harness.gpu.clocks import read_clocks
    from harness.gpu.instrument import instrument
    from harness.gpu.worker import GpuWorker, MeasureRequest

    base_ptx = spec.ptx_text()
    ptx = apply_genome(base_ptx, genome).ptx if genome.genes else base_ptx
    clock = None
    if spec.timing == "clock64":
        clock = _cubin(instrument(ptx, spec.entry), "the clock64-instrumented variant")
    request = MeasureRequest(spec=spec, cubin=_cubin(ptx, "the variant"),
                             baseline_cubin=_cubin(base_ptx, "the baseline"), clock_cubin=clock,
                             check_seeds=tuple(seed * 100 + i for i in range(1, 6)),
                             timing_seed=seed * 100, kernel_name=spec.name)
    make = worker_factory or (lambda d, keep: GpuWorker(d, lend_arena=keep))
    report = StabilityReport(spec.name, str(genome) or "(baseline)", keep_arena)
    for i in range(workers):
        with make(device, keep_arena) as worker:
            report.workers.append([])
            for _ in range(repeats):
                m = worker.measure(request)
                clocks = (clock_reader or read_clocks)(device)
                if clocks is not None:
                    m.notes["gpu_clocks"] = clocks.label()
                report.workers[-1].append(m)
        if progress:
            progress(f"worker {i + 1}/{workers}: "
                     + ", ".join(m.label() for m in report.workers[-1]))
    return report


def format_report(report: StabilityReport) -> str:
    lines = [f"kernel {report.kernel}, genome {report.genome}, "
             + ("the keeper's arena (as in evo runs)" if report.keep_arena
                else "an arena of its own per worker")]
    for i, ms in enumerate(report.workers, 1):
        for m in ms:
            if not m.valid:
                lines.append(f"  worker {i}: invalid ({m.reason})")
                continue
            parts = [f"  worker {i} (pid {m.notes.get('worker_pid', '?')}): {m.cycles:.1f} cycles"]
            if m.notes.get("robust_std") is not None:
                parts.append(f"robust std {100 * m.notes['robust_std'] / m.cycles:.2f} %")
            if m.notes.get("after_upload_median") is not None:
                parts.append(f"first launch after upload {m.notes['after_upload_median']:.0f}")
            if m.notes.get("gpu_clocks"):
                parts.append(m.notes["gpu_clocks"])
            if m.notes.get("placement"):
                parts.append(m.notes["placement"])
            lines.append(", ".join(parts))
    across, within = report.spread_across_workers(), report.spread_within_workers()
    lines.append("spread across workers: " + (f"{100 * across:.2f} %" if across is not None
                                              else "n/a (fewer than two valid workers)"))
    lines.append("largest spread within one worker: " + (f"{100 * within:.2f} %"
                                                         if within is not None else "n/a"))
    return "\n".join(lines)
