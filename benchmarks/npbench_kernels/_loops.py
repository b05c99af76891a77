"""What the kernels share beyond relaxjax: JAX's structured control flow is
``relaxjax.lax``'s (it runs as plain Python loops on NumPy arrays, so every kernel runs
eagerly as its own NumPy reference), and ``scatter_add``."""
from __future__ import annotations

import numpy as np

import relaxjax.numpy as rnp
from relaxjax.core import Tracer
from relaxjax.lax import dynamic_slice, fori_loop, scan, while_loop  # noqa: F401  (the kernels' names)


def _traced(*vals) -> bool:
    stack = list(vals)
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, Tracer):
            return True
    return False


def scatter_add(x, idx, v):
    """``x.at[idx].add(v)`` (JAX); on NumPy arrays ``np.add.at`` on a copy."""
    if isinstance(x, np.ndarray) and not _traced(idx, v):
        y = x.copy()
        np.add.at(y, idx, v)
        return y
    if isinstance(x, np.ndarray):
        x = rnp.zeros(x.shape, x.dtype) + x            # traced, so that it can be updated
    return x.at[idx].add(v)
