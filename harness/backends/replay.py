"""The replay backend: answer from the measurement store alone, never measure anything.

Useful to re-rank, re-plot or re-run a search on a machine without the GPU that produced
the numbers. It answers for exactly one device (named, or the store's only GPU device);
a variant the store does not know is ``Measurement(valid=False, reason=NOT_MEASURED)`` and
is counted in ``misses``. Static estimates live under the device ``"static"`` and so can
never answer for a GPU; replaying ``"static"`` itself must be asked for by name.
"""

from __future__ import annotations

from genomes.errors import EvoError
from harness import record
from harness.backends import Backend, Variant
from harness.record import Measurement
from harness.store import STATIC_DEVICE, Store


class ReplayBackend(Backend):
    """Store lookups by code hash for one device; misses are NOT_MEASURED results."""

    name = "replay"
    writes_store = False  # a replay must leave the store exactly as it found it

    def __init__(self, store: Store, device: str | None = None):
        self.store = store
        known = store.devices()
        if device is None:
            gpus = [d for d in known if d != STATIC_DEVICE]
            if len(gpus) != 1:
                found = ", ".join(repr(d) for d in known) or "none"
                raise EvoError(f"replay needs a device name (--device): the store {store.path} holds "
                               f"{len(gpus)} GPU devices (devices: {found})")
            device = gpus[0]
        self.device = device
        self.hits = 0
        self.misses = 0
        if device == STATIC_DEVICE:
            self.chosen_because = "replaying static estimates, not measurements"

    def measure_many(self, spec, variants: list[Variant],
                     baseline: Measurement | None = None) -> list[Measurement]:
        out = []
        for v in variants:
            found = self.store.lookup_code(self.device, spec.store_name, v.code_hash)
            if found is None:
                self.misses += 1
                c = v.compiled
                found = Measurement(kernel=spec.name, device=self.device, valid=False,
                                    reason=record.NOT_MEASURED, backend="replay",
                                    registers=c.registers if c else None,
                                    spill_stores=c.spill_stores if c else None,
                                    spill_loads=c.spill_loads if c else None,
                                    shared_mem=c.shared_mem if c else None,
                                    ptx_hash=v.ptx_hash, sass_hash=v.code_hash)
            else:
                self.hits += 1
            out.append(found)
        return out
