"""User-facing calls of the cross-level IR that are neither NumPy's functions nor
primitives: ``call_library`` (an external function in destination-passing style, see
``relaxjax.library`` for the registry and the native ABI) and ``match_cast`` (a run-time
shape assertion that binds new dims).  Traced, each records one binding; on NumPy arrays
each runs at once."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import dtypes as dt
from . import lax
from .core import Tracer, current_trace, find_trace, user_source
from .errors import ShapeError
from .ir import Binding, TensorType, Var
from .library import LibraryFunc, LibraryImpl, contiguous, lookup
from .shapes import INF, as_dim, dim_str, free_symbols, is_symbolic, symbol
from .structs import ShapeDtypeStruct


def _out_structs(name: str, out) -> tuple[list, bool]:
    single = isinstance(out, ShapeDtypeStruct)
    structs = [out] if single else out
    if not isinstance(structs, (list, tuple)) or not all(isinstance(s, ShapeDtypeStruct) for s in structs):
        raise TypeError(f"call_library({name!r}): out= must be a ShapeDtypeStruct or a list of "
                        f"them, got {out!r}")
    return list(structs), single


def call_library(name: str, *args, out):
    """Call registered library function ``name`` on ``args`` in destination-passing style:
    ``out`` (a ``ShapeDtypeStruct`` or a list/tuple of them, whose shapes may use the
    inputs' symbolic dims) describes the outputs the function fills.  Returns one array for
    a single struct, else a list/tuple of arrays.  Inside ``@rj.jit`` this records a
    ``call_library`` binding; on NumPy arrays it runs the numpy (else cpu) implementation."""
    impl = lookup(name)
    structs, single = _out_structs(name, out)
    trace = find_trace(args)
    if trace is None and any(isinstance(d, str) or not isinstance(d, (int, np.integer))
                             for s in structs for d in s.shape):
        trace = current_trace()
    if trace is not None:
        outs = _emit(trace, impl, args, structs)
    else:
        outs = _eager(impl, args, structs)
    if single:
        return outs[0]
    return tuple(outs) if isinstance(out, tuple) else outs


def _emit(ctx, impl: LibraryImpl, args, structs) -> list:
    atoms = [ctx.atom(a) for a in args]
    in_types = [a.type.substitute(ctx.env.subst) for a in atoms]
    known = set(ctx.env.bounds)
    out_types = []
    for k, s in enumerate(structs):
        shape = []
        for d in s.shape:
            e = symbol(d) if isinstance(d, str) else as_dim(d, f"call_library({impl.name!r}) out dim")
            e = ctx.env.canon(e)
            unknown = free_symbols(e) - known if is_symbolic(e) else set()
            if unknown:
                raise ValueError(
                    f"call_library({impl.name!r}): out struct {k} has dim {dim_str(e)} using "
                    f"{', '.join(sorted(x.name for x in unknown))}, which no input binds; build "
                    f"out shapes from the inputs' shapes (x.shape[0], ...)")
            if isinstance(e, int) and e < 0:
                raise ValueError(f"call_library({impl.name!r}): negative dim {e} in out struct {k}")
            shape.append(e)
        out_types.append(TensorType(tuple(shape), np.dtype(s.dtype)))
    impl.check_call(in_types, out_types)
    outvars = [Var(t) for t in out_types]
    ctx.bindings.append(Binding(outvars, LibraryFunc(impl.name), atoms, {}, user_source()))
    return [Tracer(ctx, v) for v in outvars]


def _eager(impl: LibraryImpl, args, structs) -> list:
    inputs = []
    for a in args:
        a = contiguous(a)
        dt.canonical(a.dtype)
        inputs.append(a)
    outs = []
    for k, s in enumerate(structs):
        shape = []
        for d in s.shape:
            if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
                raise TypeError(f"call_library({impl.name!r}) on NumPy arrays: out struct {k} "
                                f"needs non-negative int dims, got {d!r}")
            shape.append(int(d))
        outs.append(np.empty(tuple(shape), s.dtype))
    impl.check_call([TensorType(a.shape, a.dtype) for a in inputs],
                    [TensorType(o.shape, o.dtype) for o in outs])
    impl.run_numpy(inputs, outs)
    return outs


def match_cast(x, shape: Sequence):
    """Assert that ``x`` has ``shape`` (ints, dims, or names of new dims bound at run time)."""
    if not isinstance(x, Tracer):
        x = np.asarray(x)
        dt.canonical(x.dtype)
    ctx = current_trace()
    dims = []
    for d in shape:
        if isinstance(d, str):
            s = symbol(d)
            if ctx is not None and s not in ctx.env.bounds:
                ctx.env.declare(s, 0, INF)
                ctx.env.data_dependent.add(s)
            dims.append(s)
        else:
            dims.append(as_dim(d, "match_cast dim"))
    if not isinstance(x, Tracer):          # eager: check what is concrete
        if len(dims) != np.ndim(x):
            raise ShapeError(f"match_cast: array of rank {np.ndim(x)} cannot match a shape of rank {len(dims)}")
        for i, (have, want) in enumerate(zip(np.shape(x), dims)):
            if isinstance(want, int) and have != want:
                raise ShapeError(f"match_cast axis {i}: array has {have}, expected {want}")
        return x
    return lax.match_cast.bind(x, shape=tuple(dims))
