"""Does a variant read fast only when its outputs already hold its last answer? (events timing)

Events timing (``harness.gpu.timing.time_events``) replays a graph of back-to-back launches
on one input, so each launch finds the outputs its predecessor wrote. A variant that keys a
memo on them (a marker hidden in the outputs' rounding slack, a block that returns when its
outputs carry it) computes on every check, where outputs start poisoned, and skips in the
graph: right answers, a false speed. Clock64 timing restores the outputs before every
launch instead; an events graph cannot without timing the restores too.

So the variant's launches are timed once more where none can find an answer: ``wiped``,
a graph where before each launch its outputs are poisoned again (a fill: written, not
read) and its inouts restored from their upload image. What they are compared with:

* **A kernel without inouts**: the timed figure itself, against ``wiped`` less ``wipes``
  (the same fills without the launches). The fills touch only the outputs, which the
  launches write anyway, so an honest kernel meets the same caches in both. Nothing is
  compared with a third context made to look like the timed graph: anything between two
  launches (a fill into a scratch buffer, the probe's way until session 24) tells them
  apart, and a variant that hid its launch's start time in its outputs' rounding slack
  computed there and skipped only back to back (tests/data/reuse/heavy_clock.cu: 2.5-2.7x,
  accepted; BENCHMARKS.md, session 24).
* **A kernel with inouts**: restoring one copies its whole image, which the launches do
  not touch (an embedding's backward adds into the rows its token ids name, in a 64 MB
  gradient): wiped, such an honest kernel read 1.6x slower than timed, the copy in its L2. So
  it is compared with ``kept``: the same fills and copies sent to a scratch buffer, each
  launch finding what the one before it left, in caches of the same traffic. A variant
  that could tell ``kept`` from the timed graph by the time between launches needs a
  clock, which the static check rejects (``harness.timer_reads``).

Faster than ``REUSE_SHARE`` of the wiped launches: ``record.RESULT_REUSE``. The buffers the
last wiped launch left are then judged against the baseline (a memo kept elsewhere would
leave the wipe there).
"""

from __future__ import annotations

import numpy as np

from harness import record
from harness.gpu.timing import elapsed_us, replayable

LAUNCHES = 16  # launches in each probe graph, at most; at least 4
GRAPH_US = 250  # fewer launches for a long kernel: a graph replay of about this long
REPLAYS = 3  # replays of each graph, interleaved; their medians are compared
REUSE_SHARE = 0.8  # timed faster than this share of the wiped launches: it skipped work


class ResultReuse(Exception):
    """The variant reads fast only on outputs that hold its last answer; the message says so."""


def probe(runner, request, fn, us_per_launch: float) -> dict:
    """Time the variant's launches on wiped outputs and compare them (module docstring) with
    ``us_per_launch`` (the timed figure), or for a kernel with inouts with launches on kept
    outputs; then judge the wiped buffers. Raises ``ResultReuse``, or the runner's check
    failure; else returns the notes: the figures compared, in µs per launch."""
    spec = request.spec
    count = int(max(4, min(LAUNCHES, GRAPH_US / max(us_per_launch, 1e-3))))
    bufs = runner.buffers(spec)
    images = runner.seed_data(spec, request.timing_seed)[1]
    runner.upload(spec, bufs, images)
    written = runner.written_on_device(spec, images)
    outs = [p for p in spec.buffers() if p.role == "out"]
    inouts = {p.name: written[p.name] for p in spec.buffers() if p.role == "inout"}
    sizes = [-(-p.nbytes // 16) * 16 for p in outs]  # aligned for any element size
    scratch = runner.scratch(sum(sizes) + sum(a.nbytes for a in inouts.values())) if inouts else None
    args = runner.args(spec, bufs)

    def graph(wipe: bool, launch: bool = True):
        """``count`` times: the fills and copies (into the buffers, or with ``wipe`` False
        into the scratch buffer), then a launch where ``launch``."""
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
                if launch:
                    runner.launch(fn, spec, args, runner.stream, request.launch)
        return run

    other = "kept" if inouts else "wipes"
    graphs = {other: replayable(runner, graph(wipe=not inouts, launch=bool(inouts)))[0],
              "wiped": replayable(runner, graph(wipe=True))[0]}
    times = {name: [] for name in graphs}
    for _ in range(REPLAYS):  # the wiped graph last: its buffers are judged below
        for name, run in graphs.items():
            times[name].append(elapsed_us(runner, run, count))
    us = {name: float(np.median(t)) for name, t in times.items()}
    if inouts:
        fast, slow = us["kept"], us["wiped"]
        where = "when its outputs hold the last launch's answer"
    else:
        fast, slow = us_per_launch, us["wiped"] - us["wipes"]
        where = "as timed, launched back to back on its own last outputs"
    if fast < REUSE_SHARE * slow:
        raise ResultReuse(
            f"{record.RESULT_REUSE}: {fast:.2f} us per launch {where}, {slow:.2f} us when "
            "they are wiped before each launch: it skips work on repeated inputs")
    runner.check_sets(request, [bufs], [request.timing_seed], "after timing, on wiped outputs")
    compared = {"kept": fast, "wiped": slow} if inouts else {"timed": fast, "wiped": slow, "wipes": us["wipes"]}
    return {"reuse_probe_us": {name: round(v, 3) for name, v in compared.items()}}
