"""One worker's arena, and where each kernel's buffers lie in it: the arena-side half of
``harness.gpu.runner.Runner`` (``ArenaBuffers``), the guard ranges around the buffers,
and the caches keyed by a spec.

**Placement and state** (measured: gemm_tile_4x6x8, one SM always). The same cubin
timed 1229..1378 cycles (H200) depending only on where in physical memory its buffers
lay (their L2 slices), each figure reproduced to a cycle by a fresh process allocating
the same way. So every kernel's buffers are laid out from the same offset of one arena
(``BUFFER_ALIGN``-aligned, each ``CANARY_BYTES`` longer; one kernel uses it at a time and
every launch uploads all its buffers first): placement does not depend on what ran before.
The arena is lent by ``harness.gpu.arena``'s keeper process, so that a worker restarted after
a crash maps the very same physical memory: with arenas of their own, successive fresh
workers landed in other places (0.24 % apart on an H100, 2.4 % on an H200).
``notes["placement"]`` says which arena a figure was measured in.

The guards: before each checked launch every byte of the arena outside the buffers is set
to the canary byte and checked after it (``guard_ranges``): a write before ``y[0]``, past a
buffer's canary, or far beyond the last buffer (state kept across launches) is seen.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict

import numpy as np

from harness import record
from harness.gpu import gate
from harness.gpu.arena import ARENA_BYTES

RESERVED_BYTES = 1 << 20  # the arena's head: SM-clock probe and settle words, clock64 buffers
BUFFER_ALIGN = 512  # each buffer starts on this boundary (CuPy's pool gives the same)
BUFFERS_KEPT = 8  # kernels whose buffer layout is kept


def guard_ranges(layout: list[tuple[str, int, int]], arena_bytes: int = ARENA_BYTES,
                 canary: int = gate.CANARY_BYTES) -> list[tuple[str, int, int]]:
    """(where, start, end) arena byte ranges that no launch may change: everything in the
    arena but the buffers and their canaries. ``where`` names the range for a reason:
    ``before x`` (the arena's head, or the gap before a buffer), ``after y`` (past the
    last buffer's canary, to the arena's end).

    ``layout``: (name, arena offset, bytes) of each buffer in arena order, each followed by
    its canary. Why all of it: canaries only sit *after* buffers, so a write to ``y[-1]``
    went unseen; and a variant may keep state across launches in memory past its buffers,
    far beyond a canary, to skip work it was timed on.
    """
    out, prev_end = [], 0
    for name, offset, nbytes in layout:
        if offset > prev_end:
            out.append((f"before {name}", prev_end, offset))
        prev_end = offset + nbytes + canary
    if layout and prev_end < arena_bytes:
        out.append((f"after {layout[-1][0]}", prev_end, arena_bytes))
    return out


def cache_put(cache: OrderedDict, key, value, limit: int):
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)
    return value


def cache_get(cache: OrderedDict, key):
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def spec_key(spec) -> tuple:
    """What the cached buffers, inputs and baseline outputs depend on."""
    return (spec.name, spec.entry, spec.grid, spec.block, spec.shared_mem, spec.params)


class ArenaBuffers:
    """The arena-side methods of ``harness.gpu.runner.Runner``, over what its ``__init__``
    makes: the CUDA context (``cp``, ``stream``), the arena (``_arena``, ``arena_source``)
    and the caches of buffers (``_buffers``, ``_buffer_sets``, ``_scratch``, ``_l2_flush``)
    and of the guards' device tables (``_guard_tables``)."""

    def _open_arena(self, handle: bytes | None):
        """(arena, where it comes from): the keeper's memory when lent (``harness.gpu.arena``:
        the same physical memory after a restart), else an allocation of our own, made
        first thing so that it lands in the same place as often as possible."""
        cp, why = self.cp, "no arena keeper"
        if handle is not None:
            try:
                ptr = cp.cuda.runtime.ipcOpenMemHandle(handle)
                memory = cp.cuda.UnownedMemory(ptr, ARENA_BYTES, self)
                return (cp.ndarray((ARENA_BYTES,), cp.uint8, cp.cuda.MemoryPointer(memory, 0)),
                        "the keeper's arena (same memory across worker restarts)")
            except Exception as err:
                why = f"the keeper's arena did not open: {type(err).__name__}: {err}"
        return cp.empty(ARENA_BYTES, dtype=cp.uint8), f"own arena ({why})"

    def buffers(self, spec) -> dict:
        """A uint8 device buffer per buffer param, ``CANARY_BYTES`` longer, at fixed places.

        Laid out in the arena from ``RESERVED_BYTES`` on, in param order, so the same spec
        gets the same addresses in every request and every worker process (see Placement).
        """
        key = spec_key(spec)
        bufs = cache_get(self._buffers, key)
        if bufs is None:
            bufs, offset = {}, RESERVED_BYTES
            for p in spec.buffers():
                size = p.nbytes + gate.CANARY_BYTES
                bufs[p.name] = self._arena[offset:offset + size]
                offset += -(-size // BUFFER_ALIGN) * BUFFER_ALIGN
            if offset > ARENA_BYTES:  # too big for the arena: own allocations, placed anyhow
                bufs = {p.name: self.cp.empty(p.nbytes + gate.CANARY_BYTES, dtype=self.cp.uint8)
                        for p in spec.buffers()}
            cache_put(self._buffers, key, bufs, BUFFERS_KEPT)
        return bufs

    def guards(self, spec) -> list[tuple[str, int, int]]:
        """``guard_ranges`` of the spec's buffers in the arena (none for own allocations)."""
        base = self._arena.data.ptr
        layout = [(p.name, buf.data.ptr - base, p.nbytes)
                  for p, buf in zip(spec.buffers(), self.buffers(spec).values())]
        if any(not 0 <= offset < ARENA_BYTES for _, offset, _ in layout):
            return []
        return guard_ranges(layout)

    def fill_guards(self, guards) -> None:
        """The canary byte over every guard range (a memset: no kernel, no host copy)."""
        for _, lo, hi in guards:
            self._arena[lo:hi].data.memset_async(gate.CANARY_BYTE, hi - lo, self.stream)

    def changed_guard(self, guards) -> str | None:
        """The reason when a guard range no longer holds only the canary byte (compared
        on the GPU: the ranges span most of the arena), else None."""
        if gate.array_module(self._arena) is np:  # a host arena (tests): the array code
            return self._changed_guard_reason(guards)
        from harness.gpu.gate_device import any_guard_changed

        # Every range in one launch and one read back (gate_device); the reason's figures
        # only where something changed.
        if not any_guard_changed(self._arena, self._guard_table(guards), gate.CANARY_BYTE):
            return None
        return self._changed_guard_reason(guards)

    def flag_changed_guards(self, guards, flag) -> None:
        """``changed_guard`` without waiting: ``flag`` (an int32 device array of one
        element, cleared) set to 1 where a guard byte changed, by a launch queued on the
        stream (``harness.gpu.queued_checks``)."""
        from harness.gpu.gate_device import flag_guard_changed

        flag_guard_changed(self._arena, self._guard_table(guards), gate.CANARY_BYTE, flag)

    def _guard_table(self, guards):
        """The ranges' device table (``gate_device.guard_table``), kept per layout."""
        from harness.gpu.gate_device import guard_table

        key = tuple((lo, hi) for _, lo, hi in guards)
        table = cache_get(self._guard_tables, key)
        if table is None:
            table = cache_put(self._guard_tables, key, guard_table(list(key)), BUFFERS_KEPT)
        return table

    def _changed_guard_reason(self, guards) -> str | None:
        for where, lo, hi in guards:
            changed = self._arena[lo:hi] != gate.CANARY_BYTE
            if bool(changed.any()):
                first = lo + int(changed.argmax())
                return (f"{record.OUT_OF_BOUNDS}: {int(changed.sum())} bytes of the arena "
                        f"outside the kernel's buffers changed, {where} (arena +{first:#x})")
        return None

    def placement(self, spec) -> str:
        """How the spec's buffers are placed, for the notes."""
        first = next(iter(self.buffers(spec).values()))
        if first.data.ptr == self._arena.data.ptr + RESERVED_BYTES:
            return f"{self.arena_source} +{RESERVED_BYTES:#x}"
        return f"own allocations (over the {ARENA_BYTES >> 20} MiB arena)"

    def args(self, spec, bufs: dict) -> list:
        """Kernel arguments in PTX param order: device buffers and typed NumPy scalars."""
        return [bufs[p.name] if p.kind == "buffer" else spec.numpy_dtype(p.dtype).type(p.value)
                for p in spec.params]

    def upload(self, spec, bufs: dict, images: dict) -> None:
        for p in spec.buffers():
            image = images[p.name]
            if isinstance(image, np.ndarray):
                bufs[p.name].set(image)
            else:  # a device image: a device-to-device copy
                bufs[p.name][...] = image

    def written_on_device(self, spec, images: dict, slot: int | None = None) -> dict:
        """Device copies of ``images`` for the buffers a launch writes (outputs and inouts):
        what ``restore`` puts back before each timed clock64 launch (``slot``: as
        ``on_device``)."""
        return self._on_device(spec, images, [p for p in spec.buffers() if p.role != "in"],
                               None if slot is None else ("written", slot))

    def on_device(self, spec, images: dict, slot: int | None = None) -> dict:
        """Device copies of every buffer's image (``restore`` copies them in as an upload
        on the stream: clock64 timing's batches are captured as graphs, and a copy from
        host memory cannot be). With a ``slot``: copied, on the stream, into arrays kept
        for the spec and slot, so that every request's copies lie where the last one's
        did (``harness.gpu.batch_graphs`` keeps a batch's graph across requests)."""
        return self._on_device(spec, images, spec.buffers(), None if slot is None else ("all", slot))

    def _on_device(self, spec, images: dict, params, slot) -> dict:
        if slot is None:
            return {p.name: self.cp.asarray(images[p.name]) for p in params}
        key = (spec_key(spec), *slot)
        kept = cache_get(self._timing_images, key)
        if kept is None:
            kept = cache_put(self._timing_images, key, {
                p.name: self.cp.empty(images[p.name].nbytes, dtype=self.cp.uint8) for p in params},
                4 * BUFFERS_KEPT)
        for p in params:
            self.copy_queued(kept[p.name], images[p.name])
        return kept

    def copy_queued(self, dst, src) -> None:
        """``src`` (a host or device array) copied into the device array ``dst``, queued on
        the runner's stream, host memory included (an asynchronous copy from pageable
        memory is staged before the call returns): after launches that have not run yet,
        without a wait."""
        if isinstance(src, np.ndarray):
            src = np.ascontiguousarray(src)
            dst.data.copy_from_host_async(src.ctypes.data_as(ctypes.c_void_p), src.nbytes,
                                          self.stream)
        else:
            dst.data.copy_from_device_async(src.data, src.nbytes, self.stream)

    def restore(self, bufs: dict, kept: dict) -> None:
        """Copy ``kept`` (from ``written_on_device``) into ``bufs``: device to device, queued
        on the runner's stream, so launches still follow each other without a host wait."""
        for name, image in kept.items():
            self.copy_queued(bufs[name], image)

    def arena_span(self, spec, nbytes: int):
        """The arena's ``nbytes`` from the spec's first buffer on (``harness.gpu.queued_checks``
        copies a launch's buffers, and the guard bytes between them, as one)."""
        start = next(iter(self.buffers(spec).values())).data.ptr - self._arena.data.ptr
        if not RESERVED_BYTES <= start <= ARENA_BYTES - nbytes:
            raise ValueError(f"{spec.name}'s buffers are not in the arena: no span")
        return self._arena[start:start + nbytes]

    def fill_poison(self, param, raw) -> None:
        """``param``'s poison over ``raw`` (uint8, on the device), queued on the stream."""
        gate.fill_poison(param, raw)  # a CuPy fill: a kernel on the current stream, ours

    def scratch(self, nbytes: int):
        """A device buffer of at least ``nbytes`` (uint8), kept: the largest asked so far."""
        if self._scratch is None or self._scratch.nbytes < nbytes:
            self._scratch = None
            self._scratch = self.cp.empty(max(nbytes, 1), dtype=self.cp.uint8)
        return self._scratch

    def buffer_sets(self, spec, count: int) -> list[dict]:
        """``count`` sets of the spec's buffers: its own (``buffers``), then copies laid
        after them in the arena where they fit (fixed places, as the first: see Placement),
        else own allocations. Kept for the next request of the same spec (one spec's at
        a time: they can be large). Timing spreads its launches over them."""
        key = (spec_key(spec), count)
        sets = cache_get(self._buffer_sets, key)
        if sets is None:
            self._buffer_sets.clear()
            first = self.buffers(spec)
            sizes = [-(-(p.nbytes + gate.CANARY_BYTES) // BUFFER_ALIGN) * BUFFER_ALIGN
                     for p in spec.buffers()]
            offset = next(iter(first.values())).data.ptr - self._arena.data.ptr + sum(sizes)
            in_arena = 0 <= offset and offset + (count - 1) * sum(sizes) <= ARENA_BYTES
            sets = [first]
            for _ in range(count - 1):
                bufs = {}
                for p, size in zip(spec.buffers(), sizes):
                    nbytes = p.nbytes + gate.CANARY_BYTES
                    bufs[p.name] = (self._arena[offset:offset + nbytes] if in_arena else
                                    self.cp.empty(nbytes, dtype=self.cp.uint8))
                    offset += size
                sets.append(bufs)
            cache_put(self._buffer_sets, key, sets, 1)
        return sets

    def rotated_args(self, spec, copies: int, images: list[dict]) -> list[list]:
        """Argument lists for ``copies`` sets of the spec's buffers (``buffer_sets``), set
        ``i`` holding ``images[i % len(images)]``. Events timing rotates its launches
        among them (``gpu_timing.time_events``)."""
        sets = self.buffer_sets(spec, copies)
        for i, bufs in enumerate(sets):
            self.upload(spec, bufs, images[i % len(images)])
        return [self.args(spec, bufs) for bufs in sets]

    def flush_l2(self) -> None:
        """Evict the L2 on the runner's stream: a memset of twice its size (no kernel to
        compile). Cold clock64 timing runs it before each timed launch."""
        if self._l2_flush is None:
            self._l2_flush = self.cp.empty(2 * self.l2_bytes, dtype=self.cp.uint8)
        self._l2_flush.data.memset_async(0, self._l2_flush.nbytes, self.stream)
