"""Launch one cubin once, for compute-sanitizer: ``harness.gpu.finalist`` runs it as

    compute-sanitizer --tool memcheck python3 -m harness.gpu.finalist_driver CUBIN SPEC.toml \\
        [--launch '{"grid": [...], "block": [...]}'] [--seed N] [--out outputs.npz [--digest-only]]
        [--wait-turn]

It loads the cubin with CuPy, fills the inputs with
``harness.gpu.input_sets.make_inputs(spec, seed)`` (outputs with the gate's poison; drawn on
the GPU where the worker judges the kernel there, ``runner.DEVICE_CHECK_BYTES`` and up: a
resnet50 layer's 392 MiB took 2.6 s on the host in each of the check's processes, 0.01 s
on an H200), gives every buffer its own ``cudaMalloc`` of exactly its size (no canaries, no
shared arena: memcheck only sees an access as out of bounds when it leaves every
allocation), launches once with the spec's grid and block or ``--launch``'s, and
synchronizes. On success it prints ``DRIVER_OK`` and, with ``--out``, saves every output
buffer (by param name) to an ``.npz`` for the determinism check, with each one's sha256
beside it (``OUT.sha256``, JSON); ``--digest-only`` writes the digests alone (a resnet50
layer's outputs are 200 MB: sixteen checks at once wrote gigabytes that only a failed
check reads). It also prints ``STEPS``: when each of its steps ended (seconds since the
epoch), for the caller's timing of a check. Exit codes: 0 ok, 2 a CUDA error in the launch
(printed as ``evo-finalist-driver: launch error: ...``), 3 bad arguments or a setup failure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

_STARTED = time.time()  # before NumPy's import: the steps below count from here

import numpy as np  # noqa: E402

from harness.gpu.finalist import DRIVER_OK  # noqa: E402

_PREFIX = "evo-finalist-driver:"
STEPS = "evo-finalist-steps:"
"""The line's prefix that gives the driver's steps: JSON of step -> when it ended
(``time.time()``): started (this module loaded), imported (CuPy), ready (host work and
contexts done), turn (the GPU given), filled, launched, read (outputs on the host), saved."""


def _allocate(cp, nbytes: int, owners: list):
    """A uint8 CuPy array over a fresh ``cudaMalloc`` of exactly ``nbytes`` (CuPy's pool
    would round sizes up and share chunks, which hides overruns from memcheck)."""
    ptr = cp.cuda.runtime.malloc(nbytes)
    owners.append(ptr)
    memory = cp.cuda.UnownedMemory(ptr, nbytes, owners)
    return cp.ndarray((nbytes,), cp.uint8, cp.cuda.MemoryPointer(memory, 0))


def outputs_digest(spec, outputs: dict) -> dict[str, str]:
    """Each output buffer's sha256 by param name: two runs whose digests agree are bitwise
    equal, and the caller need not load hundreds of MB to see it."""
    return {p.name: hashlib.sha256(np.ascontiguousarray(outputs[p.name]).view(np.uint8).data)
            .hexdigest() for p in spec.outputs()}


def digest_path(out) -> str:
    """Where ``--out``'s digest goes: beside the outputs."""
    return f"{out}.sha256"


def run(cubin_path: str, spec_path: str, launch_json: str | None, seed: int,
        out: str | None, wait_turn: bool = False, devices: tuple[int, ...] = (),
        digest_only: bool = False) -> int:
    """Load, fill, launch once, synchronize; see the module docstring for the exit codes.
    ``wait_turn``: the host's work first, then wait for the caller's GPU turn
    (``harness.gpu.ready_runs``); ``devices``: the GPUs the turn may give, whose CUDA
    contexts are made before it (0.1-0.4 s each under memcheck on an H200, BENCHMARKS.md
    session 22: made in the turn, the GPU would wait for them)."""
    from genomes.launch import Launch
    from harness.gpu import gate, input_sets
    from harness.gpu.ready_runs import done_with_gpu, wait_for_turn
    from harness.gpu.runner import DEVICE_CHECK_BYTES, allow_shared
    from harness.kernels.spec import load_spec

    steps = {"started": _STARTED}
    try:
        spec = load_spec(spec_path)
        launch = Launch.from_json(json.loads(launch_json)) if launch_json else spec.launch
        with open(cubin_path, "rb") as f:
            cubin = f.read()
        import cupy as cp

        steps["imported"] = time.time()
        xp = cp if sum(p.nbytes for p in spec.buffers()) >= DEVICE_CHECK_BYTES else np
        inputs = input_sets.make_inputs(spec, seed) if xp is np else None  # host work first
        if wait_turn:  # the host's work is done: the GPU from here on, in the caller's turn
            cp.cuda.runtime.getDeviceCount()  # the driver's start (and the sanitizer's) first
            for device in devices:  # a context is made without running anything on a GPU
                cp.cuda.Device(device).use()
                cp.cuda.runtime.free(0)
            steps["ready"] = time.time()
            gpu = wait_for_turn()
            steps["turn"] = time.time()
            if gpu is not None or devices:  # None: the default device, the process's first
                cp.cuda.Device(gpu or 0).use()
        module = cp.cuda.function.Module()
        module.load(cubin)
        fn = allow_shared(cp, module.get_function(launch.entry or spec.entry), spec.shared_mem)
        if inputs is None:
            inputs = input_sets.make_inputs(spec, seed, xp)
        owners: list = []
        bufs = {}
        for p in spec.buffers():
            bufs[p.name] = _allocate(cp, p.nbytes, owners)
            value = gate.poisoned(p, xp) if p.role == "out" else inputs[p.name]
            raw = xp.ascontiguousarray(value).view(xp.uint8).ravel()
            if xp is np:
                bufs[p.name].set(raw)
            else:
                bufs[p.name][...] = raw
        args = tuple(bufs[p.name] if p.kind == "buffer" else spec.numpy_dtype(p.dtype).type(p.value)
                     for p in spec.params)
        cp.cuda.runtime.deviceSynchronize()
        steps["filled"] = time.time()
    except Exception as err:  # no GPU, a bad spec or cubin, no turn given: not the kernel's doing
        print(f"{_PREFIX} setup error: {type(err).__name__}: {err}", flush=True)
        return 3
    try:
        fn(launch.grid, launch.block, args, shared_mem=spec.shared_mem)
        cp.cuda.runtime.deviceSynchronize()
        steps["launched"] = time.time()
        outputs = {p.name: bufs[p.name].get().view(spec.numpy_dtype(p.dtype))
                   for p in spec.outputs()}
        steps["read"] = time.time()
        if wait_turn:  # the outputs are on the host: the caller's turn may end
            done_with_gpu()
    except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as err:
        print(f"{_PREFIX} launch error: {err}", flush=True)
        return 2
    except Exception as err:  # a harness bug (bad arguments for the kernel): not the variant's
        print(f"{_PREFIX} setup error: {type(err).__name__}: {err}", flush=True)
        return 3
    if out:
        if not digest_only:
            np.savez(out, **outputs)
        with open(digest_path(out), "w") as f:
            json.dump(outputs_digest(spec, outputs), f)
        steps["saved"] = time.time()
    print(STEPS, json.dumps(steps), flush=True)
    print(DRIVER_OK, flush=True)
    for ptr in owners:
        cp.cuda.runtime.free(ptr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.gpu.finalist_driver",
                                     description="Launch one cubin once (for compute-sanitizer).")
    parser.add_argument("cubin")
    parser.add_argument("spec", help="the kernel's spec (.toml)")
    parser.add_argument("--launch", help='JSON: {"grid": [x, y, z], "block": [x, y, z]}')
    parser.add_argument("--seed", type=int, default=1, help="input seed (input_sets.make_inputs)")
    parser.add_argument("--out", help="save the outputs here (.npz) and their sha256 (OUT.sha256)")
    parser.add_argument("--digest-only", action="store_true",
                        help="with --out: write the outputs' sha256 alone, not the outputs")
    parser.add_argument("--wait-turn", action="store_true",
                        help="after the host's work, print a ready line and read the GPU's "
                             "ordinal from stdin (an empty line: the default GPU) before using it")
    parser.add_argument("--devices", default="",
                        help="with --wait-turn: the GPU ordinals the turn may give (0,1), "
                             "whose contexts are made before the ready line")
    args = parser.parse_args(argv)
    devices = tuple(int(d) for d in args.devices.split(",") if d.strip())
    return run(args.cubin, args.spec, args.launch, args.seed, args.out, args.wait_turn, devices,
               args.digest_only)


if __name__ == "__main__":
    sys.exit(main())
