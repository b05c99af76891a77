"""Dead-code elimination: drop the bindings whose results nothing uses, keeping run-time
assertions and the bindings that define dims a kept binding still needs."""
from __future__ import annotations

import sympy

from ..ir import Binding, Function, IRModule, Literal, Var
from .passes import Pass

EFFECTFUL = {"match_cast", "check_int_power", "check_equal"}   # run-time assertions stay even when their result is unused


def _symbols_in(x) -> set:
    if isinstance(x, (tuple, list)):
        return set().union(*(_symbols_in(v) for v in x)) if x else set()
    if isinstance(x, dict):
        return _symbols_in(list(x.values()))
    if isinstance(x, Var):
        return set(x.type.free_symbols())
    if isinstance(x, Literal):
        return set(x.type.free_symbols()) | _symbols_in(x.value)
    if isinstance(x, sympy.Basic):
        return set(x.free_symbols)
    return set()


def dce_function(fn: Function) -> Function:
    """``fn`` without the bindings whose results nothing uses (see the module docstring)."""
    live: set = {r for r in fn.results if isinstance(r, Var)}
    live_dims: set = _symbols_in(list(fn.results))    # dims a kept binding still needs bound
    kept: list[Binding] = []
    for b in reversed(fn.bindings):
        defines_live_dim = any(v.type.free_symbols() & live_dims for v in b.outvars) \
            and getattr(b.callee, "kind", "") == "data_dependent"
        if b.callee.name in EFFECTFUL or defines_live_dim or any(v in live for v in b.outvars):
            kept.append(b)
            live.update(a for a in b.args if isinstance(a, Var))
            live_dims |= _symbols_in(b.args) | _symbols_in(b.params) | _symbols_in(b.outvars)
    kept.reverse()
    if len(kept) == len(fn.bindings):
        return fn
    return Function(fn.name, fn.params, fn.param_names, kept, fn.results, fn.bounds, fn.guards, fn.attrs)


def _dce(module: IRModule) -> IRModule:
    fns = {k: dce_function(f) if isinstance(f, Function) else f for k, f in module.functions.items()}
    return IRModule(fns, module.entry)


dead_code_elimination = Pass("DeadCodeElimination", _dce)
