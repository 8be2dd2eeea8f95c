"""What a kernel is, and the suite: the spec (`spec.py`: read a spec; `spec_write.py`:
write one; `spec_ptx.py` and `ptx_index.py`: what the PTX itself says of its params), the
suite (`suite.py`: list and find kernels), peers (`peers.py`: the torch function a kernel
is timed against), and the suite's files: committed PTX, one TOML spec beside each,
sources and NumPy references.

`src/` holds the CUDA sources, `catalog.py` the launch shapes and fills, and
`python -m harness.kernels.regenerate` rewrites every `.ptx` and `.toml` from them.
`reference.py` holds the NumPy functions that check a baseline kernel's own outputs.
"""
