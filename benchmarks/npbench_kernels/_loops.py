"""JAX's structured control flow as the kernels use it: ``relaxjax.lax``'s when this
tree has it, else a plain Python loop that runs on NumPy arrays (so every kernel runs
eagerly as its own NumPy reference) and refuses traced values with a clear error."""
from __future__ import annotations

import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.core import Tracer


def _traced(*vals) -> bool:
    stack = list(vals)
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, Tracer):
            return True
    return False


def _missing(name: str):
    raise NotImplementedError(f"relaxjax.lax.{name} is not available in this relaxjax")


def fori_loop(lo, hi, body, init):
    f = getattr(rj.lax, "fori_loop", None)
    if f is not None:
        return f(lo, hi, body, init)
    if _traced(lo, hi, init):
        _missing("fori_loop")
    x = init
    for i in range(int(lo), int(hi)):
        x = body(i, x)
    return x


def while_loop(cond, body, init):
    f = getattr(rj.lax, "while_loop", None)
    if f is not None:
        return f(cond, body, init)
    if _traced(init):
        _missing("while_loop")
    x = init
    while cond(x):
        x = body(x)
    return x


def scan(f, init, xs, length=None, reverse=False):
    """``jax.lax.scan``: xs is an array, a tuple of arrays or None (then ``length``)."""
    g = getattr(rj.lax, "scan", None)
    if g is not None:
        return g(f, init, xs, length=length, reverse=reverse)
    if _traced(init, xs):
        _missing("scan")
    n = length if xs is None else (len(xs[0]) if isinstance(xs, tuple) else len(xs))
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry, ys = init, [None] * n
    for i in order:
        x = None if xs is None else (tuple(a[i] for a in xs) if isinstance(xs, tuple)
                                      else xs[i])
        carry, ys[i] = f(carry, x)
    if ys and isinstance(ys[0], tuple):
        return carry, tuple(np.stack(c) for c in zip(*ys))
    return carry, (np.stack(ys) if ys and ys[0] is not None else None)


def scatter_add(x, idx, v):
    """``x.at[idx].add(v)`` (JAX); on NumPy arrays ``np.add.at`` on a copy."""
    if isinstance(x, np.ndarray) and not _traced(idx, v):
        y = x.copy()
        np.add.at(y, idx, v)
        return y
    if isinstance(x, np.ndarray):
        x = rnp.zeros(x.shape, x.dtype) + x            # traced, so that it can be updated
    return x.at[idx].add(v)
