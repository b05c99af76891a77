"""SimplifyShapes: dim expressions in types and parameters normalised under the function's
bounds (``simplify_dim``)."""
from __future__ import annotations

import math
from typing import Any

import sympy

from ...ir import Binding, Function, Literal, TensorType, Var
from ...shapes import INF, ShapeEnv, interval, is_symbolic, normalize
from ..passes import Pass
from .common import differs, function_env, per_function, resolve, substitute_vars


def simplify_dim(d: Any, env: ShapeEnv) -> Any:
    """An equal, simpler form of the dim ``d``: expanded, with ``min``/``max`` arguments that
    the bounds prove redundant dropped, ``//``, ceil-division and ``%`` decided by bounds
    where they can be.  Bare symbols are never replaced (they are what binds a dim)."""
    if not is_symbolic(d):
        return d
    if isinstance(d, (sympy.Add, sympy.Mul)):       # (evaluated, if it was built unevaluated)
        d = d.func(*d.args)
    e = _simp(sympy.sympify(d), env)
    e = normalize(sympy.expand(e)) if is_symbolic(e) else normalize(e)
    if is_symbolic(e) and e.has(sympy.Min, sympy.Max, sympy.floor, sympy.ceiling, sympy.Mod):
        e2 = _simp(e, env)            # expanding may expose more (min(n + 1, n + 2))
        e = normalize(e2)
    return d if (is_symbolic(e) and e == d) else e


def _simp(e: sympy.Basic, env: ShapeEnv) -> sympy.Basic:
    if e.is_Atom:
        return e
    args = [_simp(a, env) for a in e.args]
    same = all(a is b for a, b in zip(args, e.args))
    if isinstance(e, (sympy.Min, sympy.Max)):
        ge = ">=" if isinstance(e, sympy.Min) else "<="     # drop a when some kept b <= a (Min)
        keep: list = []
        for a in args:
            if any(env.try_prove(ge, a, k) is True for k in keep):
                continue
            keep = [k for k in keep if env.try_prove(ge, k, a) is not True]
            keep.append(a)
        if len(keep) == 1:
            return keep[0]
        # (SymPy's Min/Max constructor compares its arguments pairwise: slow, so skipped
        # when nothing changed)
        return e if same and len(keep) == len(args) else e.func(*keep)
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        r = e.func(args[0])
        if isinstance(r, (sympy.floor, sympy.ceiling)):
            lo, hi = interval(args[0], env.bounds)
            if lo not in (INF, -INF) and hi not in (INF, -INF):
                f = math.floor if isinstance(r, sympy.floor) else math.ceil
                if f(lo) == f(hi):
                    return sympy.Integer(f(lo))
        return r
    if isinstance(e, sympy.Mod):
        a, c = args
        r = sympy.Mod(a, c)
        if isinstance(r, sympy.Mod) and env.try_prove(">=", a, 0) is True and \
                env.try_prove("<", a, c) is True:
            return a
        return r
    # rebuilt only when an operand changed: SymPy re-evaluates a node whenever it is
    # rebuilt (sorting a sum's terms, comparing a min's arguments), the bulk of this pass
    return e if same else e.func(*args)


def _simplify_shapes_fn(fn: Function) -> Function:
    env = function_env(fn)
    memo: dict = {}

    def dim(d):
        if not is_symbolic(d):
            return d
        r = memo.get(d)
        if r is None:
            r = memo[d] = simplify_dim(d, env)
        return r

    def value(v):
        if isinstance(v, tuple):
            new = tuple(value(x) for x in v)
            return v if not differs(list(new), list(v)) else new
        if isinstance(v, list):
            new = [value(x) for x in v]
            return v if not differs(new, v) else new
        return dim(v) if is_symbolic(v) else v

    def ttype(t: TensorType) -> TensorType:
        shape = tuple(dim(d) for d in t.shape)
        return t if not differs(list(shape), list(t.shape)) else TensorType(shape, t.dtype, t.weak)

    lits: dict = {}

    def lit(a):
        if not isinstance(a, Literal):
            return a
        r = lits.get(id(a))
        if r is None:
            t = ttype(a.type)
            v = value(a.value) if is_symbolic(a.value) else a.value
            r = a if (t is a.type and v is a.value) else Literal(v, t)
            lits[id(a)] = r
        return r

    mapping: dict = {}
    params = []
    for p in fn.params:
        t = ttype(p.type)
        # the signature binds the dims: keep every dim it names
        if t is not p.type and t.free_symbols() == p.type.free_symbols():
            nv = Var(t, p.hint)
            mapping[p] = nv
            params.append(nv)
        else:
            params.append(p)
    bindings = []
    for b in fn.bindings:
        args = [lit(resolve(mapping, a)) for a in b.args]
        outvars, new_params = list(b.outvars), b.params
        if b.kind == "primitive" and getattr(b.callee, "kind", "") != "data_dependent":
            # (data-dependent results bind dims at run time: their types stay as written)
            new_params = {k: value(v) for k, v in b.params.items()}
            if all(new_params[k] is b.params[k] for k in b.params):
                new_params = b.params
            outvars = []
            for v in b.outvars:
                t = ttype(v.type)
                if t is v.type:
                    outvars.append(v)
                else:
                    nv = Var(t, v.hint)
                    mapping[v] = nv
                    outvars.append(nv)
        if differs(args, b.args) or differs(outvars, b.outvars) or new_params is not b.params:
            b = Binding(outvars, b.callee, args, dict(new_params), b.source)
        bindings.append(b)
    results = [lit(resolve(mapping, r)) for r in fn.results]
    return substitute_vars(fn, mapping, bindings=bindings, params=params, results=results)


simplify_shapes = Pass("SimplifyShapes", per_function(_simplify_shapes_fn))
