"""CSE: bindings of the same primitive on the same operands and parameters computed once."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy

from ...ir import Binding, Function, Var
from ...shapes import is_symbolic, normalize
from ..passes import Pass
from .common import differs, per_function, resolve, rewritable, substitute_vars


def _freeze(v: Any) -> Any:
    """A hashable key for a param value; equal keys mean equal values (never the converse
    needed: distinct keys only cost a missed elimination)."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", v.hex() if math.isfinite(v) else repr(v))
    if isinstance(v, str) or v is None:
        return ("str", v)
    if isinstance(v, sympy.Basic):
        n = normalize(v)
        return ("int", n) if isinstance(n, int) else ("sym", v)
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    if isinstance(v, type) and issubclass(v, np.generic):
        return ("dtype", np.dtype(v).str)
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        if a.dtype == object:
            return ("id", id(v))
        return ("array", a.dtype.str, a.shape, a.tobytes())
    if isinstance(v, tuple):
        return ("tuple",) + tuple(_freeze(x) for x in v)
    if isinstance(v, list):
        return ("list",) + tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple(sorted(((repr(k), _freeze(x)) for k, x in v.items()), key=lambda kv: kv[0]))
    try:
        hash(v)
        return ("obj", type(v), v)
    except TypeError:
        return ("id", id(v))


def _atom_key(a: Any) -> Any:
    if isinstance(a, Var):
        return ("var", id(a))
    if is_symbolic(a.value):
        return ("lit-sym", a.type, a.value)
    v = np.asarray(a.value, a.type.dtype)
    if v.dtype == object:
        return ("lit-id", id(a))
    return ("lit", a.type, v.shape, v.tobytes())


def _cse_fn(fn: Function) -> Function:
    mapping: dict = {}
    seen: dict = {}
    kept: list = []
    for b in fn.bindings:
        args = [resolve(mapping, a) for a in b.args]
        if differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
        if rewritable(b):
            key = (id(b.callee), tuple(_atom_key(a) for a in b.args), _freeze(b.params))
            prev = seen.get(key)
            if prev is not None and len(prev.outvars) == len(b.outvars) and \
                    all(p.type == v.type for p, v in zip(prev.outvars, b.outvars)):
                mapping.update(zip(b.outvars, prev.outvars))
                continue
            if prev is None:
                seen[key] = b
        kept.append(b)
    if not mapping:
        return fn
    return substitute_vars(fn, mapping, bindings=kept)


eliminate_common_subexpr = Pass("CSE", per_function(_cse_fn))
