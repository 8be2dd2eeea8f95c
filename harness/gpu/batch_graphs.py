"""clock64 batches' CUDA graphs kept from one candidate of a kernel to the next.

``harness.gpu.timing.time_clock64`` replays each input set's batch (its upload, clock
poison, launches and restores, settle) from a CUDA graph. A batch is the same stream work
for every candidate of a kernel but for the function it launches: the buffers, the clock
slices and the images it uploads lie at fixed places (the images copied in per request:
``ArenaBuffers.on_device`` with a ``slot``). So a batch's graph is captured for the first
candidate and kept; a later candidate's function is set into its kernel nodes
(``cuGraphExecKernelNodeSetParams_v2``, through the driver: CuPy wraps capture, not node
updates). Measured on an H200 (``bench_old`` probe, session 26): a 22-node batch captured
and launched 0.15-0.21 ms, its kept graph given another function and launched 0.06-0.08 ms.

Every kept graph is launched once and waited for before its batch counts, as a fresh
capture is (``timing.replayable``). Where the driver refuses an update, or anything of this
fails, the caller captures a graph for the request alone, as before.
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict

KEPT = 8  # graphs kept per runner (two input sets x a few kernels or launch shapes)
_KERNEL_NODE = 0  # CU_GRAPH_NODE_TYPE_KERNEL
_RELAXED = 2  # cudaStreamCaptureModeRelaxed: the worker's one thread uses its context alone


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12 and later)."""

    _fields_ = [("func", ctypes.c_void_p),
                ("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared_mem", ctypes.c_uint),
                ("kernel_params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class GraphUpdateFailed(Exception):
    """The driver refused a call of this module; the message says which and its code."""


@functools.cache
def _driver():
    return ctypes.CDLL("libcuda.so.1")


def _call(name: str, *args) -> None:
    code = getattr(_driver(), name)(*args)
    if code != 0:
        raise GraphUpdateFailed(f"{name} returned CUDA error {code}")


class _Kept:
    """One captured batch: its graph (whose nodes name what to update), executable graph,
    and the kernel nodes that launch the candidate's function, with their parameters."""

    def __init__(self, runtime, graph: int, function: int):
        self.runtime, self.graph, self.exec = runtime, graph, 0
        count = ctypes.c_size_t(0)
        _call("cuGraphGetNodes", ctypes.c_void_p(graph), None, ctypes.byref(count))
        nodes = (ctypes.c_void_p * count.value)()
        _call("cuGraphGetNodes", ctypes.c_void_p(graph), nodes, ctypes.byref(count))
        self.kernel_nodes = []
        for node in nodes:
            kind = ctypes.c_int(-1)
            _call("cuGraphNodeGetType", ctypes.c_void_p(node), ctypes.byref(kind))
            if kind.value != _KERNEL_NODE:
                continue
            params = _KernelNodeParams()
            _call("cuGraphKernelNodeGetParams_v2", ctypes.c_void_p(node), ctypes.byref(params))
            if params.func == function:  # not the clock poison's fill, not the settle kernel
                self.kernel_nodes.append((node, params))
        if not self.kernel_nodes:
            raise GraphUpdateFailed("no kernel node of the captured batch launches its function")
        self.exec = runtime.graphInstantiate(graph)

    def set_function(self, function: int) -> None:
        """Every kernel node of the candidate launches ``function`` from the next launch on
        (the same arguments: buffers and clock slices lie where they did)."""
        for node, params in self.kernel_nodes:
            params.func, params.kern = function, None
            _call("cuGraphExecKernelNodeSetParams_v2", ctypes.c_void_p(self.exec),
                  ctypes.c_void_p(node), ctypes.byref(params))

    def destroy(self) -> None:
        if self.exec:
            self.runtime.graphExecDestroy(self.exec)
        self.runtime.graphDestroy(self.graph)


def replay(runner, key, fn, run):
    """A replay of ``run`` (a batch queued on the runner's stream, launching ``fn``): the
    graph kept under ``key`` given ``fn``, else one captured now and kept. Launched once
    and waited for before it is returned. Returns (replay, "reused" or "captured"); raises
    where it cannot (the caller then captures for this request alone)."""
    runtime, stream = runner.cp.cuda.runtime, runner.stream
    kept: OrderedDict = runner.batch_graphs
    graph = kept.pop(key, None)
    how = "reused"
    try:
        if graph is not None:
            graph.set_function(fn.ptr)
        else:
            how = "captured"
            runtime.streamBeginCapture(stream.ptr, _RELAXED)
            try:
                run()
            finally:
                handle = runtime.streamEndCapture(stream.ptr)
            try:
                graph = _Kept(runtime, handle, fn.ptr)
            except Exception:
                runtime.graphDestroy(handle)
                raise
        launch = functools.partial(runtime.graphLaunch, graph.exec, stream.ptr)
        launch()
        stream.synchronize()
    except Exception:
        if graph is not None:
            try:
                graph.destroy()
            except Exception:  # a dead context: its error is the one that counts
                pass
        raise
    kept[key] = graph
    while len(kept) > KEPT:
        kept.popitem(last=False)[1].destroy()
    return launch, how
