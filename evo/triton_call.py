"""A spec from a real call of a Triton kernel: ``evo.api.from_triton_call``.

The program's own call, ``fn[grid](*args, **constexprs)``, is made once as it would be;
what Triton compiled for it (its PTX, warps, shared memory) and the arguments it got
give the spec. Tensor arguments become buffers of their dtype and element count: a
tensor the call changed is ``inout`` (the gate fills it and compares all of it, so both
"written" and "read and written" are checked), one it did not change is ``in``. Inputs
are drawn as the call's data lies: floats uniform over the range the tensor held,
integers (indices, say) over the values it held, so a gather stays in bounds. Python ints
are i32 (i64 beyond 32 bits), floats f32, as Triton types them. Constexpr parameters and
``None`` are compiled into the kernel and are not parameters of its PTX.
"""

from __future__ import annotations

from genomes.errors import EvoError, RuntimeFailure

from evo.ptx_call import ARRAY_DTYPES


def from_triton_call(fn, grid, *args, name: str | None = None, folder=None,
                     tolerance=(1e-5, 1e-5), **kwargs):
    """Launch the ``@triton.jit`` function ``fn`` on ``grid`` with the call's arguments and
    return the KernelSpec of that launch (module docstring). ``grid``: an int or a tuple
    (a grid function is the caller's to evaluate)."""
    try:
        import torch
    except ImportError as err:
        raise RuntimeFailure(f"from_triton_call needs PyTorch: the call's arguments are torch "
                             f"tensors ({err}): pip install torch") from None

    from evo import api

    if callable(grid):
        raise EvoError("from_triton_call: give the grid as numbers (evaluate your grid "
                       "function for these arguments first)")
    params = getattr(fn, "params", None)
    if params is None:
        raise EvoError(f"from_triton_call: {fn!r} is not a @triton.jit function")
    names = [p.name for p in params]
    if len(args) > len(names):
        raise EvoError(f"from_triton_call: {len(args)} arguments for {len(names)} parameters")
    bound = dict(zip(names, args)) | kwargs
    before = {k: v.clone() for k, v in bound.items() if isinstance(v, torch.Tensor)}
    compiled = fn[tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)](*args, **kwargs)
    torch.cuda.synchronize()
    own = []
    for p in params:
        value = bound.get(p.name)
        if p.is_constexpr or value is None:
            continue
        own.append(_param(p.name, value, before.get(p.name)))
    return api.from_triton(compiled, grid=grid, params=own, name=name, folder=folder,
                           tolerance=tolerance)


def _param(name: str, value, before):
    import torch

    from evo import api

    if isinstance(value, torch.Tensor):
        dtype = ARRAY_DTYPES.get(str(value.dtype).removeprefix("torch."))
        if dtype is None:
            raise EvoError(f"from_triton_call: {name} is a {value.dtype} tensor; evo's "
                           f"buffers are {', '.join(ARRAY_DTYPES)}")
        if not value.is_contiguous():
            raise EvoError(f"from_triton_call: {name} is not contiguous; pass .contiguous()")
        same = torch.equal(before.reshape(-1).view(torch.uint8), value.reshape(-1).view(torch.uint8))
        role = "in" if same else "inout"  # bit for bit: a NaN left as it was is unchanged
        if value.is_floating_point() and value.element_size() == 1:
            before = before.float()  # fp8 has no isfinite, min or max in torch
        if value.is_floating_point() and not bool(torch.isfinite(before).all()):
            return api.buffer(name, dtype, value.numel(), role=role)  # e.g. torch.empty
        low, high = before.min().item(), before.max().item()
        if dtype.startswith(("i", "u")):
            return api.buffer(name, dtype, value.numel(), role=role, fill="int",
                              low=int(low), high=int(high) + 1)
        if low == high:
            return api.buffer(name, dtype, value.numel(), role=role, fill="const", value=low)
        return api.buffer(name, dtype, value.numel(), role=role, fill="uniform",
                          low=low, high=high)
    if isinstance(value, bool):
        raise EvoError(f"from_triton_call: {name} is a bool; Triton compiles it in "
                       "(make it tl.constexpr) or pass an int")
    if isinstance(value, int):
        return api.scalar(name, "i32" if -2**31 <= value < 2**31 else "i64", value)
    if isinstance(value, float):
        return api.scalar(name, "f32", value)
    raise EvoError(f"from_triton_call: {name} = {value!r} is neither a tensor nor a number")
