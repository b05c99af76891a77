"""Passes (``IRModule -> IRModule`` with a name) and the pipeline runner.

``RELAXJAX_DUMP_IR=1`` prints the IR after every pass to stderr; any other value is a file
path the IR is appended to.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import sympy

from ..ir import Binding, Function, IRModule, Literal, Var
from .verify import verify


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[IRModule], IRModule]

    def __call__(self, module: IRModule) -> IRModule:
        return self.run(module)

    def __repr__(self) -> str:
        return f"Pass({self.name})"


def _dump(stage: str, module: IRModule) -> None:
    target = os.environ.get("RELAXJAX_DUMP_IR")
    if not target or target == "0":
        return
    text = f"# ---- IR after {stage} ----\n{module}\n"
    if target == "1":
        sys.stderr.write(text)
    else:
        with open(target, "a") as f:
            f.write(text)


def run_pipeline(module: IRModule, passes: Sequence[Pass], *, check: bool | None = None,
                 dump_input: bool = True) -> IRModule:
    """Run ``passes`` in order; verify after each when ``check`` (or RELAXJAX_VERIFY=1)."""
    if check is None:
        check = os.environ.get("RELAXJAX_VERIFY", "0") not in ("", "0")
    if dump_input:
        _dump("tracing", module)
    for p in passes:
        module = p(module)
        _dump(p.name, module)
        if check:
            verify(module)
    return module


EFFECTFUL = {"match_cast"}   # run-time assertions stay even when their result is unused


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


def _dce_function(fn: Function) -> Function:
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
    fns = {k: _dce_function(f) if isinstance(f, Function) else f for k, f in module.functions.items()}
    return IRModule(fns, module.entry)


dead_code_elimination = Pass("DeadCodeElimination", _dce)
