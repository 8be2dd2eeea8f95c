"""Progress on the terminal: tqdm bars for kernels and generations, with the best
speedup so far. Bars show only on a TTY; ``-q`` silences progress (the final table still
prints), ``-v`` adds a line per generation.
"""

from __future__ import annotations

import sys

from tqdm import tqdm


class Progress:
    """The run's bar (kernels done) and one ``KernelBar`` per kernel under way."""

    def __init__(self, kernels: int, verbosity: int = 1):
        self.verbosity = verbosity
        show = verbosity > 0 and sys.stderr.isatty()
        self.kernels = tqdm(total=kernels, desc="kernels", unit="kernel", position=0,
                            disable=not show, leave=True, file=sys.stderr)
        self.show = show
        self.bars: list[KernelBar] = []

    def note(self, text: str) -> None:
        if self.verbosity > 0:
            tqdm.write(text, file=sys.stderr)

    def start_kernel(self, name: str, generations: int, slot: int = 0) -> KernelBar:
        """A bar for one kernel's generations, on line ``slot`` below the run's bar
        (kernels searched at once each have their own line)."""
        bar = KernelBar(self, name, generations, slot)
        self.bars.append(bar)
        return bar

    def close(self) -> None:
        for bar in self.bars:
            bar.gens.close()
        self.kernels.close()


class KernelBar:
    """One kernel's generations, with its evaluations and best speedup so far."""

    def __init__(self, progress: Progress, name: str, generations: int, slot: int):
        self.progress, self.name = progress, name
        self.baseline = self.best = None
        self.evals = 0
        self.gens = tqdm(total=generations, desc=name, unit="gen", position=1 + slot,
                         leave=False, disable=not progress.show, file=sys.stderr)

    def evaluated(self, results, baseline_cycles: float | None = None) -> None:
        """Count a batch of new evaluations; show the best cycles and speedup so far."""
        self.evals += len(results)
        self.baseline = baseline_cycles or self.baseline
        for m in results:
            if m.valid and m.cycles is not None:
                self.best = m.cycles if self.best is None else min(self.best, m.cycles)
        if self.best is not None:
            speed = f" ({self.baseline / self.best:.2f}x)" if self.baseline else ""
            self.gens.set_postfix_str(f"{self.evals} evals, best {self.best:.0f} "
                                      f"cycles{speed}", refresh=False)

    def generation(self, event: dict) -> None:
        self.gens.update(1)
        if self.progress.verbosity > 1:
            tqdm.write(f"{event['kernel']} gen {event['generation']}: best {event['best']} "
                       f"median {event['median']} evals {event['evals']}", file=sys.stderr)

    def searched(self) -> None:
        """The search is over: its line goes to the next kernel's search (the steps
        after it, such as the finalist check, print as notes)."""
        self.gens.close()

    def end(self, result) -> None:
        self.gens.close()
        self.progress.kernels.update(1)
        if self.progress.verbosity > 0:
            from evo.report import kernel_line

            tqdm.write(kernel_line(result), file=sys.stderr)
