"""What the simplification passes share: renaming values, running a function pass over
a module, the shape environment of a function, and when a binding may be rewritten."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import sympy

from ...ir import Binding, Function, IRModule, Literal, Var
from ...shapes import INF, ShapeEnv, is_symbolic
from ..dce import EFFECTFUL


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
    changed = differs(src, fn.bindings) or differs(new_params, fn.params) or \
        differs(src_results, fn.results)
    out = []
    for b in src:
        args = [resolve(mapping, a) for a in b.args] if mapping else list(b.args)
        if differs(args, b.args):
            b = Binding(list(b.outvars), b.callee, args, dict(b.params), b.source)
            changed = True
        out.append(b)
    rmap = mapping if result_mapping is None else result_mapping
    new_results = [resolve(rmap, r) for r in src_results] if rmap else list(src_results)
    changed = changed or differs(new_results, fn.results)
    if not changed:
        return fn
    return Function(fn.name, list(new_params), list(fn.param_names), out, new_results,
                    fn.bounds, fn.guards, fn.attrs)


def differs(a: list, b: list) -> bool:
    return len(a) != len(b) or any(x is not y for x, y in zip(a, b))


def per_function(fn_pass: Callable[[Function], Function]) -> Callable[[IRModule], IRModule]:
    """An ``IRModule -> IRModule`` pass applying ``fn_pass`` to every graph Function."""
    def run(module: IRModule) -> IRModule:
        fns = {name: fn_pass(f) if isinstance(f, Function) else f
               for name, f in module.functions.items()}
        return relink(module, fns)
    return run


def relink(old: IRModule, fns: dict) -> IRModule:
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


def function_env(fn: Function) -> ShapeEnv:
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


def has_symbolic(v: Any) -> bool:
    if isinstance(v, (tuple, list)):
        return any(has_symbolic(x) for x in v)
    if isinstance(v, dict):
        return has_symbolic(list(v.values()))
    return isinstance(v, sympy.Basic)


def rewritable(b: Binding) -> bool:
    """A pure primitive call: no run-time shape binding, no assertion, no side effect."""
    return (b.kind == "primitive" and getattr(b.callee, "kind", "") != "data_dependent"
            and b.callee.name not in EFFECTFUL and not getattr(b.callee, "effectful", False))


def concrete(a: Any) -> np.ndarray | None:
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
