"""A spec from a kernel's PTX and the arguments you call it with: ``evo.from_call``.

``from_call(ptx, grid, block, *args)`` takes what a program passes to a kernel (a CuPy
``RawKernel`` call, a ``cuLaunchKernel``) and writes the spec, no hand-filled value:

- each array (NumPy, CuPy, PyTorch: anything with a ``dtype`` and a size) is a buffer of
  its dtype and element count, at a pointer parameter of the PTX; each number is a scalar
  of its NumPy type where it has one of the parameter's width, else of the parameter's PTX
  type (``.u32`` -> u32, ``.s32`` -> i32, ``.f32`` -> f32, ...);
- a buffer's role comes from what the PTX proves (``harness.kernels.spec_ptx.pointer_uses``):
  only read, ``in``; written, ``inout`` (the gate fills it and compares all of it, so a
  kernel that writes part of an output, a stencil's inner points, is judged right, and a
  variant that skips a write still differs from the baseline on fresh fills); a buffer
  the PTX proves a dtype of another width than the array's is refused;
- inputs are drawn as the arrays' data lies: floats uniform over the range they hold,
  integers over the values they hold (indices stay in bounds), a constant as itself.
The kernel is not launched here: the spec is checked against the PTX as ``evo.kernel``
checks any.
"""

from __future__ import annotations

from genomes.errors import EvoError
from harness.dtypes import encodings
from harness.kernels.spec import DTYPE_BITS as _BITS

# array dtype names (NumPy, CuPy, PyTorch without "torch.") -> spec dtypes
ARRAY_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                "int32": "i32", "uint32": "u32", "int64": "i64", "uint64": "u64",
                "int8": "i8", "uint8": "u8", "bool": "u8", "float8_e4m3fn": "f8e4m3",
                "float8_e5m2": "f8e5m2"}
# PTX parameter types -> scalar spec dtypes (untyped bits as unsigned)
_SCALAR_DTYPES = {"u32": "u32", "s32": "i32", "b32": "u32", "u64": "u64", "s64": "i64",
                  "b64": "u64", "f32": "f32", "f64": "f64", "u8": "u8", "s8": "i8",
                  "u16": "u32", "s16": "i32"}


def from_call(ptx, grid, block, *args, entry: str | None = None, name: str | None = None,
              folder=None, tolerance=(1e-5, 1e-5), **options):
    """The KernelSpec of calling ``entry`` of ``ptx`` (text or a .ptx path) on ``grid`` x
    ``block`` with ``args`` (module docstring). Other keywords go to ``evo.kernel``."""
    from evo import api
    from harness.kernels.spec_ptx import choose_entry, pointer_uses, ptx_entries

    text = api._ptx_text(ptx)
    entries = ptx_entries(text)
    entry = choose_entry(entries, entry)
    signature = entries[entry]
    if len(args) != len(signature):
        raise EvoError(f"from_call: {entry} takes {len(signature)} parameters, got "
                       f"{len(args)} arguments")
    uses = pointer_uses(text, entry)
    params = [_param(p, value, uses) for p, value in zip(signature, args)]
    return api.kernel(text, grid=grid, block=block, params=params, entry=entry, name=name,
                      folder=folder, tolerance=tolerance, **options)


def _is_array(value) -> bool:
    return hasattr(value, "dtype") and (hasattr(value, "size") or hasattr(value, "numel")) \
        and getattr(value, "ndim", 1) != 0


def _param(p, value, uses: dict):
    """The spec param for PTX parameter ``p`` given ``value``."""
    from evo import api

    if _is_array(value):
        if p.name not in uses and p.ptx_type not in ("u64", "b64", "s64"):
            raise EvoError(f"from_call: {p.name} is a .{p.ptx_type} value, got an array")
        return _buffer(p.name, value, uses.get(p.name))
    if p.name in uses:
        raise EvoError(f"from_call: {p.name} is a pointer the kernel reads or writes through; "
                       f"pass the array, not {value!r}")
    dtype = _SCALAR_DTYPES.get(p.ptx_type)
    if dtype is None:
        raise EvoError(f"from_call: {p.name} is a .{p.ptx_type} parameter, which evo's "
                       "scalars do not hold")
    number = value.item() if hasattr(value, "item") else value
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise EvoError(f"from_call: {p.name} = {value!r} is neither an array nor a number")
    typed = ARRAY_DTYPES.get(str(getattr(value, "dtype", "")))
    if typed is not None and _BITS[typed] == _BITS[dtype] and not encodings.of(typed):
        dtype = typed  # a NumPy scalar says its type (nvcc passes an int as .u32)
    elif dtype.startswith("u") and isinstance(number, int) and number < 0:
        dtype = "i" + dtype[1:]  # untyped bits holding a negative int: signed
    if dtype[0] in "iu" and not float(number).is_integer():
        raise EvoError(f"from_call: {p.name} is a .{p.ptx_type} integer, got {value!r}")
    return api.scalar(p.name, dtype, int(number) if dtype[0] in "iu" else float(number))


def _buffer(name: str, array, use):
    """A buffer of ``array``'s dtype and size; its role from ``use`` (what the PTX proves)."""
    from evo import api

    kind = str(array.dtype).removeprefix("torch.")
    dtype = ARRAY_DTYPES.get(kind)
    if dtype is None:
        raise EvoError(f"from_call: {name} holds {kind}; evo's buffers hold "
                       f"{', '.join(sorted(set(ARRAY_DTYPES)))}")
    if use is not None and use.dtype is not None and _BITS[use.dtype] != _BITS[dtype]:
        raise EvoError(f"from_call: {name} is a {kind} array, but the kernel accesses it as "
                       f"{use.dtype} ({', '.join(use.accesses)}): pass the array it expects")
    host = _host(array)
    if not _contiguous(array):
        raise EvoError(f"from_call: {name} is not contiguous; pass a contiguous copy")
    role = "inout" if use is not None and use.role in ("out", "inout") else "in"
    count = int(host.size)
    finite = host[_finite(host)] if host.dtype.kind == "f" else host
    if host.dtype.kind == "f" and finite.size == 0:
        return api.buffer(name, dtype, count, role=role)  # e.g. uninitialised: the normal fill
    low, high = finite.min().item(), finite.max().item()
    integer = host.dtype.kind in "iub"
    if low == high:
        return api.buffer(name, dtype, count, role=role, fill="const",
                          value=int(low) if integer else float(low))
    if integer:
        return api.buffer(name, dtype, count, role=role, fill="int", low=int(low),
                          high=int(high) + 1)
    return api.buffer(name, dtype, count, role=role, fill="uniform", low=float(low),
                      high=float(high))


def _finite(host):
    import numpy as np

    return np.isfinite(host)


def _host(array):
    """The array's values as a NumPy array (bf16 and fp8 as float32)."""
    import numpy as np

    if hasattr(array, "detach"):  # PyTorch
        tensor = array.detach()
        if encodings.of(ARRAY_DTYPES.get(str(tensor.dtype).removeprefix("torch."), "")):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    if hasattr(array, "get") and not isinstance(array, np.ndarray):  # CuPy
        return array.get()
    return np.asarray(array)


def _contiguous(array) -> bool:
    if hasattr(array, "is_contiguous"):
        return bool(array.is_contiguous())
    flags = getattr(array, "flags", None)
    return bool(getattr(flags, "c_contiguous", True)) if flags is not None else True
