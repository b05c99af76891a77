"""FoldConstants: primitives whose operands are all constants are evaluated at compile time
(results up to ``FOLD_MAX_ELEMENTS`` elements)."""
from __future__ import annotations

import math

import numpy as np

from ...ir import Binding, Function, IRModule, Literal, regions
from ..passes import Pass
from .common import concrete, differs, has_symbolic, per_function, resolve, rewritable, substitute_vars

FOLD_MAX_ELEMENTS = 1024     # larger constants are computed at run time, not stored in the IR


def _fold(b: Binding) -> list | None:
    """Literals for the outputs of ``b`` when all its operands are concrete, else None."""
    if not rewritable(b) or has_symbolic(b.params) or \
            any(isinstance(p, (Function, IRModule)) for p in b.params.values()) or regions(b):
        return None
    values = [concrete(a) for a in b.args]
    if any(v is None for v in values):
        return None
    for v in b.outvars:
        if not all(isinstance(d, int) for d in v.type.shape) or math.prod(v.type.shape) > FOLD_MAX_ELEMENTS:
            return None
    try:
        with np.errstate(all="ignore"):
            res = b.callee.impl(*values, **b.params)
    except Exception:      # an error the program raises at run time stays a run-time error
        return None
    res = list(res) if getattr(b.callee, "multiple_results", False) else [res]
    if len(res) != len(b.outvars):
        return None
    lits = []
    for r, v in zip(res, b.outvars):
        r = np.asarray(r)
        if r.shape != tuple(v.type.shape) or r.dtype != v.type.dtype:
            return None    # disagrees with the recorded type: leave it to the backend to report
        lits.append(Literal(np.array(r, v.type.dtype, copy=True), v.type))
    return lits


def _fold_constants_fn(fn: Function) -> Function:
    mapping: dict = {}
    kept = []
    for b in fn.bindings:
        args = [resolve(mapping, a) for a in b.args]
        if differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
        lits = _fold(b)
        if lits is None:
            kept.append(b)
            continue
        mapping.update(zip(b.outvars, lits))
    if not mapping:
        return fn
    return substitute_vars(fn, mapping, bindings=kept)


fold_constants = Pass("FoldConstants", per_function(_fold_constants_fn))
