"""NumPy's creation functions given symbolic dims, while a function is traced.

``np.zeros(n)``, ``np.ones((1, k))``, ``np.eye(m)``, ``np.arange(n)`` take no array, so NEP
18 never hands them to ``relaxjax.numpy``: NumPy asks the dim for an ``int`` and builds a
concrete array, which pins the dim to this call's size (a guard, so a new compile for every
size) and leaves an array that ``x[i] = tracer`` cannot write into.  Real NumPy programs are
full of them (``out = np.zeros(n); for ...: out[i] = ...``).

While a trace runs, :func:`creation_functions_traced` puts thin wrappers in the ``numpy``
module: a call whose arguments hold a symbolic dim (``SymbolicDim``) goes to
``relaxjax.numpy``'s version, which builds a traced array of symbolic shape; every other
call -- concrete sizes, another thread, no trace -- goes to NumPy's own function unchanged.
The originals are back when the last trace ends (nested and concurrent traces count).
"""
from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

from ..core import current_trace
from ..shapes import SymbolicDim
from . import _creation, _functions, _shape_ops

# numpy name -> relaxjax.numpy's version
_OURS = {"zeros": _creation.zeros, "ones": _creation.ones, "empty": _creation.empty,
         "full": _creation.full, "eye": _creation.eye, "identity": _creation.identity,
         "arange": _creation.arange, "linspace": _functions.linspace, "tri": _shape_ops.tri}

_LOCK = threading.Lock()
_ACTIVE = [0]                      # traces running (all threads)
_ORIGINALS: dict = {}


def _has_dim(x) -> bool:
    if isinstance(x, SymbolicDim):
        return True
    if isinstance(x, (tuple, list)):
        return any(_has_dim(v) for v in x)
    return False


def _wrapper(name: str, original):
    ours = _OURS[name]

    @functools.wraps(original)
    def creation(*args, **kwargs):
        if current_trace() is not None and (_has_dim(args) or _has_dim(list(kwargs.values()))):
            kwargs.pop("like", None)
            kwargs.pop("order", None)      # a traced array has no memory order to choose
            kwargs.pop("device", None)
            return ours(*args, **kwargs)
        return original(*args, **kwargs)
    creation.__relaxjax_original__ = original
    return creation


@contextlib.contextmanager
def creation_functions_traced():
    """NumPy's creation functions dispatch symbolic sizes to ``relaxjax.numpy`` while this
    is active (see the module docstring)."""
    with _LOCK:
        if _ACTIVE[0] == 0:
            for name in _OURS:
                original = getattr(np, name)
                _ORIGINALS[name] = getattr(original, "__relaxjax_original__", original)
                setattr(np, name, _wrapper(name, _ORIGINALS[name]))
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                for name, original in _ORIGINALS.items():
                    setattr(np, name, original)
                _ORIGINALS.clear()
