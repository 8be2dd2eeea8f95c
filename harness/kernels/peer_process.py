"""A kernel's torch peer timed in a process of its own, started before its GPU turn.

Timed inside the run's process (``peers.prepare_peer`` then ``peer_or_reason``), a peer
imported torch there and drew its 4-16M-element inputs and the NumPy reference there:
about 6.5 s of that process's CPU on issue 27's mix, with Python's lock held so that every
search thread of the run waited meanwhile (an H200's profile, BENCHMARKS.md, session 24).
Here the process imports torch, draws the inputs and makes its CUDA contexts, says it is
ready (``harness.gpu.ready_runs``), and only then is a GPU turn taken: the ordinal goes to
it on stdin, it times the peer (``peers.time_peer``), gives the GPU back and prints the
result as one line after ``RESULT``.

    python -m harness.kernels.peer_process SPEC.toml [--devices 0,1]     # the process's side
    time_in_process(spec, turn, devices)                                 # the run's side
    begin(spec, turn, devices).result()                                  # the same, begun early
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import sys
import tempfile
import threading
from pathlib import Path

RESULT = "evo-peer-result: "
"""The prefix of the line that holds the peer's figures (or why it has none) as JSON."""
TIMEOUT_S = 300.0  # to get ready, and again to time the peer once it has its turn



def command(spec_path: Path, devices: tuple[int, ...]) -> list[str]:
    """The process that times ``spec_path``'s peer (a seam for tests)."""
    return [sys.executable, "-m", "harness.kernels.peer_process", str(spec_path),
            "--devices", ",".join(str(d) for d in devices)]


def torch_installed() -> bool:
    """Whether torch can be imported here, without importing it (a seam for tests)."""
    return importlib.util.find_spec("torch") is not None


def time_in_process(spec, turn, devices: tuple[int, ...] = (),
                    timeout_s: float = TIMEOUT_S) -> tuple[dict | None, float]:
    """(what a run's report quotes of the spec's peer, the seconds its GPU turn was held).
    ``turn``: a context manager factory giving the device ordinal (``GpuTurns.alone``),
    taken only once the process is ready; none is taken where torch is not installed here
    or the process ended before it was ready (torch sees no GPU, the peer failed). None
    when the spec names no peer."""
    from harness.gpu.ready_runs import ROOT, checkout_env, run_when_ready
    from harness.kernels.spec_write import spec_file

    if not spec.peer:
        return None, 0.0
    if not torch_installed():  # said without starting anything
        return {"peer": spec.peer, "reason": "torch is not installed here"}, 0.0
    with tempfile.TemporaryDirectory(prefix="evo-peer-") as tmp:
        cmd = command(spec_file(spec, Path(tmp)), devices)
        runs, held = run_when_ready({"peer": cmd}, timeout_s, ROOT, checkout_env(), turn)
    code, text, _ = runs["peer"]
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):]), held
    tail = " ".join(text.strip().splitlines()[-3:])[-300:]
    why = "ran past its time" if code is None else f"exited with status {code}"
    return {"peer": spec.peer, "reason": f"its timing process {why}: {tail}"}, held


def begin(spec, turn, devices: tuple[int, ...] = ()) -> concurrent.futures.Future:
    """``time_in_process`` begun now in a thread of its own; its ``result()`` is that
    call's. A run begins a kernel's peer with its search: the process's ~7 s of host work
    (torch's import, its contexts, the 4-16M-element inputs) then overlap the search
    instead of following it (issue 27's mix on an H200: 7.3-8.7 s of each large kernel's
    steps after its search, BENCHMARKS.md session 25), and its GPU turn comes whenever it
    is ready: the peer's figure depends on nothing the search finds."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def work() -> None:
        try:
            future.set_result(time_in_process(spec, turn, devices))
        except BaseException as err:  # the caller's result() raises it
            future.set_exception(err)

    # a daemon: an interrupted run does not wait for it (its process sees stdin close)
    threading.Thread(target=work, name=f"peer-{spec.name}", daemon=True).start()
    return future


def _say(result: dict) -> None:
    print(RESULT + json.dumps(result), flush=True)


def main(argv: list[str] | None = None) -> int:
    """The process's side: the host's work, ``READY``, the peer timed on the turn's GPU."""
    from harness.gpu.ready_runs import done_with_gpu, wait_for_turn
    from harness.kernels.peers import failure, peer_inputs, time_peer
    from harness.kernels.spec import load_spec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="the kernel's spec (TOML)")
    parser.add_argument("--devices", default="", help="GPUs a turn may give: contexts made first")
    args = parser.parse_args(argv)
    spec = load_spec(args.spec)
    try:
        import torch
    except ImportError:
        _say({"peer": spec.peer, "reason": "torch is not installed here"})
        return 0
    if not torch.cuda.is_available():
        _say({"peer": spec.peer, "reason": "torch sees no GPU"})
        return 0
    try:
        for gpu in (int(d) for d in args.devices.split(",") if d.strip()):
            torch.empty(1, device=f"cuda:{gpu}")  # an allocation: the context, no kernel
        prepared = peer_inputs(spec)
    except Exception as err:  # a peer that fails says why; the run goes on
        _say(failure(spec, err))
        return 0
    gpu = wait_for_turn()
    try:
        with torch.cuda.device(torch.cuda.current_device() if gpu is None else gpu):
            result = time_peer(spec, torch, prepared=prepared)
        torch.cuda.synchronize()
    except Exception as err:
        result = failure(spec, err)
    finally:
        done_with_gpu()
    _say(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
