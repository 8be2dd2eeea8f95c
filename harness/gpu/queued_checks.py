"""The correctness gate's launches of a small kernel, queued without a host wait between them.

A kernel judged on the host (buffers under ``runner.DEVICE_CHECK_BYTES``: the gemm tiles)
spent most of its measurement on the host's side of ~15 launches a candidate: the
baseline on each fresh seed and the variant on each check seed and pre-filled, each
launch its own uploads, a wait, a read back per buffer, its guards filled and compared
with a read back of their own (one-thread tile: ~6 of its 11.7 ms in the worker, H200,
BENCHMARKS.md session 25). Here the same launches, with the same inputs, outputs and
guards, are queued on the stream, each launch's buffers copied to a slot of a staging area
off the arena, and read back together after one wait:

1. ``queue_baselines``: the baseline on every seed of the request (the check seeds, the
   two timing seeds, the stress seed) whose outputs are not cached, then each judged as
   ``Runner.baseline_outputs`` judges one (``Runner.judged_baseline``).
2. ``check_queued``: the guards filled once (only the variant writes between the fill and
   the last compare, and a change stays until it is seen), the variant on every check
   seed and then on the second with its outputs pre-filled with its own results on the
   first, a guard compare after each launch into a flag of its own, one wait, one read
   back, and the launches judged in order: the first failure is the reason, worded as
   ``Runner.check`` words it. A fault in any launch raises at the wait (a launch error).

3. The stress check after timing: one launch, queued and judged the same way
   (``queued_launches``).
"""

from __future__ import annotations

import numpy as np

from harness import record
from harness.gpu import gate, gate_rows, input_sets
from harness.gpu.baselines import BASELINE_FAILED, _Failed
from harness.gpu.buffers import BUFFER_ALIGN, spec_key


class QueuedChecks:
    """The queued check of ``harness.gpu.runner.Runner`` (a mixin over its context, arena,
    caches and phases)."""

    def queues_checks(self, spec) -> bool:
        """Whether the spec's check launches are queued: judged on the host, its buffers
        in the arena (guarded)."""
        return not self.judged_on_device(spec) and bool(self.guards(spec))

    def staging(self, spec, count: int) -> list[dict]:
        """``count`` slots, each a uint8 device copy of every buffer of the spec (canary
        included), in one allocation off the arena (kept for the spec; the guards never
        see it): where queued launches leave their buffers until the one read back."""
        return self._slots(spec, self._staging_area(spec, count), count, _slot_sizes(spec))

    def _staging_area(self, spec, count: int):
        """The staging allocation, for at least ``count`` slots (one spec's at a time)."""
        size = sum(_slot_sizes(spec))
        area = self._staging.get(spec_key(spec))
        if area is None or area.nbytes < count * size:
            self._staging = {}
            area = self._staging[spec_key(spec)] = self.cp.empty(max(count, 8) * size,
                                                                 dtype=self.cp.uint8)
        return area

    @staticmethod
    def _slots(spec, area, count: int, sizes: list[int]) -> list[dict]:
        slots, offset = [], 0
        for _ in range(count):
            slot = {}
            for p, size in zip(spec.buffers(), sizes):
                slot[p.name] = area[offset:offset + p.nbytes + gate.CANARY_BYTES]
                offset += size
            slots.append(slot)
        return slots

    def read_staging(self, spec, count: int) -> tuple[list[dict], np.ndarray]:
        """The first ``count`` slots of ``staging`` as host arrays, one copy for all: as
        slots (views), and as rows of one uint8 array (``gate_rows``)."""
        sizes = _slot_sizes(spec)
        host = self._staging[spec_key(spec)][:count * sum(sizes)].get()
        return self._slots(spec, host, count, sizes), host.reshape(count, sum(sizes))

    def rows_pass(self, spec, rows, seeds, references) -> bool:
        """``gate_rows.rows_pass`` of read-back rows, a seed's uploaded inputs each."""
        inputs = [self.seed_data(spec, seed)[0] for seed in seeds]
        with self.phases("rows judged"):
            return gate_rows.rows_pass(spec, rows, gate_rows.row_layout(spec, _slot_sizes(spec)),
                                       inputs, references)

    def spans(self, spec, count: int):
        """(the arena's bytes from the first buffer to the last one's canary, the same bytes
        of each of the first ``count`` staging slots): a launch's buffers uploaded and kept
        with one copy each way instead of one per buffer. The buffers lie in the arena as
        a slot lays them out (``ArenaBuffers.buffers``); the gaps between them are guard
        bytes, uploaded as the canary byte they hold (``packed``)."""
        sizes = _slot_sizes(spec)
        length = _span_bytes(spec, sizes)
        area = self._staging_area(spec, count)
        return (self.arena_span(spec, length),
                [area[i * sum(sizes):i * sum(sizes) + length] for i in range(count)])

    def packed(self, spec, seed: int) -> np.ndarray:
        """A seed's upload images laid out as the span: each buffer's image (canary
        included) at its slot offset, the canary byte between them."""
        sizes = _slot_sizes(spec)
        out = np.full(_span_bytes(spec, sizes), gate.CANARY_BYTE, dtype=np.uint8)
        images = self.seed_data(spec, seed)[1]
        for p, offset in gate_rows.row_layout(spec, sizes):
            image = images[p.name]
            out[offset:offset + image.size] = image
        return out

    def queue_baselines(self, request, seeds) -> None:
        """The baseline's outputs on each of ``seeds`` not cached yet: its launches queued,
        one wait, one read back, each judged and cached (``Runner.judged_baseline``)."""
        spec = request.spec
        todo = []
        for seed in dict.fromkeys(seeds):
            key, against_reference = self.baseline_key(request, seed)
            if key not in self._baselines:
                todo.append((seed, key, against_reference))
        if not todo:
            return
        with self.phases("baseline outputs"):
            baseline = self.function(request.baseline_cubin, spec.entry, spec.shared_mem)
            bufs = self.buffers(spec)
            args = self.args(spec, bufs)
            span, slot_spans = self.spans(spec, len(todo))
            images = [self.packed(spec, seed) for seed, _, _ in todo]
            try:
                for image, slot in zip(images, slot_spans):
                    self.copy_queued(span, image)  # the seed's inputs, poisoned outputs, canaries
                    self.launch(baseline, spec, args)  # the spec's own launch
                    self.copy_queued(slot, span)  # its buffers into the slot
                self.stream.synchronize()
            except self.cuda_errors as err:
                raise _Failed(f"{BASELINE_FAILED}: {record.LAUNCH_ERROR}: {err}") from None
            afters, rows = self.read_staging(spec, len(todo))
            passed = self.rows_pass(spec, rows, [seed for seed, _, _ in todo], [None] * len(todo))
            for (seed, key, against_reference), after in zip(todo, afters):
                self.judged_baseline(request, seed, key, against_reference, baseline, after,
                                     written=passed)

    def check_queued(self, request) -> dict:
        """``Runner.check`` with its launches queued (module docstring): the same launches,
        verdicts and reasons; returns the largest errors against the baseline."""
        spec = request.spec
        seeds = list(request.check_seeds)
        first, second = seeds[:2]
        stress = input_sets.stress_seed(first)
        self.queue_baselines(request, seeds + list(input_sets.timing_seeds(request.timing_seed))
                             + [stress])
        plan = [(seed, "", False) for seed in seeds] + [
            (second, f"outputs pre-filled with its own results on {input_sets.seed_label(first)}",
             True)]
        afters = self.queued_launches(request, plan)
        # The largest errors over the check seeds' launches (not the pre-filled one): those
        # of all their elements at once, as the largest of each launch's.
        checked = range(len(seeds))
        got = {p.name: np.stack([gate.split_canary(afters[i][p.name], p)[0] for i in checked])
               for p in spec.outputs()}
        want = {p.name: np.stack([np.asarray(self.baseline_outputs(request, seeds[i])[p.name])
                                  for i in checked]) for p in spec.outputs()}
        with self.phases("max error"):
            worst = gate.max_error(got, want, spec)
        return {"max_abs_err": worst[0], "max_rel_err": worst[1]}

    def queued_launches(self, request, plan: list[tuple[int, str, bool]]) -> list[dict]:
        """The variant launched on each (seed, words for the reason, pre-filled?) of
        ``plan``, queued: the guards filled once and compared after each launch into a
        flag of its own, one wait, one read back; judged in order (the first failure
        raises _Failed, worded as ``Runner.check_seed`` words it; a stress seed's outputs
        compared norm-wise). Pre-filled: the outputs hold the variant's own results from
        the plan's first launch instead of the poison. Returns each launch's buffers."""
        spec = request.spec
        expected = {seed: self.baseline_outputs(request, seed) for seed, _, _ in plan}
        fn = self.function(request.cubin, spec.entry, spec.shared_mem)
        bufs = self.buffers(spec)
        args = self.args(spec, bufs)
        guards = self.guards(spec)
        slots = self.staging(spec, len(plan))
        span, slot_spans = self.spans(spec, len(plan))
        flags = self.cp.zeros(len(plan), dtype=self.cp.int32)
        with self.phases("guards filled"):
            self.fill_guards(guards)
        with self.phases("launches"):
            for i, (seed, _, prefilled) in enumerate(plan):
                # Between the buffers the upload writes the canary byte the guards hold: a
                # change there by the launch before was flagged before this upload.
                self.copy_queued(span, self.packed(spec, seed))
                if prefilled:
                    self.restore(bufs, {p.name: slots[0][p.name] for p in spec.outputs()
                                        if p.role == "out"})
                self.launch(fn, spec, args, shape=request.launch)
                self.flag_changed_guards(guards, flags[i:i + 1])
                self.copy_queued(slot_spans[i], span)
            self.stream.synchronize()  # a fault in any launch raises here
        with self.phases("read back"):
            afters, rows = self.read_staging(spec, len(plan))
            changed = flags.get()
        # Every launch judged at once, and one at a time only where that finds a failure
        # (or cannot decide: stress seeds are compared norm-wise, by check_launch alone):
        # then the first failure and its reason are check_launch's.
        stress = [input_sets.is_stress_seed(seed) for seed, _, _ in plan]
        passed = not changed.any() and not any(stress) and self.rows_pass(
            spec, rows, [seed for seed, _, _ in plan], [expected[seed] for seed, _, _ in plan])
        for i, ((seed, words, _), after) in enumerate(zip(plan, afters)):
            where = input_sets.seed_label(seed) + (f", {words}" if words else "")
            if changed[i]:
                with self.phases("guards compared"):
                    reason = self._changed_guard_reason(guards) or (
                        f"{record.OUT_OF_BOUNDS}: bytes of the arena outside the kernel's "
                        "buffers changed, then were put back")
                raise _Failed(f"{reason} ({where})")
            if passed:
                continue
            inputs, _ = self.seed_data(spec, seed)
            with self.phases("outputs compared"):
                ok, reason = gate.check_launch(spec, inputs, after, expected[seed], stress=stress[i])
            if not ok:
                raise _Failed(f"{reason} ({where})")
        return afters


def _span_bytes(spec, sizes: list[int]) -> int:
    """Bytes from a slot's (or the arena's) first buffer to the end of its last canary."""
    return sum(sizes[:-1]) + spec.buffers()[-1].nbytes + gate.CANARY_BYTES


def _slot_sizes(spec) -> list[int]:
    """Bytes each buffer takes in a staging slot: its canary included, aligned as in the arena."""
    return [-(-(p.nbytes + gate.CANARY_BYTES) // BUFFER_ALIGN) * BUFFER_ALIGN
            for p in spec.buffers()]
