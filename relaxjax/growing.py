"""The driver's side of growing caches (``compile/growing_caches.py``): arrays with room.

A program whose donated cache grows along an inner axis takes it in a *physical* array with
room after the ``t`` positions the caller passed (``t + room``, the room a dim) and returns
the grown cache physical too.  Before a call, ``widen`` finds each such argument's physical
array: the one behind a view this module handed out (``narrow``), when it has room for the
call's new positions and the group's other caches share its length; else a new array with
a quarter more room, the caller's positions copied in (once every ``len / 4`` calls for a
cache growing a position per call).  After it, ``narrow`` hands the caller views of the
grown positions and remembers their physical arrays, so the next call takes them back
without a copy.  The views are plain NumPy (or CuPy) arrays, not contiguous.

Writing into the room past a view is safe because the program writes there through a
donated parameter (``donate_argnums``: the caller gave the cache up) and only where no
live view this module handed out reaches: a view with a longer one of its array alive is
copied first.
"""
from __future__ import annotations

import weakref

import numpy as np

from .shapes import eval_dim

_PHYSICAL: dict = {}          # id(view) -> (weak reference to the view, its physical array)
_VIEWS: dict = {}             # id(physical array) -> {id(view): the view's length}, views alive


def _remember(view, ph, axis: int) -> None:
    key = id(view)
    try:
        ref = weakref.ref(view, lambda ref, key=key: _forget(key, ref))
    except TypeError:           # an array type without weak references: copied next call
        return
    _PHYSICAL[key] = (ref, ph)
    _VIEWS.setdefault(id(ph), {})[key] = view.shape[axis]


def _forget(key: int, ref) -> None:
    entry = _PHYSICAL.get(key)
    if entry is not None and entry[0] is ref:
        del _PHYSICAL[key]
        views = _VIEWS[id(entry[1])]
        del views[key]
        if not views:
            del _VIEWS[id(entry[1])]


def _physical_of(x, axis: int):
    """The physical array behind ``x`` (a view ``narrow`` made), or None -- also when a
    longer view of it is still alive (a caller branching from one cache twice instead of
    giving it up): the call would write over that view's positions past ``x``."""
    entry = _PHYSICAL.get(id(x))
    if entry is None or entry[0]() is not x:
        return None
    ph, length = entry[1], x.shape[axis]
    if any(n > length for n in _VIEWS[id(ph)].values()):
        return None
    return ph if ph.shape[:axis] == x.shape[:axis] and ph.shape[axis + 1:] == x.shape[axis + 1:] else None


def _along(axis: int, start: int, stop: int | None) -> tuple:
    """The index of positions ``start:stop`` along ``axis``."""
    return (slice(None),) * axis + (slice(start, stop),)


class GrowingCaches:
    """The groups of one entry (``attrs["growing"]``): ``widen`` before its calls,
    ``narrow`` after."""

    def __init__(self, groups: tuple):
        self.groups = groups

    def widen(self, D: dict, arrays) -> list:
        """The arguments with each growing cache replaced by its physical array; binds the
        room dims in ``D``."""
        arrays = list(arrays)
        for axis, need, room_name, params, _ in self.groups:
            need = eval_dim(need, D)
            found = [_physical_of(arrays[i], axis) for i, _ in params]
            lengths = {ph.shape[axis] for ph in found if ph is not None}
            if any(ph is None for ph in found) or len(lengths) != 1 or min(lengths) < need:
                length = need + max(need // 4, 8)
            else:
                length = lengths.pop()
            for (i, t), ph in zip(params, found):
                if ph is None or ph.shape[axis] != length:
                    x = arrays[i] if hasattr(arrays[i], "dtype") else np.asarray(arrays[i])
                    shape = x.shape[:axis] + (length,) + x.shape[axis + 1:]
                    # NumPy's (subclasses too: a memmap's constructor takes a file) or the
                    # device array type's own
                    ph = np.empty(shape, x.dtype) if isinstance(x, np.ndarray) else type(x)(shape, x.dtype)
                    t = eval_dim(t, D)
                    ph[_along(axis, 0, t)] = x
                    # the room zeroed: a reference attention weighting the keys past the
                    # lengths by 0 still reads them (0 * nan is nan)
                    ph[_along(axis, t, None)] = 0
                arrays[i] = ph
            D[room_name] = length - need
        return arrays

    def narrow(self, D: dict, outs) -> list:
        """The results with each grown cache cut to its grown length (views, remembered)."""
        outs = list(outs)
        for axis, need, _, _, results in self.groups:
            n = eval_dim(need, D)
            for j in results:
                ph = outs[j]
                outs[j] = view = ph[_along(axis, 0, n)]
                _remember(view, ph, axis)
        return outs
