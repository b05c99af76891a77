"""Tracing one call of a jitted function: its array leaves become tracers with symbolic
(automatic mode) or declared (explicit shapes) dims, the function runs on them, and the
bindings recorded become a verified graph module with the binder that matches later calls."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import optree

from .compile.verify import verify
from .core import TraceContext, Tracer
from .errors import ShapeError
from .ir import IRModule
from .jit_args import PY_SCALARS, CallArgs, identifier
from .numpy._creation_hook import creation_functions_traced
from .shapes import ShapeEnv, SymbolicDim, bounds_str
from .signature import Binder, make_binder


@dataclass
class Traced:
    module: IRModule
    binder: Binder
    out_tree: Any
    out_kinds: list          # per output leaf: ("value", i) | ("dim", i) | ("const", v)
    trace_seconds: float


def trace_call(fun: Callable, fname: str, call: CallArgs) -> Traced:
    """Trace ``fun`` on tracers standing for ``call``'s array leaves: the verified graph
    module, the binder that checks later calls' shapes against it, and where each output
    leaf comes from."""
    t0 = time.perf_counter()
    env = ShapeEnv("auto" if call.any_auto else "explicit")
    ctx = TraceContext(env)
    params, names, leaf_names = [], [], []
    _declare_struct_bounds(env, call)
    # automatic dim names (x0, y1, ...) avoid every name the explicit structs declare, even
    # of a later argument: a struct's dim "y0" must not tie itself to argument y's axis 0
    taken: set = {sym.name for leaf in call.leaves if leaf.struct is not None
                  for sym in leaf.struct.bounds()}
    for leaf in call.leaves:
        t = leaf.struct_type(env, taken)
        tr = ctx.new_param(t, leaf.ident)
        params.append(tr)
        names.append(_unique(leaf.ident, names))
        leaf_names.append(leaf.display)
    param_vars = [p.atom for p in params]     # before the function rebinds any (x[i] = v)
    with ctx, creation_functions_traced():
        args, kwargs = call.rebuild(params)
        out = fun(*args, **kwargs)
        out_leaves, out_tree = optree.tree_flatten(out, none_is_leaf=False)
        results, kinds = [], []
        for o in out_leaves:
            if isinstance(o, Tracer):
                kinds.append(("value", len(results)))
                results.append(ctx.atom(o))
            elif isinstance(o, SymbolicDim):
                kinds.append(("dim", len(results)))
                results.append(ctx.atom(o))
            elif isinstance(o, (np.ndarray, np.generic)):
                kinds.append(("value", len(results)))
                results.append(ctx.atom(o))
            elif isinstance(o, PY_SCALARS) or o is None:
                kinds.append(("const", o))
            else:
                raise TypeError(f"{fname} returned a {type(o).__name__}; return arrays, "
                                f"scalars, dims or pytrees of them")
    fn = ctx.finalize(identifier(fname), param_vars, names, results)
    if ctx.ragged:
        fn.attrs["ragged"] = dict(ctx.ragged)
    donated = tuple(k for k, leaf in enumerate(call.leaves) if leaf.arg in call.jitted.donated)
    if donated:               # parameters whose arrays may hold results (``jit``'s donation)
        fn.attrs["donated"] = donated
    _check_dims_bound(fn, fname)
    module = IRModule({fn.name: fn}, fn.name)
    # the trace recorded each result type from its primitive's rule just now: running the
    # rules again (a third of a warm decode step's first call) is for RELAXJAX_VERIFY=1
    verify(module, rules=os.environ.get("RELAXJAX_VERIFY", "0") not in ("", "0"))
    trace_seconds = time.perf_counter() - t0
    binder = make_binder([p.type.shape for p in fn.params], leaf_names, fn.bounds, fn.guards,
                         fname)
    return Traced(module, binder, out_tree, kinds, trace_seconds)


def _declare_struct_bounds(env: ShapeEnv, call: CallArgs) -> None:
    """Declare the bounds of the structs' ``rj.dim``s before any leaf's type is made (a dim
    named by a plain string takes them); one name with two different bounds is an error
    naming both, not the first one winning."""
    seen: dict = {}
    for leaf in call.leaves:
        for d in (leaf.struct.shape if leaf.struct is not None else ()):
            for sym, b in (d.bounds.items() if isinstance(d, SymbolicDim) else ()):
                if sym in seen and seen[sym][0] != b:
                    raise ValueError(f"dim {sym.name} declared with two different bounds: "
                                     f"{bounds_str(seen[sym][0])} (argument {seen[sym][1]}) and "
                                     f"{bounds_str(b)} (argument {leaf.display})")
                if sym not in seen:
                    seen[sym] = (b, leaf.display)
                    env.declare(sym, *b)


def _check_dims_bound(fn, fname: str) -> None:
    """Every dim a value's shape uses must come from the arguments' shapes (or be bound at
    run time by a data-dependent op): a shape built from a free ``rj.dim`` has no size."""
    bound = set()
    for p in fn.params:
        bound |= p.type.free_symbols()
    for b in fn.bindings:
        for v in b.outvars:
            new = v.type.free_symbols() - bound
            if new and getattr(b.callee, "kind", "") != "data_dependent":
                names = ", ".join(sorted(s.name for s in new))
                raise ShapeError(f"{fname}: {b.callee.name} at {b.source or '?'} gives shape "
                                 f"{v.type} with dim {names} that no argument's shape binds; build "
                                 f"shapes from the arguments (x.shape[0]) or declare the dim in shapes=")
            bound |= new


def _unique(name: str, taken: list) -> str:
    if name not in taken:
        return name
    i = 1
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"
