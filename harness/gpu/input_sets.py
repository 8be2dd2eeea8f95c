"""The input sets a launch is checked and timed on: one per seed, drawn from the spec's fills.

* ``make_inputs(spec, seed)``: every param's value (the fills of ``harness.kernels.
  reference.random_inputs``, one RNG per seed; on the GPU with ``xp`` CuPy).
* A negative seed, ``stress_seed(s)``, gives *stress* inputs instead: seed ``s``'s fills
  with heavy tails and large magnitudes mixed in (``stress_inputs``), so that an
  approximation valid only over the normal fills' range (a clamp, a softmax without its
  max subtraction) is seen; ``harness.gpu.gate.compare(stress=True)`` judges them norm-wise.
* ``seed + OTHER_INPUTS``: the set unlike ``seed``'s in every element (``other_inputs``),
  which timed launches alternate with (``timing_seeds``).
* ``reference_outputs``: the spec's NumPy reference on a set, where it names one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np

from harness.dtypes import encodings
from harness.kernels.spec import KernelSpec, is_int_dtype, numpy_dtype

STRESS_FRACTION = 1 / 8
"""Share of a stress input buffer's elements scaled up (``stress_inputs``)."""

STRESS_MAX_EXPONENT = 10
"""Those elements are multiplied by 2**k, k uniform in 1..10: up to 1024x the fill's spread."""

OTHER_INPUTS = 1 << 40
"""``seed + OTHER_INPUTS`` names the input set that differs from ``seed``'s in every element
(``other_inputs``): the second of the two sets timed launches alternate between."""


def timing_seeds(seed: int) -> tuple[int, int]:
    """The two input sets timed launches alternate between: ``seed``'s and the set that
    differs from it in every element. Why two: a variant that remembers its last input
    (or its last output) and skips the work when launched on it again finds, on every
    launch, an input other than the one before; an answer it kept is wrong."""
    if seed < 0 or seed >= OTHER_INPUTS:
        raise ValueError(f"a timing seed is in 0..2**40, got {seed}")
    return seed, seed + OTHER_INPUTS


def make_inputs(spec: KernelSpec, seed: int, xp=np) -> dict[str, np.ndarray | np.generic]:
    """Every param's value for one launch: buffers as flat arrays, scalars as NumPy scalars.

    Inputs follow their fill (normal / uniform / int with ``high`` exclusive, as the spec
    and NumPy define it / const); ``out`` buffers are zeros (the worker poisons them),
    ``inout`` buffers are filled like inputs. Deterministic in (spec, seed): the draws
    are those of ``harness.kernels.reference.random_inputs``, the one definition of fills.
    With ``xp`` CuPy the buffers are drawn on the GPU (cuRAND, seeded by ``seed``): other
    numbers than NumPy's for the same seed, as deterministic, for kernels judged there.
    """
    from harness.kernels.reference import random_inputs

    if is_stress_seed(seed):
        return stress_inputs(spec, -1 - seed, xp)
    if seed >= OTHER_INPUTS:
        return other_inputs(spec, seed - OTHER_INPUTS, xp)
    return random_inputs(spec, _draws(xp, seed), xp)


def other_inputs(spec: KernelSpec, seed: int, xp=np) -> dict[str, np.ndarray | np.generic]:
    """Inputs from the spec's fills that differ from ``seed``'s in every element of every
    input buffer a fill can vary (a ``const`` fill cannot).

    Drawn from another seed; where an element happens to equal ``seed``'s (ints from a
    small range do, often), integers move to the next value of their range (wrapping) and
    floats to the next representable value up: the fill's domain is kept."""
    from harness.kernels.reference import random_inputs

    first = make_inputs(spec, seed, xp)
    inputs = random_inputs(spec, _draws(xp, seed, 0x07E4), xp)
    for p in spec.buffers():
        if p.role == "out" or p.fill == "const":
            continue
        a, b = first[p.name], inputs[p.name]
        uint = np.dtype(f"u{a.dtype.itemsize}")
        same = a.view(uint) == b.view(uint)
        encoding = encodings.of(p.dtype)
        if encoding:  # bits (bf16, fp8): one unit in the last place away
            inputs[p.name] = xp.where(same, encoding.neighbour(a), b)
        elif is_int_dtype(p.dtype):
            span = int(p.high) - int(p.low)
            if span < 2:
                continue
            moved = (a.astype(np.int64) - int(p.low) + 1) % span + int(p.low)
            inputs[p.name] = xp.where(same, moved.astype(a.dtype), b)
        else:
            inputs[p.name] = xp.where(same, xp.nextafter(a, xp.asarray(np.inf, a.dtype)), b)
    return inputs


class _DeviceDraws:
    """The draws ``random_inputs`` and ``stress_inputs`` make of a NumPy Generator, made on
    the GPU by a CuPy RandomState, in float32 where asked (``reference.draw_precision``). Its
    generator is Philox (counter-based): cuRAND's default, XORWOW, sets up a state per
    thread for every new seed, which cost ~2 ms per input set of 4M elements, and each
    candidate draws fresh sets (H200, session 14).

    One generator per thread and GPU, seeded again for each set (``RandomState.seed``: the
    key set and the offset back to 0, what a new RandomState of that seed starts from, so
    the same numbers): each set made and destroyed a cuRAND generator, and a candidate
    draws ~10 sets. Draws from an object whose generator a newer one has seeded since
    would be another seed's numbers: they raise."""

    def __init__(self, cupy, seed: int):
        kept = _GENERATORS.__dict__.setdefault("by_device", {})
        device = cupy.cuda.runtime.getDevice()
        if device in kept:
            kept[device][0].seed(seed)
        else:
            kept[device] = [cupy.random.RandomState(
                seed, method=cupy.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10), None]
        kept[device][1] = self
        self._kept = kept[device]

    @property
    def _state(self):
        if self._kept[1] is not self:
            raise RuntimeError("input_sets: a draw from a generator seeded for another set since")
        return self._kept[0]

    def normal(self, loc, scale, size, dtype=np.float64):
        return self._state.normal(loc, scale, size, dtype=dtype)

    def uniform(self, low, high, size, dtype=np.float64):
        return self._state.uniform(low, high, size, dtype=dtype)

    def integers(self, low, high, size):
        return self._state.randint(low, high, size)

    def random(self, size, dtype=np.float64):
        return self._state.random_sample(size, dtype=dtype)


_GENERATORS = threading.local()  # by_device: GPU id -> [RandomState, the _DeviceDraws using it]


def _draws(xp, seed, salt: int | None = None):
    """A seeded source of draws where ``xp`` makes its arrays."""
    if xp is np:
        return np.random.default_rng(seed if salt is None else [seed, salt])
    return _DeviceDraws(xp, seed if salt is None else (seed << 24) ^ salt)


def stress_seed(seed: int) -> int:
    """The seed whose inputs are ``seed``'s stress inputs: ``-1 - seed`` (always negative,
    so it never collides with an ordinary seed and caches keyed by seed keep working)."""
    if seed < 0:
        raise ValueError(f"stress_seed needs an ordinary seed (>= 0), got {seed}")
    return -1 - seed


def is_stress_seed(seed: int) -> bool:
    """True for the seeds ``stress_seed`` makes."""
    return seed < 0


def seed_label(seed: int) -> str:
    """How a reason names the inputs it failed on: ``seed 11`` / ``stress inputs of seed 11``
    / ``inputs unlike seed 11's``."""
    if seed >= OTHER_INPUTS:
        return f"inputs unlike seed {seed - OTHER_INPUTS}'s"
    return f"stress inputs of seed {-1 - seed}" if is_stress_seed(seed) else f"seed {seed}"


def stress_inputs(spec: KernelSpec, seed: int, xp=np) -> dict[str, np.ndarray | np.generic]:
    """Seed ``seed``'s inputs with heavy tails and large magnitudes mixed in.

    Every float ``in``/``inout`` buffer filled ``normal`` gets ``STRESS_FRACTION`` of its
    elements multiplied by ``2**k`` (k uniform in 1..``STRESS_MAX_EXPONENT``): a scale
    mixture of normals, so most values keep the spec's range and a few reach ~1000x it.
    Uniform, int and const fills are left alone: they encode a domain (a variance's
    positive range, valid indices) that no kernel owes more than. Why: the normal fills
    never leave a few standard deviations, so a variant that clamps its input, drops a
    softmax's max subtraction, or uses an approximation valid on a bounded range passes
    them; these inputs make such variants overflow or saturate where the baseline does not.
    """
    from harness.kernels.reference import random_inputs

    inputs = random_inputs(spec, _draws(xp, seed), xp)
    rng = _draws(xp, seed, 0x57E55)
    for p in spec.buffers():
        if p.role == "out" or p.fill != "normal" or is_int_dtype(p.dtype):
            continue
        encoding = encodings.of(p.dtype)
        values = encoding.to_float(inputs[p.name]) if encoding else inputs[p.name]
        narrow = {} if xp is np else {"dtype": np.float32}  # a mask: float32 is plenty
        scaled = rng.random(p.count, **narrow) < STRESS_FRACTION
        factor = xp.exp2(rng.integers(1, STRESS_MAX_EXPONENT + 1, p.count))
        # f16 would overflow to inf (fp8 e4m3 to NaN): clip to its largest finite
        big = encoding.MAX if encoding else np.finfo(values.dtype).max
        stressed = xp.clip(xp.where(scaled, values * factor, values), -big, big)
        inputs[p.name] = (encoding.from_float(stressed, xp) if encoding
                          else stressed.astype(values.dtype))
    return inputs


def reference_outputs(spec: KernelSpec, inputs: Mapping) -> dict[str, np.ndarray] | None:
    """The spec's NumPy reference outputs for ``inputs`` (flat, the params' dtypes), or None.

    None when the spec names no reference: then the baseline kernel is the reference.
    """
    if spec.reference is None:
        return None
    from harness.kernels.reference import run_reference

    raw = run_reference(spec, dict(inputs))  # bf16 and fp8 outputs come back as their bits
    return {p.name: np.asarray(raw[p.name], dtype=numpy_dtype(p.dtype)).ravel() for p in spec.outputs()}
