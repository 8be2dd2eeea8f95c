"""Backends on CPU: replay from a real store, the static estimate with real ptxas and
cuobjdump, auto's choice, and the GPU backend's plumbing with fake workers."""

from __future__ import annotations

import time

import pytest

from genomes.errors import EvoError
from genomes.genome import Genome, parse_inline
from harness import record
from harness.backends import Variant, make_backend
from harness.backends.gpu import CHECK_SEEDS, GpuBackend
from harness.backends.replay import ReplayBackend
from harness.backends.static import STATIC_NOTE, StaticBackend
from harness.evaluate import Evaluator
from harness.record import Measurement
from harness.store import STATIC_DEVICE, Store
from harness.kernels.suite import find_kernel

GPU = "NVIDIA H200"


def _variant(code: str) -> Variant:
    return Variant(Genome(), "ptx", "ph-" + code, code_hash=code)


# ------------------------------------------------------------------ replay
def test_replay_hit_miss_and_static_never_answers_a_gpu(tmp_path):
    spec = find_kernel("gemm_tile_2x2x2")
    with Store(tmp_path / "s.sqlite") as store:
        stored = Measurement(kernel=spec.name, device=GPU, valid=True, cycles=123.0, n=200,
                             timer="clock64", backend="gpu")
        store.put(GPU, spec.name, "p1", "c1", stored)
        store.put(STATIC_DEVICE, spec.name, "p2", "c2",
                  Measurement(kernel=spec.name, device=STATIC_DEVICE, valid=True, cycles=9.0, timer="static"))
        replay = ReplayBackend(store)  # the only GPU device, found by itself
        assert replay.device == GPU and not replay.writes_store
        hit, miss = replay.measure_many(spec, [_variant("c1"), _variant("c2")])
        assert hit.valid and hit.cycles == 123.0 and hit.cached and hit.timer == "clock64"
        assert not miss.valid and miss.reason == record.NOT_MEASURED and miss.fitness == float("inf")
        assert (replay.hits, replay.misses) == (1, 1)
        static = ReplayBackend(store, STATIC_DEVICE)  # static only when asked for by name
        assert static.measure_many(spec, [_variant("c2")])[0].is_static


def test_replay_needs_a_device_when_ambiguous(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(EvoError, match="--device"):
            make_backend("replay", store=store)
        store.put(STATIC_DEVICE, "k", "p", "c", Measurement("k", STATIC_DEVICE, True, cycles=1.0, timer="static"))
        with pytest.raises(EvoError, match="0 GPU devices"):
            ReplayBackend(store)  # a static record is no answer for a GPU question


# ------------------------------------------------------------------ static
@pytest.fixture(scope="module")
def static_eval():
    return Evaluator(StaticBackend(), Store(":memory:"))


def test_static_backend_numbers_are_labelled_static(static_eval):
    spec = find_kernel("gemm_tile_4x6x8")
    base = static_eval.baseline(spec)
    [vec] = static_eval.evaluate(spec, [parse_inline("vec_ld,vec_st")])
    for m in (base, vec):
        assert m.valid and m.cycles > 0
        assert m.timer == "static" and m.device == "static" and m.backend == "static"
        assert m.notes["static"] == STATIC_NOTE and STATIC_NOTE in m.label()
        assert m.n == 0  # nothing was sampled
    assert vec.cycles < base.cycles  # fewer, wider memory instructions


def test_static_backend_ranks_spilling_variant_worse(static_eval):
    spec = find_kernel("gemm_tile_8x8x8")
    base = static_eval.baseline(spec)
    [spilling] = static_eval.evaluate(spec, [parse_inline("maxnreg(n=24)")])
    assert spilling.spill_stores > 0, "this ptxas no longer spills here: pick another genome"
    assert spilling.fitness > base.fitness
    assert spilling.notes["formula"]["spill_cost"] > 0


def test_auto_without_gpu_chooses_static_and_says_why():
    backend = make_backend("auto")
    try:
        from conftest import gpu_available

        if gpu_available():
            pytest.skip("a GPU is visible here")
        assert backend.name == "static" and "auto" in backend.chosen_because
        assert "static" in backend.describe()
    finally:
        backend.close()


# ------------------------------------------------------------------ gpu plumbing, fake workers
class FakeWorker:
    """Stands in for GpuWorker: records requests, answers with the cubin's length as cycles."""

    def __init__(self, device_id, name=GPU):
        self.device_id, self.name, self.requests, self.closed = device_id, name, [], False

    def device_name(self):
        return self.name

    def measure(self, request):
        time.sleep(0.05)  # long enough that a second candidate goes to the other GPU
        self.requests.append(request)
        return Measurement(kernel=request.name, device=self.name, valid=True, timer="clock64",
                           cycles=float(len(request.cubin)), n=30, backend="gpu")

    def close(self):
        self.closed = True


def test_gpu_backend_builds_requests_and_spreads_over_gpus():
    workers = {}

    def factory(gpu):
        workers[gpu] = FakeWorker(gpu)
        return workers[gpu]

    backend = GpuBackend([0, 1], seed=7, worker_factory=factory)
    assert backend.offers()["measure_slots"] == 2  # a candidate per GPU at a time
    # No apply pool (as on a machine with few cores): each variant is still assembled with
    # its clock64 twin in one module; the baseline, made apart, is instrumented by the backend.
    ev = Evaluator(backend, Store(":memory:"), apply_workers=0)
    spec = find_kernel("gemm_tile_2x2x2")
    genomes = [parse_inline(g) for g in ("vec_ld", "vec_st", "vec_ld,vec_st", "reorder(strategy=loads_first)")]
    results = ev.evaluate(spec, genomes)
    requests = [r for w in workers.values() for r in w.requests]
    assert backend.device == GPU and all(m.valid and m.device == GPU for m in results)
    assert len(requests) == 1 + ev.stats.measured  # the baseline first, then each unique code
    base_req = next(r for r in requests if r.check_reference)
    assert base_req.baseline_cycles is None and base_req.cubin == base_req.baseline_cubin
    for r in requests:
        if r is base_req:  # an instrumented cubin of its own, whose entry has the kernel's name
            assert r.clock_cubin and r.clock_cubin != r.cubin and r.clock_entry is None
        else:  # the variant's own cubin, with the twin entry beside the kernel's
            assert r.clock_cubin == r.cubin and r.clock_entry == f"{spec.entry}__evo_clock"
        assert len(set(r.check_seeds)) == CHECK_SEEDS and r.timing_seed not in r.check_seeds
        if r is not base_req:
            assert r.baseline_cycles == ev.baseline(spec).cycles and not r.check_reference
    assert len({r.check_seeds for r in requests}) == len(requests)  # fresh seeds per candidate
    assert ev.stats.measured >= 2 and all(w.requests for w in workers.values())  # both GPUs used
    assert results[0].registers is not None and results[0].sass_hash and results[0].notes["host"]
    backend.close()
    assert all(w.closed for w in workers.values())


def test_gpu_backend_refuses_mixed_models():
    names = iter(["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
    with pytest.raises(EvoError, match="different models"):
        GpuBackend([0, 1], worker_factory=lambda gpu: FakeWorker(gpu, next(names)))


def test_gpu_backend_starts_every_gpus_worker_at_once():
    """Each worker's start (its processes: CuPy, a context) takes seconds: the backend
    starts them side by side. Started one after another, the first would wait at the
    barrier for a second that never comes, and the barrier would break."""
    import threading

    barrier = threading.Barrier(3, timeout=10)

    class Starting(FakeWorker):
        def device_name(self):
            barrier.wait()
            return super().device_name()

    backend = GpuBackend([0, 1, 2], worker_factory=Starting)
    assert backend.device == GPU and not barrier.broken
    backend.close()


class _SlowWorker:
    """A GPU worker whose measurement takes 20 ms and counts overlapping calls."""

    def __init__(self, gpu):
        self.device_id, self.busy, self.overlaps, self.measured = gpu, False, 0, 0

    def device_name(self):
        return "Fake GPU"

    def measure(self, request):
        if self.busy:
            self.overlaps += 1
        self.busy = True
        time.sleep(0.02)
        self.busy, self.measured = False, self.measured + 1
        return Measurement(kernel="k", device="Fake GPU", valid=True, cycles=1.0,
                           timer="clock64", n=1)

    def close(self):
        pass


def _variants(spec, n):
    from harness.compile import compile_ptx

    compiled = compile_ptx(spec.ptx_text())
    return [Variant(Genome(), spec.ptx_text(), f"p{i}", compiled=compiled,
                    code_hash=f"c{i}", clock_cubin=b"clock") for i in range(n)]


def test_concurrent_batches_never_share_a_worker():
    """Two measure_many calls at once (a pipelined caller) use each worker one at a time."""
    import threading

    backend = GpuBackend([0], worker_factory=_SlowWorker)
    spec = find_kernel("gemm_tile_2x2x2")
    variants = _variants(spec, 4)
    threads = [threading.Thread(target=backend.measure_many, args=(spec, variants))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend.workers[0].overlaps == 0


def test_a_lent_gpu_measures_nothing_while_the_others_go_on():
    """lend: finalist checks (share=True) booked on one GPU borrow it together, a peer's timing another
    alone; candidates measured meanwhile all go to the GPU nobody borrowed, and a lent
    GPU measures again once given back."""
    import threading

    backend = GpuBackend([0, 1, 2], worker_factory=_SlowWorker)
    spec = find_kernel("gemm_tile_2x2x2")
    with backend.lend(share=True, device=1) as check_a, backend.lend(share=True, device=1) as check_b:
        assert check_a == check_b == 1  # checks booked on one GPU share it
        with backend.lend() as peer:
            assert peer != check_a
            free = ({0, 1, 2} - {check_a, peer}).pop()
            borrowed = threading.Thread(target=backend.measure_many, args=(spec, _variants(spec, 6)))
            borrowed.start()
            borrowed.join()
            counts = {w.device_id: w.measured for w in backend.workers}
            assert counts == {check_a: 0, peer: 0, free: 6}
    backend.measure_many(spec, _variants(spec, 9))
    assert all(w.measured > 0 for w in backend.workers if w.device_id != free)
    assert all(w.overlaps == 0 for w in backend.workers)


def test_a_lender_waits_for_its_gpus_current_candidate():
    """With one GPU, a check asked for while a candidate is measured starts after it."""
    import threading

    backend = GpuBackend([0], worker_factory=_SlowWorker)
    spec = find_kernel("gemm_tile_2x2x2")
    measuring = threading.Thread(target=backend.measure_many, args=(spec, _variants(spec, 1)))
    measuring.start()
    deadline = time.monotonic() + 5
    while not backend.workers[0].busy and time.monotonic() < deadline:
        time.sleep(0.0005)  # until the candidate is on the GPU
    assert backend.workers[0].busy
    with backend.lend(share=True) as gpu:
        assert gpu == 0 and backend.workers[0].measured == 1 and not backend.workers[0].busy
    measuring.join()


def test_checks_are_booked_on_the_least_booked_gpu_and_share_it():
    """book: each finalist check is given the GPU fewest checks are booked on, before it
    takes a turn (its processes make their CUDA context there first); lend(share=True,
    device) then holds that GPU together with the checks booked on it, and gives it back
    to the measurements when the last one is done."""
    import contextlib

    backend = GpuBackend([0, 1], worker_factory=_SlowWorker)
    with contextlib.ExitStack() as stack:
        booked = [stack.enter_context(backend.book()) for _ in range(5)]
        assert sorted(booked.count(g) for g in (0, 1)) == [2, 3]
        held = [stack.enter_context(backend.lend(share=True, device=g)) for g in booked]
        assert held == booked
        assert backend._idle.count() == 0  # both lent, each taken once
    assert backend._idle.count() == 2  # both given back
    with backend.book() as first, backend.book() as second:
        assert first != second  # bookings given back: spread again


def test_a_check_booked_on_a_busy_gpu_waits_for_it_while_measurements_use_the_others():
    """A check booked on GPU 0 while GPU 0 measures waits for that candidate alone: no
    further candidate goes to GPU 0 meanwhile (the others measure them), and the check
    then holds GPU 0."""
    import threading

    backend = GpuBackend([0, 1], worker_factory=_SlowWorker)
    spec = find_kernel("gemm_tile_2x2x2")
    gpu0 = backend.workers[0]
    measuring = threading.Thread(target=backend.measure_many, args=(spec, _variants(spec, 12)))
    measuring.start()
    deadline = time.monotonic() + 5
    while not gpu0.busy and time.monotonic() < deadline:
        time.sleep(0.0005)  # until a candidate is on GPU 0
    assert gpu0.busy
    before = gpu0.measured
    with backend.lend(share=True, device=0) as gpu:
        assert gpu == 0 and not gpu0.busy
        assert gpu0.measured == before + 1  # the candidate it had, and no other
        lent_at = gpu0.measured
        time.sleep(0.05)
        assert gpu0.measured == lent_at  # nothing measured on a lent GPU
    measuring.join()
    assert sum(w.measured for w in backend.workers) == 12
    assert all(w.overlaps == 0 for w in backend.workers)
