"""Measurement scripts run with `python -m harness.tools.NAME` (not imported by the
library): candidates a second (`bench_throughput`), the gate's cost (`bench_gate_cost`),
a peer's timing (`bench_peer`), the SM clock states (`clock_states`), the GPU tests on
several GPUs at once (`gpu_shards`)."""
