"""The baseline's outputs on each seed, the reference a variant's outputs are judged
against: a mixin of ``harness.gpu.runner.Runner`` (over its context, buffers, seeds and
caches). The baseline launched on a seed's inputs is judged too (canaries, inputs kept,
every output written; on the first check seed, where asked, against the spec's NumPy
reference): a baseline that fails is ``baseline failed: ...``, and no variant is judged.
Launched one at a time here, or queued with the rest of a small kernel's checks
(``harness.gpu.queued_checks``), both judged by ``judged_baseline``.
"""

from __future__ import annotations

import numpy as np

from harness import record
from harness.gpu import gate, input_sets
from harness.gpu.buffers import cache_get, cache_put, spec_key
from harness.kernels.spec import is_int_dtype

BASELINE_FAILED = "baseline failed"
"""Reason prefix when the unmodified kernel itself fails its checks: the variant is not judged."""
SEEDS_KEPT = 256  # seeds (inputs, baseline outputs) kept of kernels judged on the host
DEVICE_SEEDS_KEPT = 8  # seed sets (and baseline outputs) of a kernel judged on the GPU kept there


class _Failed(Exception):
    """A result that ends the request early (the reason is the Measurement's)."""


class BaselineOutputs:
    """The baseline's outputs per seed, cached (``Runner._baselines``)."""

    def baseline_outputs(self, request, seed: int) -> dict:
        """The baseline's outputs on one seed (cached); raises _Failed if the baseline fails."""
        key, against_reference = self.baseline_key(request, seed)
        outputs = cache_get(self._baselines, key)
        if outputs is not None:
            return outputs
        with self.phases("baseline outputs"):
            return self._baseline_outputs(request, seed, key, against_reference)

    def baseline_key(self, request, seed: int) -> tuple[tuple, bool]:
        """(the cache key of the baseline's outputs on ``seed``, whether they are also
        compared with the spec's NumPy reference)."""
        # The spec's NumPy reference is checked on the first check seed alone: it tells
        # whether the baseline computes what the spec says (a wrong spec or reference),
        # which as a rule one seed's inputs show (every seed draws from the same fills), and
        # it runs on the host while the GPU waits: on every seed, a 4-16M-element kernel's
        # baseline took 1.1-6.6 s of the worker's time (and again when measured again at
        # the run's end), 18 of the 35 s the worker spent on the search's measurements of
        # issue 27's mix (BENCHMARKS.md, session 22).
        against_reference = request.check_reference and seed == request.check_seeds[0]
        return (spec_key(request.spec), self.digest(request.baseline_cubin), seed,
                against_reference), against_reference

    def _baseline_outputs(self, request, seed: int, key: tuple, against_reference: bool) -> dict:
        spec = request.spec
        try:
            baseline = self.function(request.baseline_cubin, spec.entry, spec.shared_mem)
            after = self.run_checked(baseline, spec, seed)
        except self.cuda_errors as err:
            raise _Failed(f"{BASELINE_FAILED}: {record.LAUNCH_ERROR}: {err}") from None
        return self.judged_baseline(request, seed, key, against_reference, baseline, after)

    def judged_baseline(self, request, seed: int, key: tuple, against_reference: bool,
                        baseline, after: dict, written: bool = False) -> dict:
        """The baseline's outputs on ``seed`` from its launch's buffers read back (``after``),
        judged (canaries, inputs kept, every output written; the reference where asked)
        and cached under ``key``; raises _Failed where the baseline fails. ``written``:
        that first judgement already passed (``gate_rows``, for the queued launches)."""
        spec = request.spec
        inputs, images = self.seed_data(spec, seed)
        ok, reason = (True, record.OK) if written else gate.check_launch(spec, inputs, after, None)
        outputs = {p.name: gate.split_canary(after[p.name], p)[0].copy() for p in spec.outputs()}
        ints = [p for p in spec.outputs() if p.role == "out" and is_int_dtype(p.dtype)]
        if not ok and reason.startswith(record.UNWRITTEN) and ints:
            # An integer's poison (all ones: -1) is a value too; launched again on zeroed
            # outputs, an element written holds its value, one never written holds zero.
            xp = gate.array_module(next(iter(images.values())))
            zeroed = dict(images)
            for p in ints:
                zeros = xp.zeros(p.count, dtype=spec.numpy_dtype(p.dtype))
                zeroed[p.name] = gate.with_canary(zeros)
            try:
                again = self.run_checked(baseline, spec, seed, images=zeroed)
            except self.cuda_errors as err:
                raise _Failed(f"{BASELINE_FAILED}: {record.LAUNCH_ERROR}: {err}") from None
            refilled = {p.name: gate.split_canary(again[p.name], p)[0] for p in ints}
            first = {**after, **{p.name: gate.with_canary(outputs[p.name]) for p in spec.outputs()}}
            ok, reason = gate.check_launch(spec, inputs, first, None, refilled=refilled)
        if not ok:
            raise _Failed(f"{BASELINE_FAILED}: {reason} ({input_sets.seed_label(seed)})")
        if against_reference:
            host_inputs = {name: value if gate.array_module(value) is np else value.get()
                           for name, value in inputs.items()}
            reference = input_sets.reference_outputs(spec, host_inputs)
            if reference is None:
                raise _Failed(f"{BASELINE_FAILED}: spec {spec.name} names no NumPy reference")
            host = {name: self.cp.asnumpy(out) for name, out in outputs.items()}
            ok, reason = gate.compare(host, reference, spec)
            if not ok:
                raise _Failed(f"{BASELINE_FAILED}: disagrees with the NumPy reference: {reason} ({input_sets.seed_label(seed)})")
        limit = DEVICE_SEEDS_KEPT if self.judged_on_device(spec) else SEEDS_KEPT
        return cache_put(self._baselines, key, outputs, limit)
