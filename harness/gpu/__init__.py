"""The GPU side of a measurement: the worker process and everything it runs.

`worker.py` is the process (one per GPU, started by `spawn.py`); `runner.py` checks and
times one candidate in it: the inputs of each seed (`input_sets.py`), the gate
(`gate.py`, with its one-pass device kernels `gate_device.py`), the arena (`arena.py`'s
keeper) and where buffers lie in it with the guards around them (`buffers.py`), the result-reuse probe (`reuse_probe.py`), timing (`timing.py`,
its statistics `estimate.py`, the SM clocks `clocks.py`), in-kernel instrumentation
(`instrument.py`). After a search: the finalist's harder checks (`finalist.py`, which runs
`finalist_driver.py` under compute-sanitizer, its processes ready before they take their
GPU turn: `ready_runs.py`), Nsight Compute passes (`ncu.py`), and the
machine's measuring noise (`stability.py`). CuPy is imported inside functions only.
"""
