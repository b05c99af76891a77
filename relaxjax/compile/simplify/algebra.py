"""SimplifyAlgebra: exact identities (``x + 0``, ``x * 1``, ``x - 0``, ...) with the operand
of the same dtype, weakness and provably the same shape."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...ir import Binding, Function, Var
from ...shapes import ShapeEnv
from ..passes import Pass
from .common import concrete, differs, function_env, per_function, resolve, rewritable, substitute_vars

_EXACT_KINDS = "fiub"     # float, signed, unsigned, bool (no complex: (a+bj)*(1+0j) is inexact)


def _all_equal(a: Any, value: float, *, negative_zero: bool | None = None) -> bool:
    """``a`` is a concrete Literal all of whose elements equal ``value`` (for a zero,
    ``negative_zero`` says which sign of zero it must be in a float dtype)."""
    v = concrete(a)
    if v is None or v.dtype.kind not in _EXACT_KINDS:
        return False
    if not np.all(v == value):
        return False
    if negative_zero is not None and v.dtype.kind == "f":
        return bool(np.all(np.signbit(v) == negative_zero))
    return True


def _all_bits_set(a: Any) -> bool:
    """``a`` is a concrete bool or integer Literal of all-ones bit patterns (True, -1, max)."""
    v = concrete(a)
    return v is not None and v.dtype.kind in "iub" and bool(np.all(np.invert(v) == 0))


def _producer(defs: dict, a: Any) -> Binding | None:
    """The primitive binding that defines ``a`` in this function, if any."""
    b = defs.get(a) if isinstance(a, Var) else None
    return b if b is not None and rewritable(b) and len(b.outvars) == 1 else None


def _identity_operand(b: Binding, defs: dict) -> Any:
    """The operand ``b``'s output equals whenever the types allow (None when no identity
    applies), or a cheaper replacement Binding (composed transposes)."""
    name = b.callee.name
    args = b.args
    kind = b.outvars[0].type.dtype.kind if b.outvars else ""
    if name == "mul" and len(args) == 2:
        if _all_equal(args[1], 1):
            return args[0]
        if _all_equal(args[0], 1):
            return args[1]
    elif name == "div" and len(args) == 2:
        if _all_equal(args[1], 1):
            return args[0]
    elif name == "add" and len(args) == 2:
        # x + 0 for integers and bool; for floats only x + (-0.0): -0.0 + 0.0 is +0.0
        zero_sign = True if kind == "f" else None
        if kind in "fiub":
            if _all_equal(args[1], 0, negative_zero=zero_sign):
                return args[0]
            if _all_equal(args[0], 0, negative_zero=zero_sign):
                return args[1]
    elif name == "sub" and len(args) == 2:
        # x - (+0.0) == x in IEEE (-0.0 - 0.0 is -0.0); NumPy refuses to subtract bools
        if kind in "fiu" and _all_equal(args[1], 0, negative_zero=False if kind == "f" else None):
            return args[0]
    elif name in ("or", "xor") and len(args) == 2 and kind in "iub":
        if _all_equal(args[1], 0):
            return args[0]
        if _all_equal(args[0], 0):
            return args[1]
    elif name == "and" and len(args) == 2 and kind in "iub":
        if _all_bits_set(args[1]):
            return args[0]
        if _all_bits_set(args[0]):
            return args[1]
    elif name in ("neg", "not") and len(args) == 1 and kind in ("fiu" if name == "neg" else "iub"):
        inner = _producer(defs, args[0])
        if inner is not None and inner.callee.name == name:
            return inner.args[0]
    elif name == "convert" and len(args) == 1:
        if "dtype" in b.params and np.dtype(b.params["dtype"]) == args[0].type.dtype and \
                not b.params.get("barrier"):
            return args[0]
    elif name in ("broadcast_to", "reshape") and len(args) == 1:
        return args[0]              # the shape check below decides
    elif name == "transpose" and len(args) == 1:
        perm = tuple(b.params["perm"])
        if perm == tuple(range(len(perm))):
            return args[0]
        inner = _producer(defs, args[0])
        if inner is not None and inner.callee.name == "transpose":
            p1 = tuple(inner.params["perm"])
            composed = tuple(p1[p] for p in perm)
            if composed == tuple(range(len(composed))):
                return inner.args[0]
            return Binding(list(b.outvars), b.callee, [inner.args[0]], {**b.params, "perm": composed},
                           b.source)
    elif name == "slice" and len(args) == 1:
        start, step = b.params["start"], b.params["step"]
        if all(s == 1 for s in step) and all(s == 0 for s in start):
            return args[0]          # size == the array's shape is the shape check below
    return None


def _simplify_algebra_fn(fn: Function) -> Function:
    env = function_env(fn)
    results = {r for r in fn.results if isinstance(r, Var)}
    mapping: dict = {}
    defs: dict = {}
    kept: list = []
    kept_for_result: set = set()
    changed = False
    for b in fn.bindings:
        args = [resolve(mapping, a) for a in b.args]
        if differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
        if rewritable(b) and len(b.outvars) == 1:
            r = _identity_operand(b, defs)
            out = b.outvars[0]
            if isinstance(r, Var) and _replaceable(env, out, r):
                mapping[out] = r
                if out in results and out.type != r.type:
                    # a result keeps its exact type (f32[n + n] stays, though x is f32[2 * n]):
                    # the binding stays for the result, later operands use x
                    kept_for_result.add(out)
                    kept.append(b)
                    defs[out] = b
                continue
            if isinstance(r, Binding):
                b, changed = r, True
        kept.append(b)
        for v in b.outvars:
            defs[v] = b
    if not mapping and not changed:
        return fn
    result_mapping = {k: v for k, v in mapping.items() if k not in kept_for_result}
    return substitute_vars(fn, mapping, bindings=kept, result_mapping=result_mapping)


def _replaceable(env: ShapeEnv, out: Var, x: Var) -> bool:
    """``x`` may stand for ``out``: same dtype and weakness, provably the same shape (never a
    broadcast)."""
    t, u = out.type, x.type
    return t.dtype == u.dtype and t.weak == u.weak and env.same_shape(t.shape, u.shape)


simplify_algebra = Pass("SimplifyAlgebra", per_function(_simplify_algebra_fn))
