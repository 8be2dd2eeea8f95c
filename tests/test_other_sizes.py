"""evo run on a code one launcher runs at two captured sizes, on a backend standing in for
a GPU (remeasures): its best is checked at the other size; where it fails there, the
runner-up is tried and kept, written to best/, and install.plan installs it for both."""

from __future__ import annotations

import json

from conftest import capture_with_one_code, needs_ptxas

from evo import run as run_mod
from evo.config import Config
from genomes.genome import Genome
from harness.backends import Backend
from harness.record import Measurement


class TwoSizes(Backend):
    """Cycles from the code's size; at the other size, the first genome checked there
    (the search's best) fails the gate, as a size-dependent edit would."""

    name = "two-sizes"
    device = "Fake GPU"
    remeasures = True

    def __init__(self, other: str):
        self.other, self.failed = other, []

    def measure_many(self, spec, variants, baseline=None):
        out = []
        for v in variants:
            fails = spec.name == self.other and bool(v.genome.genes) and not self.failed
            if fails:
                self.failed.append(v.genome.effective().dumps())
            cycles = 1000.0 + len(v.compiled.cubin) % 500 - 10 * len(v.genome.genes)
            out.append(Measurement(spec.name, self.device, not fails, cycles=None if fails else cycles,
                                   reason="wrong result: 3 elements differ" if fails else "ok",
                                   timer="fake", n=1, backend=self.name))
        return out


@needs_ptxas
def test_a_best_failing_at_another_size_gives_way_to_the_runner_up(tmp_path, monkeypatch):
    import harness.backends

    cap = tmp_path / "cap"
    _, one, other = capture_with_one_code(cap, 0, 1)
    backend = TwoSizes(other["name"])
    monkeypatch.setattr(harness.backends, "make_backend", lambda *a, **k: backend)
    config = Config().override("run", suite=[str(cap)], generations=2, pop=4,
                               store=str(tmp_path / "store.sqlite"))
    run = run_mod.start_run(config, tmp_path / "run")
    results = {r.kernel: r for r in run_mod.execute(run, config, run_mod.new_checkpoint(config), verbosity=0)}
    sizes = json.loads((run.path / "checkpoint.json").read_text())["kernels"][one["name"]]["sizes"]
    assert backend.failed == [sizes["from"]] and sizes["kept"] not in (sizes["from"], '{"genes": []}'), sizes
    assert sizes["demoted"] == [{"genome": str(Genome.from_json(json.loads(sizes["from"]))),
                                 "failed": {other["name"]: "wrong result: 3 elements differ"}}]
    assert sizes["at"][other["name"]]["valid"]
    kept = Genome.from_json(json.loads(sizes["kept"]))
    assert Genome.from_json(results[one["name"]].best_genome).effective() == kept.effective()
    written = Genome.from_json(json.loads((run.path / "best" / f"{one['name']}.genome.json").read_text()))
    assert written.effective() == kept.effective()
    events = [json.loads(ln) for ln in (run.path / "events.jsonl").read_text().splitlines()]
    assert any(e["type"] == "sizes" and e["kernel"] == one["name"] for e in events)
    from evo.model.install_plan import plan

    choices = {c.name: c for c in plan(cap, run.path)}
    assert choices[one["name"]].cubin is not None and choices[one["name"]].scalars == {}
    assert choices[other["name"]].reason.startswith(f"one code at every size: {one['name']}'s")
    # evo show reads the same choice back from the checkpoint
    from evo import report
    from evo.rundir import RunDir

    again = {r.kernel: r for r in report.results_from_checkpoint(RunDir.open(run.path), "evolve")}
    assert Genome.from_json(again[one["name"]].best_genome).effective() == kept.effective()
