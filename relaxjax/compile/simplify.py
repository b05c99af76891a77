"""Graph-level simplification: constant folding, exact algebraic identities, common
subexpressions, symbolic-shape normalisation, and ``canonicalize`` (all of them with dead
code elimination, to a fixed point).

Every pass here works on each graph :class:`~relaxjax.ir.Function` of a module (other
entries, such as loop-level programs, pass through) and rewrites only ``primitive``
bindings; ``call_tir``, ``call_library`` and sub-function calls are left alone, though
their operands are renamed like every other use.  Passes never mutate their input: an
unchanged function comes back as the same object, a changed one as a new
:class:`~relaxjax.ir.Function` with the same ``bounds``, ``guards`` and ``attrs``.

A value is only ever replaced by one of the same dtype, weakness and (provably) the same
shape, so the function's signature and result types stay what they were.  A result may
become a :class:`~relaxjax.ir.Literal` (a folded constant): both backends return literal
results, as they do for a traced function that returns a constant.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import sympy

from ..ir import Binding, Function, IRModule, Literal, TensorType, Var
from ..shapes import INF, ShapeEnv, interval, is_symbolic, normalize
from .passes import _EFFECTFUL, Pass, dead_code_elimination, run_pipeline

__all__ = ["fold_constants", "simplify_algebra", "eliminate_common_subexpr", "simplify_shapes",
           "canonicalize", "substitute_vars", "simplify_dim", "FOLD_MAX_ELEMENTS"]

FOLD_MAX_ELEMENTS = 1024     # larger constants are computed at run time, not stored in the IR


# ---------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------

def resolve(mapping: dict, a: Any) -> Any:
    """Follow ``mapping`` (Var -> atom) from ``a`` to the atom that finally replaces it."""
    while isinstance(a, Var):
        nxt = mapping.get(a)
        if nxt is None or nxt is a:
            return a
        a = nxt
    return a


def substitute_vars(fn: Function, mapping: dict, *, bindings: list | None = None,
                    params: list | None = None, results: list | None = None,
                    result_mapping: dict | None = None) -> Function:
    """``fn`` with every use of a Var in ``mapping`` (operands of any binding, and results)
    replaced by the atom it maps to (chains followed).

    ``bindings``, ``params`` and ``results`` optionally replace the function's own lists
    (before the substitution); ``result_mapping``, when given, is used for the results
    instead of ``mapping``.  Bindings whose operands do not change are reused; ``fn``
    itself comes back when nothing changes at all.
    """
    src = fn.bindings if bindings is None else bindings
    new_params = fn.params if params is None else params
    src_results = fn.results if results is None else results
    changed = _differs(src, fn.bindings) or _differs(new_params, fn.params) or \
        _differs(src_results, fn.results)
    out = []
    for b in src:
        args = [resolve(mapping, a) for a in b.args] if mapping else list(b.args)
        if _differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
            changed = True
        out.append(b)
    rmap = mapping if result_mapping is None else result_mapping
    new_results = [resolve(rmap, r) for r in src_results] if rmap else list(src_results)
    changed = changed or _differs(new_results, fn.results)
    if not changed:
        return fn
    return Function(fn.name, list(new_params), list(fn.param_names), out, new_results,
                    fn.bounds, fn.guards, fn.attrs)


def _differs(a: list, b: list) -> bool:
    return len(a) != len(b) or any(x is not y for x, y in zip(a, b))


def _per_function(fn_pass: Callable[[Function], Function]) -> Callable[[IRModule], IRModule]:
    """An ``IRModule -> IRModule`` pass applying ``fn_pass`` to every graph Function."""
    def run(module: IRModule) -> IRModule:
        fns = {name: fn_pass(f) if isinstance(f, Function) else f
               for name, f in module.functions.items()}
        return _relink(module, fns)
    return run


def _relink(old: IRModule, fns: dict) -> IRModule:
    """The module of ``fns`` (the functions of ``old``, some rewritten), with every call of
    a rewritten sub-function calling the new one (a call binding holds its callee)."""
    latest = {id(f): fns[k] for k, f in old.functions.items()
              if isinstance(f, Function) and fns.get(k) is not f}
    if not latest:
        return old
    for _ in range(len(fns) + 1):          # callers of relinked callers, up the call graph
        again = False
        for name, f in fns.items():
            if not isinstance(f, Function):
                continue
            stale = [b for b in f.bindings if b.kind == "function" and
                     id(b.callee) in latest and latest[id(b.callee)] is not b.callee]
            if not stale:
                continue
            bindings = [Binding(list(b.outvars), latest[id(b.callee)], list(b.args), dict(b.params),
                                b.source) if b in stale else b for b in f.bindings]
            nf = Function(f.name, list(f.params), list(f.param_names), bindings, list(f.results),
                          f.bounds, f.guards, f.attrs)
            latest[id(f)] = nf
            if name in old.functions:
                latest[id(old.functions[name])] = nf
            fns[name] = nf
            again = True
        if not again:
            break
    return IRModule(fns, old.entry)


def _env(fn: Function) -> ShapeEnv:
    """Decides relations between the function's dims from its bounds (symbols it does not
    bound are only known to be >= 0)."""
    bounds = dict(fn.bounds)
    syms: set = set()
    for v in fn.vars():
        syms |= v.type.free_symbols()
    for b in fn.bindings:
        syms |= _symbols(b.params) | _symbols([a.value for a in b.args if isinstance(a, Literal)])
    for s in syms:
        bounds.setdefault(s, (0, INF))
    return ShapeEnv("explicit", bounds)


def _symbols(v: Any) -> set:
    if isinstance(v, (tuple, list)):
        return set().union(*(_symbols(x) for x in v)) if v else set()
    if isinstance(v, dict):
        return _symbols(list(v.values()))
    return set(v.free_symbols) if isinstance(v, sympy.Basic) else set()


def _has_symbolic(v: Any) -> bool:
    if isinstance(v, (tuple, list)):
        return any(_has_symbolic(x) for x in v)
    if isinstance(v, dict):
        return _has_symbolic(list(v.values()))
    return isinstance(v, sympy.Basic)


def _rewritable(b: Binding) -> bool:
    """A pure primitive call: no run-time shape binding, no assertion, no side effect."""
    return (b.kind == "primitive" and getattr(b.callee, "kind", "") != "data_dependent"
            and b.callee.name not in _EFFECTFUL and not getattr(b.callee, "effectful", False))


def _concrete(a: Any) -> np.ndarray | None:
    """The value of a Literal with a concrete (non-symbolic) value, as an array of its dtype."""
    if not isinstance(a, Literal) or is_symbolic(a.value) or a.type.free_symbols():
        return None
    if isinstance(a.value, np.ndarray) and a.value.dtype == object:
        return None
    try:
        v = np.asarray(a.value, a.type.dtype)
    except (TypeError, ValueError):
        return None
    if v.shape != tuple(a.type.shape):
        return None
    return v


# ---------------------------------------------------------------------------------------
# FoldConstants
# ---------------------------------------------------------------------------------------

def _fold(b: Binding) -> list | None:
    """Literals for the outputs of ``b`` when all its operands are concrete, else None."""
    if not _rewritable(b) or _has_symbolic(b.params) or \
            any(isinstance(p, Function) for p in b.params.values()):
        return None
    values = [_concrete(a) for a in b.args]
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
        if _differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
        lits = _fold(b)
        if lits is None:
            kept.append(b)
            continue
        mapping.update(zip(b.outvars, lits))
    if not mapping:
        return fn
    return substitute_vars(fn, mapping, bindings=kept)


fold_constants = Pass("FoldConstants", _per_function(_fold_constants_fn))


# ---------------------------------------------------------------------------------------
# SimplifyAlgebra
# ---------------------------------------------------------------------------------------

_EXACT_KINDS = "fiub"     # float, signed, unsigned, bool (no complex: (a+bj)*(1+0j) is inexact)


def _all_equal(a: Any, value: float, *, negative_zero: bool | None = None) -> bool:
    """``a`` is a concrete Literal all of whose elements equal ``value`` (for a zero,
    ``negative_zero`` says which sign of zero it must be in a float dtype)."""
    v = _concrete(a)
    if v is None or v.dtype.kind not in _EXACT_KINDS:
        return False
    if not np.all(v == value):
        return False
    if negative_zero is not None and v.dtype.kind == "f":
        return bool(np.all(np.signbit(v) == negative_zero))
    return True


def _all_bits_set(a: Any) -> bool:
    """``a`` is a concrete bool or integer Literal of all-ones bit patterns (True, -1, max)."""
    v = _concrete(a)
    return v is not None and v.dtype.kind in "iub" and bool(np.all(np.invert(v) == 0))


def _producer(defs: dict, a: Any) -> Binding | None:
    """The primitive binding that defines ``a`` in this function, if any."""
    b = defs.get(a) if isinstance(a, Var) else None
    return b if b is not None and _rewritable(b) and len(b.outvars) == 1 else None


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
        if "dtype" in b.params and np.dtype(b.params["dtype"]) == args[0].type.dtype:
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
    env = _env(fn)
    results = {r for r in fn.results if isinstance(r, Var)}
    mapping: dict = {}
    defs: dict = {}
    kept: list = []
    kept_for_result: set = set()
    changed = False
    for b in fn.bindings:
        args = [resolve(mapping, a) for a in b.args]
        if _differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
        if _rewritable(b) and len(b.outvars) == 1:
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


simplify_algebra = Pass("SimplifyAlgebra", _per_function(_simplify_algebra_fn))


# ---------------------------------------------------------------------------------------
# CSE
# ---------------------------------------------------------------------------------------

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
        if _differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
        if _rewritable(b):
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


eliminate_common_subexpr = Pass("CSE", _per_function(_cse_fn))


# ---------------------------------------------------------------------------------------
# SimplifyShapes
# ---------------------------------------------------------------------------------------

def simplify_dim(d: Any, env: ShapeEnv) -> Any:
    """An equal, simpler form of the dim ``d``: expanded, with ``min``/``max`` arguments that
    the bounds prove redundant dropped, ``//``, ceil-division and ``%`` decided by bounds
    where they can be.  Bare symbols are never replaced (they are what binds a dim)."""
    if not is_symbolic(d):
        return d
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
    if isinstance(e, (sympy.Min, sympy.Max)):
        ge = ">=" if isinstance(e, sympy.Min) else "<="     # drop a when some kept b <= a (Min)
        keep: list = []
        for a in args:
            if any(env.try_prove(ge, a, k) is True for k in keep):
                continue
            keep = [k for k in keep if env.try_prove(ge, k, a) is not True]
            keep.append(a)
        return keep[0] if len(keep) == 1 else e.func(*keep)
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
    return e.func(*args)


def _simplify_shapes_fn(fn: Function) -> Function:
    env = _env(fn)
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
            return v if not _differs(list(new), list(v)) else new
        if isinstance(v, list):
            new = [value(x) for x in v]
            return v if not _differs(new, v) else new
        return dim(v) if is_symbolic(v) else v

    def ttype(t: TensorType) -> TensorType:
        shape = tuple(dim(d) for d in t.shape)
        return t if not _differs(list(shape), list(t.shape)) else TensorType(shape, t.dtype, t.weak)

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
        if _differs(args, b.args) or _differs(outvars, b.outvars) or new_params is not b.params:
            b = Binding(outvars, b.callee, args, dict(new_params), b.source)
        bindings.append(b)
    results = [lit(resolve(mapping, r)) for r in fn.results]
    return substitute_vars(fn, mapping, bindings=bindings, params=params, results=results)


simplify_shapes = Pass("SimplifyShapes", _per_function(_simplify_shapes_fn))


# ---------------------------------------------------------------------------------------
# Canonicalize
# ---------------------------------------------------------------------------------------

CANONICALIZE_ROUNDS = 4

# dead code elimination, with calls of sub-functions it shortened calling the new ones
_dce = Pass(dead_code_elimination.name, lambda m: _relink(m, dict(dead_code_elimination(m).functions)))


def _canonicalize(module: IRModule) -> IRModule:
    passes = [simplify_shapes, fold_constants, simplify_algebra, eliminate_common_subexpr, _dce]
    for _ in range(CANONICALIZE_ROUNDS):
        new = run_pipeline(module, passes, dump_input=False)
        if _same_module(new, module):
            return new
        module = new
    return module


def _same_module(a: IRModule, b: IRModule) -> bool:
    return a.entry == b.entry and a.functions.keys() == b.functions.keys() and \
        all(a.functions[k] is b.functions[k] for k in a.functions)


canonicalize = Pass("Canonicalize", _canonicalize)
