"""Searches do what they did: every strategy (but the oracle, which enumerates a space),
three seeds and two kernels, run through ``evo.run.execute`` on the static backend, each
kernel's checkpoint entry (every genome evaluated and its figures, the population or
state, the RNG's state) against the digest recorded in tests/data/golden_searches.json.

A refactoring must leave them all; a change meant to change what searches do (a new
transform, another draw) changes some, and is recorded again on purpose:

    PYTHONPATH=. python3 tests/test_golden_searches.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import needs_ptxas

GOLDEN = Path(__file__).parent / "data" / "golden_searches.json"
STRATEGIES = ("evolve", "greedy", "mcgs", "policy", "sweep")
SEEDS = (1, 2, 3)
KERNELS = ("gemm_tile_2x2x2", "relu")


def digests() -> dict[str, str]:
    """``strategy/seed/kernel`` -> sha256 of that kernel's checkpoint entry."""
    from evo import run as run_mod
    from evo.config import Config

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in STRATEGIES:
            for seed in SEEDS:
                folder = Path(tmp) / f"{strategy}-{seed}"
                config = Config().override("run", suite=list(KERNELS), strategy=strategy,
                                           seed=seed, generations=2, pop=4, max_evals=8,
                                           backend="static", priors="none", jobs=1,
                                           store=str(folder / "store.sqlite"))
                run = run_mod.start_run(config, folder / "run")
                checkpoint = run_mod.new_checkpoint(config)
                run_mod.execute(run, config, checkpoint, verbosity=0)
                for kernel in KERNELS:
                    entry = json.dumps(checkpoint["kernels"][kernel], sort_keys=True)
                    out[f"{strategy}/{seed}/{kernel}"] = hashlib.sha256(entry.encode()).hexdigest()
    return out


@needs_ptxas
@pytest.mark.skipif(not GOLDEN.is_file(), reason="no recorded digests")
def test_every_search_is_what_it_was():
    want = json.loads(GOLDEN.read_text())
    got = digests()
    changed = sorted(k for k in want if got.get(k) != want[k])
    assert not changed, (f"{len(changed)} searches differ from the recorded ones ({changed[:6]}"
                         f"...): if that is meant, record them again (this file's docstring)")
    assert set(got) == set(want)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        GOLDEN.write_text(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
