"""Does a variant read fast only when its outputs already hold its last answer? (events timing)

Events timing (``harness.gpu.timing.time_events``) replays a graph of back-to-back launches
on one input, so each launch finds the outputs its predecessor wrote. A variant that keys a
memo on them (a marker hidden in the outputs' rounding slack, a block that returns when its
outputs carry it) computes on every check, where outputs start poisoned, and skips in the
graph: right answers, a false speed. Clock64 timing restores the outputs before every
launch instead; an events graph cannot without timing the restores too.

So the variant is timed twice more, in two graphs of the same shape and traffic:

* ``wiped``: before each launch its outputs are poisoned again (a fill: written, not read)
  and its inouts restored from their upload image, so no launch can find an answer;
* ``kept``: the same fill and copy go to a scratch buffer instead, so each launch finds
  what the launch before it left, as in the timed graph.

An honest kernel runs as fast in both (measured on the suite: BENCHMARKS.md, session 13);
one that reads faster in ``kept`` than ``REUSE_SHARE`` of ``wiped`` is rejected with
``record.RESULT_REUSE``. The buffers the last wiped launch left are then judged against the
baseline (a memo kept elsewhere would leave the wipe there).
"""

from __future__ import annotations

import numpy as np

from harness import record
from harness.gpu.timing import elapsed_us, replayable

LAUNCHES = 16  # launches in each probe graph, at most; at least 4
GRAPH_US = 250  # fewer launches for a long kernel: a graph replay of about this long
REPLAYS = 3  # replays of each graph, interleaved; their medians are compared
REUSE_SHARE = 0.8  # kept faster than this share of wiped: the variant skipped work


class ResultReuse(Exception):
    """The variant reads fast only on outputs that hold its last answer; the message says so."""


def probe(runner, request, fn, us_per_launch: float = 0.0) -> dict:
    """Time the variant's launches on kept and on wiped outputs (module docstring) and
    judge the wiped buffers; raises ``ResultReuse``, or the runner's check failure, else
    returns the notes: both times in µs per launch. ``us_per_launch`` (the timer's figure)
    sizes the graphs."""
    spec = request.spec
    count = int(max(4, min(LAUNCHES, GRAPH_US / max(us_per_launch, 1e-3))))
    bufs = runner.buffers(spec)
    images = runner.seed_data(spec, request.timing_seed)[1]
    runner.upload(spec, bufs, images)
    written = runner.written_on_device(spec, images)
    outs = [p for p in spec.buffers() if p.role == "out"]
    inouts = {p.name: written[p.name] for p in spec.buffers() if p.role == "inout"}
    sizes = [-(-p.nbytes // 16) * 16 for p in outs]  # aligned for any element size
    scratch = runner.scratch(sum(sizes) + sum(a.nbytes for a in inouts.values()))
    args = runner.args(spec, bufs)

    def launches(wipe: bool):
        def run():
            for _ in range(count):
                offset = 0
                for p, size in zip(outs, sizes):
                    runner.fill_poison(p, bufs[p.name] if wipe else scratch[offset:offset + size])
                    offset += size
                for name, image in inouts.items():
                    target = bufs[name].data if wipe else scratch.data + offset
                    target.copy_from_device_async(image.data, image.nbytes, runner.stream)
                    offset += image.nbytes
                runner.launch(fn, spec, args, runner.stream, request.launch)
        return run

    kept, _ = replayable(runner, launches(wipe=False))
    wiped, _ = replayable(runner, launches(wipe=True))
    times = {"kept": [], "wiped": []}
    for _ in range(REPLAYS):
        times["kept"].append(elapsed_us(runner, kept, count))
        times["wiped"].append(elapsed_us(runner, wiped, count))
    kept_us, wiped_us = (float(np.median(times[k])) for k in ("kept", "wiped"))
    if kept_us < REUSE_SHARE * wiped_us:
        raise ResultReuse(
            f"{record.RESULT_REUSE}: {kept_us:.2f} us per launch when its outputs hold the "
            f"last launch's answer, {wiped_us:.2f} us when they are wiped before each launch: "
            "it skips work on repeated inputs")
    runner.check_sets(request, [bufs], [request.timing_seed], "after timing, on wiped outputs")
    return {"reuse_probe_us": {"kept": round(kept_us, 3), "wiped": round(wiped_us, 3)}}
