"""NumPy's ufunc methods on relaxjax.numpy's binary functions: ``rnp.add.outer(a, b)``,
``rnp.add.reduce(x, axis=0)``, ``rnp.maximum.accumulate(x)`` (and NumPy's own
``np.add.outer(x, y)`` on traced arrays, which dispatches here), and ``ufunc.at`` (an update
of a traced array in place: the tracer is rebound, see ``_at``)."""
from __future__ import annotations

from . import _at
from . import _reductions as red
from . import _ufuncs as uf
from ._base import arr, cast, shape
from ._shape_ops import reshape

_BINARY = ("add", "subtract", "multiply", "true_divide", "floor_divide", "remainder", "power",
           "maximum", "minimum", "arctan2", "bitwise_and", "bitwise_or", "bitwise_xor",
           "left_shift", "right_shift", "logical_and", "logical_or", "logical_xor", "equal",
           "not_equal", "less", "less_equal", "greater", "greater_equal")
_REDUCE = {"add": red.sum, "multiply": red.prod, "maximum": red.max, "minimum": red.min,
           "logical_and": red.all, "logical_or": red.any}
_ACCUMULATE = {"add": red.cumsum, "multiply": red.cumprod, "maximum": red.cummax,
               "minimum": red.cummin}


def _outer(fn):
    def outer(a, b):
        """``a[..., None, ...] op b``: every pair of elements, shape ``a.shape + b.shape``."""
        a, b = arr(a), arr(b)
        return fn(reshape(a, tuple(shape(a)) + (1,) * len(shape(b))), b)
    return outer


def _reduce(reduction):
    def reduce(a, axis=0, dtype=None, keepdims: bool = False):
        """Along ``axis`` (default 0, unlike the reduction functions; None: all axes)."""
        if dtype is not None:
            a = cast(arr(a), dtype)
        return reduction(a, axis=axis, keepdims=keepdims)
    return reduce


def _accumulate(cumulative):
    def accumulate(a, axis: int = 0, dtype=None):
        """Running results along ``axis`` (default 0)."""
        return cumulative(a, axis=axis, dtype=dtype)
    return accumulate


def attach() -> None:
    for name in _BINARY:
        fn = getattr(uf, name)
        fn.outer = _outer(fn)
        if name in _REDUCE:
            fn.reduce = _reduce(_REDUCE[name])
        if name in _ACCUMULATE:
            fn.accumulate = _accumulate(_ACCUMULATE[name])
        if name in _at.UFUNC_AT:
            fn.at = _at.ufunc_at(name)


__all__ = ["attach"]
