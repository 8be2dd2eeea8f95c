"""``evo prompt KERNEL [--run RUN]``: the exact messages evo would send the LLM now, no call.

Without ``--run`` the prompt is that of a fresh search (the baseline, nothing measured);
with a run folder, that of the run as it stands: its config's ``[llm]`` settings, the
kernel's results so far (top variants, gene effects, failures), its best genome as the
parent (or ``--genome``), and the LLM's history of patches to the kernel. The messages
come from the same ``LlmMutator.messages`` a run uses, so what is printed is what is sent.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from genomes.errors import EvoError
from genomes.genome import Genome, load_genome


def prompt_messages(kernel: str, run: Path | None = None, config_path: Path | None = None,
                    genome: str | None = None, mode: str = "full",
                    other: str | None = None, ncu: bool = False) -> list[dict]:
    """The chat messages (module docstring); ``other``: a second parent (crossover);
    ``ncu``: run the Nsight Compute pass on the parent first (a GPU machine with ncu)."""
    from evo import config as config_mod
    from evo import strategies
    from evo.checkpoint import LLM
    from evo.checkpoint import kernel as kernel_entry
    from evo.checkpoint import kernels as kernel_entries
    from evo.llm.mutation import LlmMutator
    from evo.rundir import RunDir
    from evo.search import search_view
    from harness.kernels.suite import find_kernel

    spec = find_kernel(kernel)
    known, parent, llm_state = {}, Genome(), None
    if run is not None:
        rundir = RunDir.open(run)
        config = config_mod.from_dict(tomllib.loads(rundir.config_text()), str(run))
        checkpoint = rundir.read_checkpoint()
        entry = kernel_entry(checkpoint, spec.name)
        if entry is None:
            raise EvoError(f"{run}: no kernel {spec.name!r} in the run (its kernels: "
                           f"{', '.join(kernel_entries(checkpoint)) or 'none yet'})")
        known = entry.known
        best_json, _ = strategies.get(config.run.strategy).best(entry.state)
        parent = Genome.from_json(best_json)
        llm_state = checkpoint.get(LLM)
    else:  # as evo run reads it: --config, else ./evo.toml where there is one
        default = Path("evo.toml") if Path("evo.toml").is_file() else None
        config = config_mod.load(config_path or default)
    parent = load_genome(genome) if genome else parent
    mutator = LlmMutator(config.llm, None)  # no log folder: nothing is written, nothing sent
    if llm_state:
        mutator.restore(llm_state)
    view = search_view(spec.name, known, parent)
    if ncu:
        mutator.profile(spec, parent)
    return mutator.messages(spec, parent, view, mode, load_genome(other) if other else None)


def cmd_prompt(args) -> int:
    from evo import exit_codes

    messages = prompt_messages(args.kernel, args.run, args.config, args.genome, args.mode,
                               args.other, args.ncu)
    if args.json:
        print(json.dumps(messages, indent=1))
        return exit_codes.OK
    for message in messages:
        print(f"===== {message['role']} =====")
        print(message["content"].rstrip("\n"))
    return exit_codes.OK
