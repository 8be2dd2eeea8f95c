"""Device memory that outlives GPU worker processes, so buffer placement survives a restart.

Measured (H200, gemm_tile_4x6x8, one SM): the same cubin reads 1229..1378 cycles depending
only on which physical memory its buffers occupy (their L2 slices), and a fresh worker
process may be given other physical memory than the last one: three fresh workers read
1367.3, 1367.6 and 1334.7 cycles. A worker restarted after a crash must not move the
figures of everything it measures next.

So one *keeper* process per GPU allocates the arenas (``cudaMalloc``) and lends them to
worker processes as CUDA IPC handles: a worker restarted after a crash, and the next worker
of the same evo process, map the very same memory. The keeper only allocates: it launches
no kernel, so a worker's crash (a sticky error in the worker's own CUDA context) cannot
reach it. Arenas are lent lowest first and come back when a worker closes: workers that
run one after another get arena 0 each time; workers alive at once get distinct arenas.

Across evo processes (two runs) the keeper, and so the physical memory, is new: compare
cycles within a run, as DESIGN.md says. Where no keeper can run (no CuPy, IPC refused),
``lend`` returns None with the reason and the worker allocates its own arena, saying so in
every record's ``notes["placement"]``.
"""

from __future__ import annotations

import atexit
import threading

ARENA_BYTES = 256 << 20  # each arena: every kernel's buffers are laid out in it
START_TIMEOUT_S = 120.0
ANSWER_TIMEOUT_S = 60.0


def keep_arenas(conn, device_id: int, nbytes: int) -> None:
    """The keeper process: allocate an arena per ``"alloc"`` and answer its IPC handle.

    Runs until the parent sends None or goes away; the driver frees everything at exit.
    """
    try:
        import cupy

        cupy.cuda.Device(device_id).use()
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))  # make the context now
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    kept = []  # raw pointers: cudaMalloc bases, as cudaIpcGetMemHandle wants
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            break
        if message is None:
            break
        try:
            ptr = cupy.cuda.runtime.malloc(nbytes)
            kept.append(ptr)
            conn.send(("handle", bytes(cupy.cuda.runtime.ipcGetMemHandle(ptr))))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {err}"))


class ArenaKeeper:
    """The parent's side of one GPU's keeper process: lend and take back arena handles.

    Thread-safe. ``target`` replaces :func:`keep_arenas` (tests without a GPU).
    """

    def __init__(self, device_id: int, nbytes: int = ARENA_BYTES, target=None):
        self.device_id, self.nbytes = device_id, nbytes
        self._lock = threading.Lock()
        self._handles: list[bytes] = []  # every arena so far, in allocation order
        self._lent: set[int] = set()  # indexes into _handles
        self.error = ""  # why the keeper cannot lend (then lend() returns None)
        from harness.gpu import spawn

        ctx = spawn.context()
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=target or keep_arenas, args=(child, device_id, nbytes),
                                 name=f"evo-arena{device_id}", daemon=True)
        self._proc.start()
        child.close()
        kind, payload = self._answer(START_TIMEOUT_S)
        if kind != "ready":
            self.error = f"arena keeper for GPU {device_id} did not start: {payload}"
            self.close()

    def _answer(self, timeout_s: float) -> tuple[str, object]:
        try:
            if not self._conn.poll(timeout_s):
                return "error", f"no answer within {timeout_s:g} s"
            return self._conn.recv()
        except (EOFError, OSError) as err:
            return "error", f"the keeper process died ({type(err).__name__})"

    def lend(self) -> bytes | None:
        """The IPC handle of the lowest free arena (a new one if all are lent), or None."""
        with self._lock:
            if self.error:
                return None
            free = [i for i in range(len(self._handles)) if i not in self._lent]
            if free:
                index = free[0]
            else:
                self._conn.send("alloc")
                kind, payload = self._answer(ANSWER_TIMEOUT_S)
                if kind != "handle":
                    self.error = f"arena keeper for GPU {self.device_id}: {payload}"
                    return None
                self._handles.append(payload)
                index = len(self._handles) - 1
            self._lent.add(index)
            return self._handles[index]

    def take_back(self, handle: bytes | None) -> None:
        with self._lock:
            if handle in self._handles:
                self._lent.discard(self._handles.index(handle))

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()
        if not self.error:
            self.error = "closed"


_keepers: dict[int, ArenaKeeper] = {}
_keepers_lock = threading.Lock()  # guards the two dicts
_starting: dict[int, threading.Lock] = {}  # GPU -> held while its keeper starts


def keeper(device_id: int) -> ArenaKeeper:
    """This process's keeper for GPU ``device_id``, started on first use, closed at exit.
    One GPU's keeper starts once; several GPUs' keepers start side by side (each is a
    process that imports CuPy and makes a context: a run on four GPUs started them one
    after another before its first measurement)."""
    with _keepers_lock:
        if device_id in _keepers:
            return _keepers[device_id]
        starting = _starting.setdefault(device_id, threading.Lock())
    with starting:
        with _keepers_lock:
            if device_id in _keepers:  # started by another thread meanwhile
                return _keepers[device_id]
        made = ArenaKeeper(device_id)
        with _keepers_lock:
            if not _keepers:
                atexit.register(close_keepers)
            _keepers[device_id] = made
        return made


def close_keepers() -> None:
    with _keepers_lock:
        for k in _keepers.values():
            k.close()
        _keepers.clear()
