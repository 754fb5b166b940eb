"""Head dims off the multiples of 16 (DiT-XL's 72, 40, 24, ...) by zero padding.

The kernels work in 16-column steps (the tensor cores' k-steps, TMA's boxes). q and k padded
with zero columns to the next multiple of 16 leave every q . k, so every score, as it was; v
padded adds zero columns to the output, which are sliced off. The call then runs the kernel of
the padded head dims, at the cost of one copy of q, k and v and the padded columns' work. The
softmax scale is the program's at the true head dim (or the call's). Each kernel's forward and
backward (_run, _backward) pad and slice their own arrays, so an eager call recorded for
autograd and a torch.compile'd one (whose op runs them) alike get gradients at the true head
dims; the op's fake implementation makes the checks here instead of the padded call's.

Not for a program whose score, mask or captured shapes read a head dim: padding would change
what they read, so such a call is refused as before, saying why.
"""
from __future__ import annotations

import contextlib
import sys

from .. import ir
from ..errors import LaunchError
from ..passes import tiling
from ..semantics import eval_scalar
from . import arrays, geometry


def needed(q, v) -> bool:
    """Whether a call's head dims are off the 16-column steps (a cheap test: shapes only; what
    is not an array is left for validation to name)."""
    try:
        return len(q.shape) == 4 == len(v.shape) and bool(q.shape[3] % tiling.HEAD_DIM_STEP or
                                                           v.shape[3] % tiling.HEAD_DIM_STEP)
    except (AttributeError, TypeError):
        return False


def run(forward, spec, q, k, v, caps, out, lse, scale, tile_summary, keep_lse):
    """forward(q, k, v, ...) (a kernel's _run, its arguments) through padded copies, the output
    sliced back (into `out` where given); spec: the kernel's AttentionKernel, for the checks."""
    s = check(spec, q, k, v, caps, scale)
    elem, Dv = spec.ir.tensor("q").dtype, v.shape[3]
    if out is not None:
        o = spec._info(out, "out", elem, 4)
        if o.shape != (*q.shape[:3], Dv):
            raise LaunchError(f"{spec.name}: out must have shape {[*q.shape[:3], Dv]} (q's batch, heads and length, "
                              f"v's head dim), got {list(o.shape)}")
        spec._contiguous(o, "out")
    result = forward(pad(q), pad(k), pad(v), caps, None, lse, s, tile_summary, keep_lse)
    o, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    o = o[..., :Dv]
    if out is None:
        out = arrays.dense(o)
    elif hasattr(out, "copy_"):
        out.copy_(o)
    else:
        out[...] = o
    return (out, *rest) if rest else out


def backward(backward_fn, spec, q, k, v, out, dout, lse, dlse, caps, scale, want_caps):
    """backward_fn (a kernel's _backward) through padded copies: dq, dk and dv sliced back."""
    s = check(spec, q, k, v, caps, scale)
    dout = None if dout is None else pad(dout)
    dq, dk, dv, dcaps = backward_fn(pad(q), pad(k), pad(v), pad(out), dout, lse, dlse, caps, s, want_caps)
    # row-major, as the op's fake backward promises torch.compile (torch.empty_like of q, k, v)
    return (arrays.dense(dq[..., :q.shape[3]]), arrays.dense(dk[..., :k.shape[3]]), arrays.dense(dv[..., :v.shape[3]]),
            dcaps)


def refuse_out_of_range(kernel: str, D: int, Dv: int) -> None:
    """The one refusal of a call's head dims, padded (check) or not (validate): every call takes 1
    to MAX_HEAD_DIM, so its message is the same whether or not the dim is a multiple of 16."""
    for name, x in (("q and k", D), ("v", Dv)):
        if not 1 <= x <= tiling.MAX_HEAD_DIM:
            raise LaunchError(f"{kernel}: head dimension {x} of {name} is not supported: it must be from 1 to "
                              f"{tiling.MAX_HEAD_DIM} (a multiple of {tiling.HEAD_DIM_STEP} runs as it is, any "
                              f"other padded with zeros)")


def padded_dim(d: int) -> int:
    """The head dim a call at head dim d runs at."""
    return -(-d // tiling.HEAD_DIM_STEP) * tiling.HEAD_DIM_STEP


def check(spec, q, k, v, caps, scale) -> float:
    """The softmax scale at the call's true head dims, after the checks padding needs."""
    kern = spec.ir
    dims = spec.bound_dims(q, k, v, caps)[1]
    D, Dv = q.shape[3], v.shape[3]
    refuse_out_of_range(spec.name, D, Dv)
    readers = _head_dim_readers(kern)
    if readers:
        raise LaunchError(f"{spec.name}: head dimension {D if D % tiling.HEAD_DIM_STEP else Dv} is not supported "
                          f"here: it must be a multiple of {tiling.HEAD_DIM_STEP} for this kernel, whose "
                          f"{', '.join(readers)} read the head dim (other kernels take any head dim up to "
                          f"{tiling.MAX_HEAD_DIM} by zero padding, which would change what these read)")
    return geometry.softmax_scale(scale, lambda: eval_scalar(kern.func("scale"), dims), spec.name)


def _head_dim_readers(kern: ir.Kernel) -> list[str]:
    """What in the program besides the scale reads q's or v's head dim, by name."""
    names = {e.name for e in (kern.tensor("q").shape[3], kern.tensor("v").shape[3]) if isinstance(e, ir.Var)}
    found = [f"{fname}()" for fname, e in kern.funcs if fname != "scale" and any(ir.uses(e, n) for n in names)]
    found += [f"'{t.name}' shape" for t in kern.tensors if t.role == "capture"
              and any(ir.uses(d, n) for d in t.shape for n in names)]
    return found


def blank(x):
    """An uninitialised array of x's kind, dtype and device at the padded head dim: for what
    reads only the shapes (a plan's key, AttentionKernel.tile_summary), no copy of x."""
    shape = (*x.shape[:3], padded_dim(x.shape[3]))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    xp = sys.modules[type(x).__module__.split(".")[0]]  # numpy or CuPy
    with x.device if xp.__name__ == "cupy" else contextlib.nullcontext():  # (CuPy allocates on the current device)
        return xp.empty(shape, dtype=x.dtype)


def pad(x):
    """x with zero columns up to the next multiple of 16 (a copy; x itself where none is missing)."""
    extra = -x.shape[3] % tiling.HEAD_DIM_STEP
    if not extra:
        return x
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.nn.functional.pad(x, (0, extra))
    xp = sys.modules[type(x).__module__.split(".")[0]]  # numpy or CuPy
    return xp.pad(x, ((0, 0),) * 3 + ((0, extra),))
