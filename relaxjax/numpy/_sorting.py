"""``numpy.sort`` and ``numpy.argsort``: the axis moved last, sorted there (stably, NaN last,
as NumPy), moved back."""
from __future__ import annotations

from .. import lax
from ..lax.util import normalize_axis
from ._base import arr, shape
from ._shape_ops import moveaxis, ravel

_KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


def _along(prim, a, axis, kind, order, name):
    if order is not None:
        raise NotImplementedError(f"{name}: order= (structured arrays) is not supported")
    if kind not in _KINDS:
        raise ValueError(f"{name}: kind must be one of {', '.join(str(k) for k in _KINDS)}, got {kind!r}")
    a = arr(a)
    if axis is None:
        a, axis = ravel(a), -1
    ax = normalize_axis(axis, len(shape(a)))
    last = len(shape(a)) - 1
    if ax == last:
        return prim.bind(a)
    return moveaxis(prim.bind(moveaxis(a, ax, -1)), -1, ax)


def sort(a, axis=-1, kind=None, order=None):
    """``numpy.sort`` (always stable: equal elements keep their order; NaN sorts last)."""
    return _along(lax.sort, a, axis, kind, order, "sort")


def argsort(a, axis=-1, kind=None, order=None):
    """``numpy.argsort``: int64 indices of a stable sort (ties in their original order, as
    ``kind="stable"``; NumPy's default quicksort may order ties differently)."""
    return _along(lax.argsort, a, axis, kind, order, "argsort")
