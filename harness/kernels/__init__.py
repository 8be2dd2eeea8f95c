"""The kernel suite: committed PTX, one TOML spec beside each, sources and NumPy references.

`src/` holds the CUDA sources, `catalog.py` the launch shapes and fills, and
`python -m harness.kernels.regenerate` rewrites every `.ptx` and `.toml` from them.
`reference.py` holds the NumPy functions that check a baseline kernel's own outputs.
Use `harness.suite` to list and find kernels and `harness.spec` to read a spec.
"""
