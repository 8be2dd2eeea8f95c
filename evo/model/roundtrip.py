"""The model round trip on the example decoder (GPU): capture, evolve, install, verify.

    python3 -m evo.model.roundtrip --layers 4 --dim 1024 --batch 8 --tokens 512 \\
        --generations 9 --pop 5 --out runs/decoder

Builds ``evo.model.examples.decoder_inference`` (or ``--train``: the training step;
``--torchvision resnet18``, ``--transformers gpt2``: networks evo's authors did not write),
captures its Triton kernels (``OUT/capture``), evolves them with ``evo.evolve`` (one run
folder, ``OUT/run``, kernels in order of their share of the step; ``--top N`` keeps the
N largest), checks each evolved kernel on the model's own data and times it there against its own code
(``evo.model.check.ProgramCheck``), leaves out those that differed there or ran slower (as
``evo verify`` then ``evo.install`` do), installs the best of the others into the running program and
verifies outputs and step time A/B (``evo.model.verify``). Prints the report and the wall
seconds of each step of the job (``--gpus 0,1``: the searches on those GPUs; capture, the
checks in the model and the A/B run on the program's own GPU), and writes ``OUT/report.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evo.model.examples import TRANSFORMERS
from harness.phases import Phases

CHECKS, TIMED = 3, 10  # each kernel's launches checked, then timed per code, in the model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--train", action="store_true", help="the training step, not inference")
    parser.add_argument("--torchvision", metavar="NAME",
                        help="a torchvision network instead (resnet18, ...), no weights, bf16, "
                             "channels-last, inference on --batch 224x224 images")
    parser.add_argument("--transformers", metavar="NAME", choices=sorted(TRANSFORMERS),
                        help="a Hugging Face transformers model built from a small config, "
                             "random weights (gpt2, llama, bert): --batch x --tokens ids, bf16 "
                             "inference, or with --train a training step (AdamW, bf16 autocast)")
    parser.add_argument("--generations", type=int, default=9)
    parser.add_argument("--pop", type=int, default=5)
    parser.add_argument("--top", type=int, default=0, help="evolve only the N largest kernels")
    parser.add_argument("--repeats", type=int, default=30, help="A/B rounds of the step")
    parser.add_argument("--gpus", default="", metavar="0,1",
                        help="the GPUs the searches measure on (default: the run's default)")
    parser.add_argument("--out", default="runs/model")
    args = parser.parse_args(argv)
    gpus = {"gpus": [int(g) for g in args.gpus.split(",")]} if args.gpus else {}

    import evo
    from evo.model import examples
    from evo.model.capture import read
    from evo.model.step_time import waits_on_host
    from evo.model.check import ProgramCheck, keep_verdicts, kernel_verdicts
    from evo.model.install import Installed
    from evo.model.install_plan import plan
    from evo.model.verify import report, verify

    out = Path(args.out)
    if (out / "run").is_dir() and any((out / "run").iterdir()):  # said before the capture
        parser.exit(2, f"evo.model.roundtrip: {out / 'run'} already holds a run; pass "
                       "another --out\n")
    try:
        step, inputs = _model(args, examples)
    except ModuleNotFoundError as err:  # torch, torchvision or transformers missing here
        parser.exit(2, f"evo.model.roundtrip: the model needs {err.name}, which is not "
                       f"installed here (pip install {err.name})\n")
    job = Phases()  # the wall seconds of the job's steps
    with job("capture"):
        evo.capture(step, *inputs, out=out / "capture")
    manifest = read(out / "capture")
    if host := waits_on_host(manifest):  # said now, not after the whole job
        print(f"capture: {host}", flush=True)
    kernels = manifest["kernels"][:args.top] if args.top else manifest["kernels"]
    with job("evolve"):
        results = evo.evolve([k["kernel_spec"] for k in kernels], generations=args.generations,
                             pop=args.pop, backend="gpu", out=str(out / "run"),
                             store=str(out / "store.sqlite"), **gpus)
    choices = plan(out / "capture", out / "run", verified=False)
    specs = {k["source"]["kernel"]: k["kernel_spec"] for k in manifest["kernels"]}
    # each kernel checked on the model's data, then timed there, both codes in turn; as
    # after `evo verify`, a kernel that differed there or ran slower is then left out
    with (job("checked in the model"),
          ProgramCheck(choices, specs, checks=CHECKS, timed=TIMED) as check):
        for _ in range(CHECKS + 2 * TIMED):
            step(*inputs)
    keep_verdicts(out / "run", ["evo.model.roundtrip"],
                  kernel_verdicts(check, [c for c in choices if c.cubin is not None]))
    choices = plan(out / "capture", out / "run")
    with job("install and verify"), Installed(choices) as installed:
        verdict = verify(step, inputs, installed, repeats=args.repeats)
    verdict["checks"], verdict["in_model"] = check.results, check.times_us()
    text = report(verdict, manifest, choices, results)
    print(text)
    job_seconds = {name: round(s, 1) for name, s in job.seconds.items()}
    print(_job_line(job_seconds, args.gpus), flush=True)
    (out / "report.json").write_text(json.dumps({
        "verdict": verdict, "model": vars(args), "job_seconds": job_seconds,
        "kernels": [{"name": c.name, "installed": c.cubin is not None, "reason": c.reason,
                     "genome": c.genome} for c in choices],
        "results": [str(r) for r in results]}, indent=1) + "\n")
    kernels_agree = all(r["agree"] for runs in verdict["checks"].values() for r in runs)
    return 0 if verdict["outputs_agree"] and kernels_agree else 1


def _job_line(seconds: dict[str, float], gpus: str) -> str:
    """"the job: T s (step s, ...; searches on ...)": the job's steps in order (the model's
    own building not counted) and their sum."""
    steps = ", ".join(f"{step} {s:.1f} s" for step, s in seconds.items())
    return (f"the job: {sum(seconds.values()):.1f} s ({steps}; searches on "
            f"{'GPUs ' + gpus if gpus else 'the default GPUs'})")


def _model(args, examples):
    """(step, inputs) of the model the arguments name."""
    if args.torchvision:
        return examples.torchvision_inference(args.torchvision, batch=args.batch)
    if args.transformers:
        build = examples.transformers_training if args.train else examples.transformers_inference
        return build(args.transformers, batch=args.batch, tokens=args.tokens)
    build = examples.decoder_training if args.train else examples.decoder_inference
    return build(layers=args.layers, dim=args.dim, batch=args.batch, tokens=args.tokens)


if __name__ == "__main__":
    raise SystemExit(main())
