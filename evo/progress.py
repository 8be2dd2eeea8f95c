"""Progress on the terminal: tqdm bars for kernels and generations, with the best
speedup so far. Bars show only on a TTY; ``-q`` silences everything but errors, ``-v``
adds a line per generation.
"""

from __future__ import annotations

import sys

from tqdm import tqdm


class Progress:
    def __init__(self, kernels: int, verbosity: int = 1):
        self.verbosity = verbosity
        show = verbosity > 0 and sys.stderr.isatty()
        self.kernels = tqdm(total=kernels, desc="kernels", unit="kernel", position=0,
                            disable=not show, leave=True, file=sys.stderr)
        self.gens = None
        self.show = show
        self.baseline = None
        self.best = None

    def note(self, text: str) -> None:
        if self.verbosity > 0:
            tqdm.write(text, file=sys.stderr)

    def start_kernel(self, name: str, generations: int) -> None:
        self.name, self.baseline, self.best, self.evals = name, None, None, 0
        self.gens = tqdm(total=generations, desc=name, unit="gen", position=1, leave=False,
                         disable=not self.show, file=sys.stderr)

    def evaluated(self, results, baseline_cycles: float | None = None) -> None:
        """Count a batch of new evaluations; show the best cycles and speedup so far."""
        self.evals += len(results)
        self.baseline = baseline_cycles or self.baseline
        for m in results:
            if m.valid and m.cycles is not None:
                self.best = m.cycles if self.best is None else min(self.best, m.cycles)
        if self.gens is not None and self.best is not None:
            speed = f" ({self.baseline / self.best:.2f}x)" if self.baseline else ""
            self.gens.set_postfix_str(f"{self.evals} evals, best {self.best:.0f} "
                                      f"cycles{speed}", refresh=False)

    def generation(self, event: dict) -> None:
        if self.gens is not None:
            self.gens.update(1)
        if self.verbosity > 1:
            tqdm.write(f"{event['kernel']} gen {event['generation']}: best {event['best']} "
                       f"median {event['median']} evals {event['evals']}", file=sys.stderr)

    def end_kernel(self, result) -> None:
        if self.gens is not None:
            self.gens.close()
        self.kernels.update(1)
        if self.verbosity > 0:
            from evo.report import kernel_line

            tqdm.write(kernel_line(result), file=sys.stderr)

    def close(self) -> None:
        if self.gens is not None:
            self.gens.close()
        self.kernels.close()
