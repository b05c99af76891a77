"""Jitted functions on Dask arrays: what Dask's own API does not do for them.

``import relaxjax.dask as rjd`` (``relaxjax`` itself never imports Dask).  A ``@rj.jit``
function already works as ``da.map_blocks(f, x)``'s chunk function: it pickles as its
function and options, a worker unpickles every task's copy as one Jitted (so it compiles once
per process), and one compiled artifact serves every chunk shape of a ragged grid.  This
module adds:

- :func:`chunk_function`: a jitted function as Dask should call it on chunks: its kernels on
  one thread each (below), Dask's zero-size ``meta`` probe answered by tracing alone;
- :func:`map_overlap`: a stencil on halo-extended chunks (Dask's ``overlap`` semantics, two
  tasks per chunk: ``dask_halo.py``).
  Every chunk, halo included, has its own shape (edge chunks, ragged grids, a boundary of
  ``"none"``), and the jitted function compiles once for all of them.  The function may
  return the block it was given (``result="extended"``, the halo is trimmed) or only its
  interior (``result="interior"``, the natural shape of ``u[1:-1] + u[2:] + ...``), which
  Dask's ``map_overlap`` cannot take without being told every output chunk;
- :func:`reduction`: ``da.reduction`` with jitted chunk, combine and aggregate steps, their
  results' dtype and shapes checked by tracing before anything runs;
- :func:`compile_counts`: how many times each worker process compiled each function (or this
  process, for the threaded scheduler), read through ``client.run``.

How the cores are shared.  A kernel's parallel loop runs on an OpenMP team (by default one
thread per core).  Dask gets its parallelism from running chunks at once: the threaded
scheduler runs one chunk per thread (generated code runs without the GIL), a
``distributed`` worker ``threads_per_worker`` chunks.  Both at once oversubscribe the
machine (2 chunks x a team of 2 on 2 cores: 4 threads spinning for 2 cores), so the functions
these helpers run keep each kernel on one thread while Dask runs it (``kernel_threads=1``,
through :func:`kernel_threads`): Dask's threads and processes are the parallelism, one chunk
per core.  The team size is a process-wide setting: while any such task runs, every kernel
of the process runs on one thread, and the setting from before is restored when the last one
ends.  Give ``kernel_threads=None`` to leave the team alone (one big chunk at a time on a
machine of many cores).  ``distributed``'s nannies also start workers with
``OMP_NUM_THREADS=1`` (its ``distributed.nanny.pre-spawn-environ``), which makes one thread
the default team in worker processes; matrix products inside a kernel call OpenBLAS, whose
thread count is OpenBLAS's own (``OPENBLAS_NUM_THREADS``, 1 in workers as well).
"""
from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from numbers import Integral, Number
from typing import Any, Callable, Iterator, Literal

import numpy as np
import optree

import dask.array as da
from dask.array.overlap import coerce_boundary, coerce_depth

from .backends.llvm import engine
from .dask_halo import extended_chunks, map_halo, rechunked
from .jit import Jitted, jit, pickle_token, unpickled
from .structs import ShapeDtypeStruct

__all__ = ["ChunkFunction", "chunk_function", "compile_counts", "kernel_threads", "map_overlap",
           "reduction"]

_BOUNDARY_KINDS = ("reflect", "periodic", "nearest", "none")

# -- one thread per kernel while Dask runs chunks ------------------------------------------
_TEAM_LOCK = threading.Lock()
_team_users = 0            # open ``kernel_threads`` blocks, in every thread of the process
_team_saved = 0            # the team size from before the first of them


@contextlib.contextmanager
def kernel_threads(n: int = 1) -> Iterator[None]:
    """Within the block, every kernel of the process runs on a team of ``n`` threads (1: on
    its calling thread).  Blocks may be open in several threads at once (Dask's tasks): the
    first to open sets the team, the last to close restores what it was before; a block
    opened while another is open keeps the team that one set."""
    global _team_users, _team_saved
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise ValueError(f"kernel_threads: n must be an int >= 1, got {n!r}")
    with _TEAM_LOCK:
        if _team_users == 0:
            _team_saved = engine.get_num_threads()
            engine.set_num_threads(int(n))
        _team_users += 1
    try:
        yield
    finally:
        with _TEAM_LOCK:
            _team_users -= 1
            if _team_users == 0:
                engine.set_num_threads(_team_saved)


# -- jitted functions as Dask's chunk functions -------------------------------------------
# Plain functions these helpers jitted, so a function given again (each step of a time loop)
# is the same Jitted, compiled once per process, and ``compile_counts`` finds it: function ->
# {static_argnums: Jitted}, least recently used first.  Strong references (a Jitted holds its
# function, so a weak-keyed map would never let go either), bounded by MAX_JITTED.
MAX_JITTED = 256
_JITTED: "OrderedDict[Callable, dict]" = OrderedDict()
_JITTED_LOCK = threading.Lock()


def _as_jitted(fn: Any, argname: str, static_argnums: tuple = ()) -> Jitted:
    """``fn`` as a Jitted with these static arguments: a Jitted as it is (its static
    arguments checked), a ChunkFunction's, or a plain function jitted once."""
    if isinstance(fn, ChunkFunction):
        fn = fn.jitted
    if isinstance(fn, Jitted):
        missing = [i for i in static_argnums if i not in fn.static_argnums]
        if missing:
            raise TypeError(f"{argname}: this jitted function must take argument {missing[0]} "
                            f"(the reduced axes, a tuple) as static: "
                            f"rj.jit(fn, static_argnums={static_argnums!r})")
        return fn
    if not callable(fn):
        raise TypeError(f"{argname}: expected a function or an rj.jit function, got {fn!r} "
                        f"of type {type(fn).__name__}")
    try:
        hash(fn)
    except TypeError:                       # not hashable: jitted each time
        return jit(fn, static_argnums=static_argnums)
    with _JITTED_LOCK:
        per_options = _JITTED.setdefault(fn, {})
        _JITTED.move_to_end(fn)
        if static_argnums not in per_options:
            per_options[static_argnums] = jit(fn, static_argnums=static_argnums)
        while len(_JITTED) > MAX_JITTED:
            _JITTED.popitem(last=False)
        return per_options[static_argnums]


def _jitted_of_plain(fn: Callable) -> list[Jitted]:
    """The Jitteds these helpers made of the plain function ``fn`` (none: an empty list)."""
    try:
        with _JITTED_LOCK:
            return list(_JITTED.get(fn, {}).values())
    except TypeError:                       # not hashable
        return []


def _check_kernel_threads(n: int | None, argname: str = "kernel_threads") -> None:
    if n is not None and (isinstance(n, bool) or not isinstance(n, Integral) or n < 1):
        raise ValueError(f"{argname}: expected None or an int >= 1, got {n!r}")


class ChunkFunction:
    """A jitted function as Dask calls it on chunks (see :func:`chunk_function`); pickles as
    its Jitted (one per worker process), thread setting and extra arguments."""

    def __init__(self, jitted: Jitted, kernel_threads: int | None = 1, extra_args: tuple = ()):
        self.jitted = jitted
        self.kernel_threads = kernel_threads
        self.extra_args = tuple(extra_args)
        self.__name__ = jitted.__name__
        self.__qualname__ = getattr(jitted, "__qualname__", jitted.__name__)

    def __call__(self, *blocks, computing_meta: bool = False, **kwargs):
        args = (*blocks, *self.extra_args)
        if computing_meta:                  # Dask's probe of the result type: traced only
            return _meta_of(self.jitted, args, kwargs)
        if self.kernel_threads is None:
            return self.jitted(*args, **kwargs)
        with kernel_threads(self.kernel_threads):
            return self.jitted(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<relaxjax.dask chunk function {self.__qualname__}, kernel_threads={self.kernel_threads}>"


def chunk_function(f: Callable, *, kernel_threads: int | None = 1,
                   extra_args: tuple = ()) -> ChunkFunction:
    """``f`` (an ``rj.jit`` function, or a plain one, jitted once) as a chunk function for
    ``da.map_blocks``/``da.blockwise``: ``g(*blocks)`` is ``f(*blocks, *extra_args)`` with
    each kernel on ``kernel_threads`` threads while it runs (None: the team as it is set;
    see the module's docstring), and Dask's ``meta`` probe (``computing_meta=True``)
    answered with empty arrays by tracing, nothing compiled.  Give ``map_blocks`` the
    ``dtype``: without it Dask also calls the function on arrays of one element to find it,
    which compiles (one compile still serves every chunk after)."""
    _check_kernel_threads(kernel_threads)
    if not isinstance(extra_args, tuple):
        raise TypeError(f"chunk_function: extra_args must be a tuple, got {type(extra_args).__name__}")
    return ChunkFunction(_as_jitted(f, "f"), kernel_threads, extra_args)


def _meta_of(f: Jitted, args: tuple, kwargs: dict):
    """Empty arrays of the types ``f``'s results have for these arguments, by tracing."""
    out = f.eval_shape(*args, **kwargs)
    return optree.tree_map(lambda s: np.empty((0,) * len(s.shape), s.dtype)
                           if isinstance(s, ShapeDtypeStruct) else s, out, none_is_leaf=False)


def _one_result(f: Jitted, argname: str, *args) -> ShapeDtypeStruct:
    """The struct of ``f``'s one array result for these arguments (traced, not compiled)."""
    out = f.eval_shape(*args)
    if not isinstance(out, ShapeDtypeStruct):
        raise TypeError(f"{argname}: must return one array, got {out!r} for arguments {args!r}")
    return out


def _dask_array(x: Any, argname: str = "x") -> "da.Array":
    if not isinstance(x, da.Array):
        raise TypeError(f"{argname}: expected a dask.array.Array, got {type(x).__name__} "
                        f"(wrap NumPy arrays with dask.array.from_array(x, chunks=...))")
    if any(np.isnan(c) for cs in x.chunks for c in cs):
        raise ValueError(f"{argname}: its chunk sizes are unknown (NaN); call "
                         f"{argname}.compute_chunk_sizes() first")
    return x


# -- stencils on halo-extended chunks -----------------------------------------------------
def _halo(x: "da.Array", depth: Any, boundary: Any) -> tuple[dict, dict]:
    """``depth`` and ``boundary`` per axis, as Dask takes them, checked."""
    if isinstance(depth, dict) and any(not isinstance(k, Integral) or not 0 <= k < x.ndim for k in depth):
        raise ValueError(f"depth: axes must be in [0, {x.ndim}), got {sorted(depth)}")
    if isinstance(depth, tuple) and len(depth) != x.ndim:
        raise ValueError(f"depth: one per axis of x ({x.ndim}), got {len(depth)}: {depth!r}")
    if not isinstance(depth, (Integral, tuple, dict)) or isinstance(depth, bool):
        raise TypeError(f"depth: expected an int, a tuple per axis or a dict {{axis: depth}}, got {depth!r}")
    depth2 = coerce_depth(x.ndim, depth)
    if isinstance(boundary, dict) and any(not isinstance(k, Integral) or not 0 <= k < x.ndim for k in boundary):
        raise ValueError(f"boundary: axes must be in [0, {x.ndim}), got {sorted(boundary)}")
    boundary2 = coerce_boundary(x.ndim, boundary)
    for ax in range(x.ndim):
        d, b = depth2[ax], boundary2[ax]
        sides = d if isinstance(d, tuple) else (d, d)
        if len(sides) != 2 or min(sides) < 0:
            raise ValueError(f"depth: axis {ax} needs a size >= 0 or (before, after), got {d!r}")
        if not (isinstance(b, Number) and not isinstance(b, bool)) and b not in _BOUNDARY_KINDS:
            raise ValueError(f"boundary: axis {ax} takes one of {_BOUNDARY_KINDS} or a number, got {b!r}")
        if isinstance(d, tuple) and b != "none" and sides[0] != sides[1]:
            raise ValueError(f"depth: axis {ax} has different halos before and after, {d!r}, "
                             f"which only boundary 'none' takes (it has {b!r})")
    return depth2, boundary2


def map_overlap(f: Callable, x: "da.Array", depth: int | tuple | dict,
                boundary: str | float | tuple | dict = "reflect", *,
                result: Literal["interior", "extended"] = "interior", extra_args: tuple = (),
                kernel_threads: int | None = 1, allow_rechunk: bool = True) -> "da.Array":
    """A stencil on every chunk of ``x``, each extended by ``depth`` neighbouring elements
    per axis (Dask's ``overlap``): ``f(block, *extra_args)``, with ``f`` jitted once for
    every block shape (halos and edge chunks included).

    ``depth``: an int (every axis), a tuple per axis or a dict ``{axis: depth}``; with
    ``boundary="none"`` an axis may take ``(before, after)``.  ``boundary``: what lies
    beyond the array's edges: "reflect", "periodic", "nearest", a number (that constant), or
    "none" (nothing: the edge chunks are extended only inwards), one for all axes or per axis.

    ``result``: "interior" (default): ``f`` returns the block without its halo, each axis
    ``before + after`` shorter than its argument (``u[1:-1] + ...``); with boundary "none"
    the result is then the stencil's valid region, the array less its outer halo.
    "extended": ``f`` returns an array of its argument's shape, and the halo is trimmed.

    ``kernel_threads``: threads per kernel while Dask runs the chunks (module docstring).
    The result's dtype and the shape ``f`` returns are checked by tracing ``f`` on the first
    block before anything runs."""
    f_jit = _as_jitted(f, "f")
    x = _dask_array(x)
    if result not in ("interior", "extended"):
        raise ValueError(f"result: 'interior' or 'extended', got {result!r}")
    if not isinstance(extra_args, tuple):
        raise TypeError(f"extra_args: must be a tuple, got {type(extra_args).__name__}")
    _check_kernel_threads(kernel_threads)
    depth2, boundary2 = _halo(x, depth, boundary)
    run = ChunkFunction(f_jit, kernel_threads, extra_args)
    sides = [d if isinstance(d, tuple) else (d, d) for d in (depth2[ax] for ax in range(x.ndim))]
    kinds = tuple(boundary2.get(ax, "none") for ax in range(x.ndim))
    x = rechunked(x, sides, allow_rechunk)
    extended = extended_chunks(x, sides, kinds)
    chunks = tuple(tuple(n - lo - hi for n in cs) for cs, (lo, hi) in zip(extended, sides))
    if result == "interior":
        for ax, cs in enumerate(chunks):
            if min(cs) < 0:
                raise ValueError(f"depth: axis {ax}'s chunks {x.chunks[ax]} are too short for a "
                                 f"halo of {sides[ax]} with boundary {kinds[ax]!r} (a chunk "
                                 f"would give {min(cs)} elements)")
    first = tuple(c[0] for c in extended)
    out = _one_result(f_jit, "f", ShapeDtypeStruct(first, x.dtype), *extra_args)
    want = first if result == "extended" else tuple(c[0] for c in chunks)
    if out.shape != want:
        raise ValueError(f"f: with result={result!r} a block of shape {first} (halo included) "
                         f"must give shape {want}, got {out.shape}")
    meta = np.empty((0,) * x.ndim, out.dtype)
    return map_halo(run, x, sides, kinds, trim=result == "extended",
                    chunks=x.chunks if result == "extended" else chunks, meta=meta,
                    name=f"{f_jit.__name__}-halo")


# -- reductions --------------------------------------------------------------------------
class _ReduceStep(ChunkFunction):
    """One step of :func:`reduction` as ``da.reduction`` calls it: ``(block, axis=...,
    keepdims=...)``, the jitted ``fn(block, axis)`` keeping the reduced axes, then squeezed
    when ``keepdims`` is False."""

    def __call__(self, block, axis=None, keepdims: bool = True, computing_meta: bool = False):
        axis = tuple(axis)
        if computing_meta:
            out = _meta_of(self.jitted, (block, axis), {})
        elif self.kernel_threads is None:
            out = self.jitted(block, axis)
        else:
            with kernel_threads(self.kernel_threads):
                out = self.jitted(block, axis)
        return out if keepdims else np.squeeze(out, axis=axis)


def _normalize_axis(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, Integral) and not isinstance(axis, bool) else axis
    if not isinstance(axes, (tuple, list)) or not all(
            isinstance(a, Integral) and not isinstance(a, bool) for a in axes):
        raise TypeError(f"axis: expected None, an int or a tuple of ints, got {axis!r}")
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis: {a} is out of range for an array of {ndim} dims")
        if a % ndim in out:
            raise ValueError(f"axis: {a} is given twice in {axis!r}")
        out.append(int(a) % ndim)
    return tuple(sorted(out))


def reduction(chunk_fn: Callable, combine_fn: Callable, x: "da.Array", axis: int | tuple | None = None, *,
              aggregate_fn: Callable | None = None, keepdims: bool = False,
              split_every: int | dict | None = None, kernel_threads: int | None = 1) -> "da.Array":
    """``da.reduction`` of ``x`` over ``axis`` (None: all) with jitted steps, each called as
    ``fn(block, axis)``, ``axis`` the tuple of reduced axes (a static argument: pass plain
    functions, or ``rj.jit(fn, static_argnums=1)``), and each keeping the reduced axes at
    length 1 (``keepdims=True`` style):

    - ``chunk_fn`` reduces one chunk of ``x``;
    - ``combine_fn`` reduces chunk results concatenated along the reduced axes (a tree of
      them, ``split_every`` at a time);
    - ``aggregate_fn`` (default ``combine_fn``) the last such concatenation, into the result.

    ``keepdims``: whether the result keeps the reduced axes.  The dtype and the shapes the
    steps return are checked by tracing them on the first chunk before anything runs."""
    x = _dask_array(x)
    axes = _normalize_axis(axis, x.ndim)
    if not isinstance(keepdims, (bool, np.bool_)):
        raise TypeError(f"keepdims: expected a bool, got {keepdims!r}")
    _check_kernel_threads(kernel_threads)
    if split_every is not None and not isinstance(split_every, (Integral, dict)):
        raise TypeError(f"split_every: expected None, an int or a dict, got {split_every!r}")
    steps = {"chunk_fn": _as_jitted(chunk_fn, "chunk_fn", static_argnums=(1,)),
             "combine_fn": _as_jitted(combine_fn, "combine_fn", static_argnums=(1,))}
    steps["aggregate_fn"] = steps["combine_fn"] if aggregate_fn is None else \
        _as_jitted(aggregate_fn, "aggregate_fn", static_argnums=(1,))
    # trace each step on the first chunk's shapes: reduced axes must come back at length 1
    block = ShapeDtypeStruct(tuple(c[0] for c in x.chunks), x.dtype)
    kept = tuple(1 if ax in axes else n for ax, n in enumerate(block.shape))
    part = _one_result(steps["chunk_fn"], "chunk_fn", block, axes)
    if part.shape != kept:
        raise ValueError(f"chunk_fn: a chunk of shape {block.shape} reduced over axes {axes} "
                         f"must give shape {kept} (the reduced axes kept at length 1), got {part.shape}")
    two = ShapeDtypeStruct(tuple(2 if ax in axes else n for ax, n in enumerate(kept)), part.dtype)
    done = {}
    for name in ("combine_fn", "aggregate_fn"):
        done[name] = _one_result(steps[name], name, two, axes)
        if done[name].shape != kept:
            raise ValueError(f"{name}: two chunk results concatenated, shape {two.shape}, reduced "
                             f"over axes {axes} must give shape {kept}, got {done[name].shape}")
    if done["combine_fn"].dtype != part.dtype:    # its results are combined again
        raise TypeError(f"combine_fn: must keep the dtype of chunk_fn's results, {part.dtype}; "
                        f"it gives {done['combine_fn'].dtype}")
    dtype = done["aggregate_fn"].dtype
    ndim_out = x.ndim if keepdims else x.ndim - len(axes)
    wrap = lambda name: _ReduceStep(steps[name], kernel_threads)  # noqa: E731
    return da.reduction(x, wrap("chunk_fn"), wrap("aggregate_fn"), axis=axes, keepdims=bool(keepdims),
                        dtype=dtype, split_every=split_every, combine=wrap("combine_fn"),
                        concatenate=True, meta=np.empty((0,) * ndim_out, dtype))


# -- compile statistics ------------------------------------------------------------------
def _tokens_of(fn: Any, argname: str) -> list[str]:
    """The pickle tokens (``jit.pickle_token``) of the Jitted(s) ``fn`` stands for."""
    if isinstance(fn, ChunkFunction):
        fn = fn.jitted
    if isinstance(fn, Jitted):
        return [pickle_token(fn)]
    if callable(fn):
        jitted = _jitted_of_plain(fn)
        if jitted:
            return [pickle_token(j) for j in jitted]
        raise TypeError(f"{argname}: {fn!r} is a plain function that no relaxjax.dask helper has "
                        f"jitted; pass the rj.jit function the tasks ran")
    raise TypeError(f"{argname}: expected an rj.jit function, got {type(fn).__name__}")


def _compiles_here(tokens: dict) -> dict:
    """In a worker (``client.run``): compiles of the Jitteds this process unpickled, per
    label, summed over each label's tokens (0 for one never unpickled here)."""
    out = {}
    for label, toks in tokens.items():
        found = [unpickled(t) for t in toks]
        out[label] = sum(j.cache_info().compiles for j in found if j is not None)
    return out


def compile_counts(client: Any, *fns: Callable) -> dict[str, dict[str, int]]:
    """How many times each process that ran tasks compiled each of ``fns`` (``rj.jit``
    functions, :class:`ChunkFunction` s, or plain functions the helpers here jitted):
    ``{worker address: {function name: compiles}}``, read on every worker with
    ``client.run`` (a ``distributed.Client``).  A function is found on a worker by the token
    its pickles carry, so what counts is the copy the worker unpickled from this one.

    ``client=None`` (the threaded or synchronous scheduler, which run tasks in this
    process, on the functions themselves): ``{"local": {name: compiles}}``.  Names are the
    functions' qualified names, with ``#k`` (their position) added where two are alike."""
    if not fns:
        raise TypeError("compile_counts: pass the functions to count (fns), after the client")
    labels = []
    for k, fn in enumerate(fns):
        inner = fn.jitted if isinstance(fn, ChunkFunction) else fn
        labels.append(getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None)
                      or type(inner).__name__)
    labels = [f"{lab}#{k}" if labels.count(lab) > 1 else lab for k, lab in enumerate(labels)]
    if client is None:
        local = {}
        for k, (label, fn) in enumerate(zip(labels, fns)):
            _tokens_of(fn, f"fns[{k}]")                  # the same checks
            inner = fn.jitted if isinstance(fn, ChunkFunction) else fn
            jitted = [inner] if isinstance(inner, Jitted) else _jitted_of_plain(inner)
            local[label] = sum(j.cache_info().compiles for j in jitted)
        return {"local": local}
    if not callable(getattr(client, "run", None)):
        raise TypeError(f"client: expected a distributed.Client (or None for this process), "
                        f"got {type(client).__name__}")
    tokens = {label: _tokens_of(fn, f"fns[{k}]") for k, (label, fn) in enumerate(zip(labels, fns))}
    return client.run(_compiles_here, tokens)
