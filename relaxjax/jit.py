"""``jit``: trace once per symbolic signature, cache, bind dims per call, run on a backend.

The driver: ``jit_args`` splits a call's arguments, ``jit_trace`` traces one, the pass
pipeline lowers it and a backend compiles it (both through ``jit_cache``'s persistent
cache: a warm start loads the executable), and
``Jitted`` keeps the entries and dispatches calls to them."""
from __future__ import annotations

import functools
import inspect
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import optree

from .backends import get_backend
from .compile.legalize import legalize, unlowered
from .compile.passes import Pass, run_pipeline
from .compile.pipeline import default_pipeline
from .compile.split_complex import has_complex, split_complex
from . import dtypes as dt
from .errors import ShapeError
from .growing import GrowingCaches
from .ir import IRModule, Literal
from .jit_args import CallArgs, check_static, on_device, spec_list
from .jit_cache import build_cached
from .jit_trace import trace_call
from .shapes import eval_dim
from .signature import Binder
from .structs import ShapeDtypeStruct
from .core import current_trace, find_trace


# Entries a function keeps that each accept exactly one set of argument shapes (every dim
# concrete, e.g. after ``int(x.shape[0])``); past it the least recently used one goes
MAX_EXACT_ENTRIES = 256


def _exact(entry: "_Entry", shapes) -> bool:
    """Whether ``entry`` accepts only ``shapes``: no dim to bind and every axis checked."""
    b = entry.binder
    if b.names:
        return False
    checked = {(st.leaf, st.axis) for st in b.steps if st.kind == "check"}
    return checked == {(k, ax) for k, s in enumerate(shapes) for ax in range(len(s))}


@dataclass
class CacheInfo:
    hits: int
    misses: int
    compiles: int
    entries: int


@dataclass(eq=False)
class _Entry:
    module: IRModule
    executable: Callable
    binder: Binder
    out_tree: Any
    out_kinds: list          # per output leaf: ("value", i) | ("dim", i) | ("const", v)
    trace_seconds: float

    def __post_init__(self):
        self._names = tuple(self.binder.names)
        self._values_only = all(k == "value" for k, _ in self.out_kinds)
        self._single = self._values_only and self.out_tree.num_leaves == 1 and \
            optree.treespec_is_leaf(self.out_tree)
        self._guard = _alias_guard(self.module)
        attrs = self.module.main.attrs
        self._complex_in = attrs.get("complex_params", ())
        self._complex_out = attrs.get("complex_results", ())
        self._growing = GrowingCaches(attrs["growing"]) if attrs.get("growing") else None

    def run(self, dims: tuple, arrays):
        """Run with the arguments' arrays, whose shapes the binder accepted as ``dims``."""
        if self._complex_in:
            arrays = list(arrays)
            for i in self._complex_in:
                arrays[i] = _as_packed(arrays[i])
        D = dict(zip(self._names, dims))
        if self._growing is not None:
            arrays = self._growing.widen(D, arrays)
        outs = self.executable(D, arrays)
        if self._guard is not None:
            outs = self._guard(outs, arrays)
        if self._growing is not None:
            outs = self._growing.narrow(D, outs)
        if self._complex_out:
            outs = list(outs)
            for i in self._complex_out:
                outs[i] = _as_complex(outs[i])
        if self._single:
            return outs[self.out_kinds[0][1]]
        if self._values_only:
            return optree.tree_unflatten(self.out_tree, [outs[i] for _, i in self.out_kinds])
        leaves = [outs[v] if k == "value" else int(outs[v]) if k == "dim" else v
                  for k, v in self.out_kinds]
        return optree.tree_unflatten(self.out_tree, leaves)


def _as_packed(a):
    """A complex array as the packed float array SplitComplex's parameters take (its shape
    plus a trailing 2: (re, im) interleaved, NumPy's layout): a view, whatever its strides
    (the backend copies a non-contiguous one, as any argument)."""
    if isinstance(a, np.ndarray):
        return a[..., None].view(a.real.dtype)
    if not a.flags.c_contiguous:             # a CuPy array
        a = a.copy()
    return a.view(a.real.dtype).reshape(a.shape + (2,))


def _as_complex(o):
    """A packed result (trailing axis of 2) as the complex array it holds: a view."""
    if not o.flags.c_contiguous:
        o = o.copy()
    cd = np.complex64 if o.dtype == np.float32 else np.complex128
    return o.view(cd).reshape(o.shape[:-1])


def _alias_guard(module: IRModule):
    """The output boundary: a result is handed to the caller only when no one else holds its
    memory, as in JAX, where every call returns new arrays.  A result that the executable
    wrote into memory it allocated for the call (a ``call_tir``'s or ``call_library``'s
    output) is fresh; a constant (one array cached in the entry, which a caller writing into
    it would change for every later call), a parameter (the caller's own array) or what a
    host op or the numpy backend made (possibly a view of either) is copied when it may
    share memory with an argument or a constant.  Returns ``guard(outs, arrays) -> outs``,
    or None when every result is fresh."""
    fn = module.main
    made_by = {v: b.kind for b in fn.bindings for v in b.outvars}
    params = set(fn.params)
    consts = [a.value for b in fn.bindings for a in b.args
              if isinstance(a, Literal) and isinstance(a.value, np.ndarray) and a.value.ndim]
    # per result: "fresh", "copy" (always) or "check" (copy if it shares memory)
    how = []
    for r in fn.results:
        if isinstance(r, Literal) or r in params:
            how.append("copy")
        elif made_by.get(r) in ("tir", "library"):
            how.append("fresh")
        else:
            how.append("check")
    if all(h == "fresh" for h in how):
        return None

    def guard(outs, arrays):
        outs = list(outs)
        for i, h in enumerate(how):
            o = outs[i]
            if h == "fresh" or not hasattr(o, "copy"):
                continue
            if h == "copy" or not isinstance(o, np.ndarray) or any(
                    isinstance(a, np.ndarray) and np.may_share_memory(o, a)
                    for a in (*arrays, *consts)):
                outs[i] = o.copy()
        return outs
    return guard


class Lowered:
    """A traced and lowered function: ``as_text()`` prints its IR; ``compile()`` builds it."""

    def __init__(self, jitted: "Jitted", module: IRModule, entry_builder):
        self._jitted = jitted
        self.module = module
        self._build = entry_builder
        self._compiled: Compiled | None = None

    def as_text(self, stage: str = "traced") -> str:
        """The program at one stage: "traced" (graph IR as traced), "optimized" (graph IR
        after the pipeline and lowering, with its call_tir/call_library), "loops" (the
        loop-level programs), "llvm" (generated LLVM IR), "llvm-optimized", "asm", "host"
        (the generated per-call Python)."""
        if stage == "traced":
            return str(self.module)
        return self.compile().as_text(stage)

    def __str__(self) -> str:
        return self.as_text()

    def compile(self, pipeline: Sequence[Pass] | None = None) -> "Compiled":
        if pipeline is None:          # the pipeline given to jit, else the default one
            if self._compiled is None:
                self._compiled = Compiled(self._jitted, self._build(self._jitted.pipeline))
            return self._compiled
        return Compiled(self._jitted, self._build(pipeline))


class Compiled:
    """A compiled entry: callable with arrays that satisfy its symbolic signature."""

    def __init__(self, jitted: "Jitted", entry: _Entry):
        self._jitted = jitted
        self._entry = entry

    def as_text(self, stage: str = "optimized") -> str:
        """See :meth:`Lowered.as_text`; the default is the graph IR the backend runs."""
        exe = self._entry.executable
        if hasattr(exe, "as_text"):
            return exe.as_text(stage)
        if stage == "optimized":
            return str(self._entry.module)
        raise ValueError(f"the {self._jitted.backend} backend has no {stage!r} text")

    def memory_stats(self, dims: dict | None = None) -> dict:
        """The backend's memory plan and allocation counters (LLVM backend): storages shared
        by intermediates, workspace bytes, allocations per call, output pool hits/misses.
        ``dims`` (name -> int) evaluates the symbolic byte counts."""
        stats = getattr(self._entry.executable, "memory_stats", None)
        if stats is None:
            raise NotImplementedError(f"the {self._jitted.backend} backend has no memory_stats(); "
                                      f"use backend='llvm'")
        return stats(dims)

    def __call__(self, *args, **kwargs):
        call = self._jitted._prepare(args, kwargs)
        if call.has_tracer or call.has_struct:
            raise TypeError("a Compiled function is called with concrete arrays")
        dims = self._entry.binder(call.shapes)
        if not isinstance(dims, tuple):
            raise ShapeError(f"{self._jitted.__name__}: " + self._entry.binder.explain(call.shapes, dims))
        return self._jitted._run(self._entry, dims, call)


# a function (jitted, args, kwargs) -> result or NotImplemented that sees every call first
# while installed (``relaxjax.autobatch`` records calls as nodes of a graph to batch)
_CALL_HOOK: list = []


def _shape_stand_in(x):
    """A ``ShapeDtypeStruct`` of int dims as an array of its shape and dtype that holds no
    memory (one element, strides 0): what ``eval_shape`` traces with."""
    if isinstance(x, ShapeDtypeStruct):
        if not all(isinstance(d, int) for d in x.shape):
            raise TypeError(f"eval_shape takes arrays or ShapeDtypeStructs of int dims, got {x}")
        return np.lib.stride_tricks.as_strided(np.zeros(1, x.dtype), shape=tuple(x.shape),
                                               strides=(0,) * len(x.shape))
    return x


def _fast_key(args: tuple, scalars: bool) -> tuple:
    """(the fast path's key, the arrays in order) of positional arguments that are NumPy
    arrays, NumPy scalars, Python scalars (``scalars``: automatic mode, where one is a weakly
    typed 0-d array of its type's default dtype whatever its value, as ``CallArgs`` makes
    it) or pytrees of them (a model's parameters in dicts): their dtypes and ranks, and the
    pytree's structure; (None, None) for anything else, which takes the full path."""
    try:
        key = tuple([(a.dtype, a.ndim) for a in args if type(a) is np.ndarray])
    except AttributeError:
        key = ()
    if len(key) == len(args):
        return key, args
    leaves, tree = optree.tree_flatten(args, none_is_leaf=False)
    weak = dt.WEAK_DEFAULT if scalars else {}
    if not all([type(a) is np.ndarray or isinstance(a, np.generic) or type(a) in weak for a in leaves]):
        # device arrays (CuPy's), alone or among NumPy arrays, as flat arguments: keyed apart
        # (checked only here, off the pytree path's way)
        on_gpu = [on_device(a) for a in args]
        if any(on_gpu) and len(key) + sum(on_gpu) == len(args):
            return tuple([(a.dtype, a.ndim, g) for a, g in zip(args, on_gpu)]), args
        return None, None
    keys, arrays = [], []
    for a in leaves:
        if type(a) is int and not -(1 << 63) <= a < (1 << 63):
            return None, None                   # out of int64's range: the full path says so
        if type(a) in weak:                     # (its type in the key: weak, unlike a 0-d array)
            keys.append(("weak", type(a)))
            arrays.append(np.asarray(a, weak[type(a)]))
        else:                                   # NumPy scalars: 0-d
            a = a if type(a) is np.ndarray else np.asarray(a)
            keys.append((a.dtype, a.ndim))
            arrays.append(a)
    return (tree, tuple(keys)), arrays


class Jitted:
    """The object ``jit`` returns.  See :func:`jit`."""

    def __init__(self, fun: Callable, *, shapes=None, static_argnums=(), static_argnames=(),
                 donate_argnums=(), donate_argnames=(), backend: str | None = None,
                 pipeline: Sequence[Pass] | None = None):
        if not callable(fun):
            raise TypeError(f"jit: expected a function or other callable, got {fun!r} "
                            f"of type {type(fun).__name__}")
        functools.update_wrapper(self, fun)
        # after update_wrapper, which copies ``fun.__dict__`` (a wrapper of a custom_vjp
        # function carries that object's own ``fun``)
        self.fun = fun
        # what a pickled copy carries to name this function (``__reduce__``), made on first
        # pickling (set here, after update_wrapper: never a wrapped Jitted's)
        self._pickle_token: str | None = None
        # a callable object or a functools.partial has no __name__: messages and the traced
        # function's name use its type's
        self.__name__ = getattr(fun, "__name__", None) or type(fun).__name__
        # no backend named: the CPU (llvm), or CUDA for calls whose arrays are on a GPU
        self.backend = backend or "llvm"
        self._auto_backend = backend is None
        get_backend(self.backend)       # fail early on an unknown backend
        self.pipeline = list(pipeline) if pipeline is not None else None
        self.shapes = shapes
        try:
            self._sig = inspect.signature(fun)
        except (TypeError, ValueError):
            self._sig = None
        self.static_argnums = tuple(static_argnums) if isinstance(static_argnums, (tuple, list)) \
            else (static_argnums,)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        self.static_argnums = check_static(self.__name__, self._sig, self.static_argnums, names)
        if self._sig is not None:
            params = list(self._sig.parameters.values())
            for n in names:
                pos = next((i for i, p in enumerate(params) if p.name == n and
                            p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)), None)
                if pos is not None and pos not in self.static_argnums:
                    self.static_argnums += (pos,)
        self.static_argnames = names
        donate = tuple(donate_argnums) if isinstance(donate_argnums, (tuple, list)) else (donate_argnums,)
        donate_names = (donate_argnames,) if isinstance(donate_argnames, str) else tuple(donate_argnames)
        donate = check_static(self.__name__, self._sig, donate, donate_names, what="donate")
        if self._sig is not None:
            params = list(self._sig.parameters.values())
            donate += tuple(i for i, p in enumerate(params) if p.name in donate_names and
                            p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY))
        if set(donate) & set(self.static_argnums):
            raise ValueError(f"{self.__name__}: argument {sorted(set(donate) & set(self.static_argnums))[0]} "
                             f"is both static and donated (only arrays are donated)")
        # positions (and keyword names) of the donated arguments; jit_trace marks their leaves
        self.donated = frozenset(donate) | frozenset(donate_names)
        self._cache: dict = {}
        self._hits = self._misses = self._compiles = 0
        # held while a miss traces and compiles (so that threads missing at once compile one
        # entry, not one each); hits take no lock
        self._lock = threading.RLock()
        # Fast dispatch for the common call: every argument a NumPy array, passed
        # positionally, nothing static, any explicit shape one ShapeDtypeStruct per argument.
        # Keyed by (dtype, rank) per argument, filled by full-path calls (which check dtype
        # and rank against explicit shapes); each entry's binder then checks the shapes
        # exactly as the full path would, and a rejected call takes the full path, which
        # says why.
        self._fast: dict = {}
        # Entries that accept one set of shapes (``_exact``), by (call key, shapes) and by
        # (fast key, shapes), least recently used first: a dict lookup rather than a scan of
        # every entry's binder, and bounded (MAX_EXACT_ENTRIES)
        self._exact: OrderedDict = OrderedDict()
        # argument counts the fast path takes: every parameter, or all but trailing ones with
        # defaults (those stay Python values, keyed by how many were passed, as in the full
        # path), or any number from the required ones on with ``*args`` (automatic mode)
        self._fast_arities: range = range(0)
        self._fast_names: tuple = ()           # the parameters' names, for keyword arguments
        self._fast_scalars = shapes is None     # explicit: a Python scalar takes its struct's dtype
        if self._sig is not None and not self.static_argnums and not names:
            ps = list(self._sig.parameters.values())
            specs = spec_list(shapes)
            star = bool(ps) and ps[-1].kind == ps[-1].VAR_POSITIONAL and specs is None
            named = ps[:-1] if star else ps
            # (explicit pytrees of structs too: a call's key on the fast path, its pytree's
            # structure, dtypes and ranks, is one a full call checked against the structs)
            if all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in named) and (
                    specs is None or len(specs) == len(ps)):
                required = sum(p.default is p.empty for p in named)
                self._fast_arities = range(required, (1 << 30) if star else len(ps) + 1)
                self._fast_names = tuple(p.name for p in named)

    def __reduce__(self):
        """Pickled as the function and its jit options (the compiled entries stay behind):
        a process that unpickles it (a Dask worker) compiles it again, or loads it from a
        persistent cache it shares.  The pickle also carries a token naming this Jitted, by
        which a process unpickles every copy of it as one Jitted (``_rebuild``): a worker
        handed the function with each task compiles it once, not once per task."""
        options = dict(shapes=self.shapes, static_argnums=self.static_argnums,
                       static_argnames=self.static_argnames,
                       donate_argnums=tuple(d for d in self.donated if isinstance(d, int)),
                       donate_argnames=tuple(d for d in self.donated if isinstance(d, str)),
                       backend=None if self._auto_backend else self.backend, pipeline=self.pipeline)
        return (_rebuild, (self.fun, options, pickle_token(self)))

    # -- public API -----------------------------------------------------------------------
    def cache_info(self) -> CacheInfo:
        """Hits, misses, compiles and entries (``hits`` is approximate while several threads
        call at once; the others are exact)."""
        return CacheInfo(self._hits, self._misses, self._compiles,
                         sum(len(v) for v in self._cache.values()) +
                         len({id(e) for e in list(self._exact.values())}))

    def compiled_modules(self) -> list:
        """The graph module of each compiled entry, as its backend runs it (after the
        pipeline), most recently used first; one per entry (an entry found both by exact
        shapes and by key counts once)."""
        seen, out = set(), []
        entries = list(reversed(list(self._exact.values()))) + [e for v in list(self._cache.values()) for e in v]
        for e in entries:
            if id(e) not in seen:
                seen.add(id(e))
                out.append(e.module)
        return out

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._fast.clear()
            self._exact.clear()
            self._hits = self._misses = self._compiles = 0

    def eval_shape(self, *args, **kwargs):
        """The shapes and dtypes of the call's results (a pytree of ``ShapeDtypeStruct``, dims
        returned as ints, constants as they are), by tracing alone, nothing compiled or run
        (``jax.eval_shape``).  Arguments: arrays, or ``ShapeDtypeStruct``s of int shapes."""
        args, kwargs = optree.tree_map(_shape_stand_in, (args, kwargs), none_is_leaf=False)
        call = self._prepare(args, kwargs)
        traced = trace_call(self.fun, self.__name__, call)
        dims = traced.binder(call.shapes)
        if not isinstance(dims, tuple):
            raise ShapeError(f"{self.__name__}: " + traced.binder.explain(call.shapes, dims))
        values = dict(zip(traced.binder.names, dims))
        results = traced.module.main.results
        leaves = []
        for kind, v in traced.out_kinds:
            if kind == "value":
                t = results[v].type
                leaves.append(ShapeDtypeStruct(tuple(eval_dim(d, values) for d in t.shape), t.dtype))
            elif kind == "dim":
                leaves.append(eval_dim(results[v].value, values))
            else:
                leaves.append(v)
        return optree.tree_unflatten(traced.out_tree, leaves)

    def _empty_results(self, args: tuple):
        """A call that no entry takes, whose results all have no elements (Dask's probe of a
        function with empty arrays, ``map_blocks``' meta), needs nothing compiled: its empty
        results, from tracing alone, so the dims of the first real call are the entry's (a
        dim first seen empty can need guards a chunk of data breaks).  None otherwise (a
        call with results compiles, and its entry takes the next such call)."""
        try:
            out = self.eval_shape(*args)
        except Exception:                   # let the call raise what it raises
            return None
        leaves, tree = optree.tree_flatten(out, none_is_leaf=False)
        if not all(isinstance(x, ShapeDtypeStruct) and 0 in x.shape for x in leaves):
            return None
        return optree.tree_unflatten(tree, [np.empty(x.shape, x.dtype) for x in leaves])

    def lower(self, *args, **kwargs) -> Lowered:
        """Trace for these arguments (arrays or ShapeDtypeStructs) without running anything."""
        call = self._prepare(args, kwargs)
        module, build = self._trace(call)
        return Lowered(self, module, build)

    def __call__(self, *args, **kwargs):
        if _CALL_HOOK:                    # rj.autobatch records the call instead
            out = _CALL_HOOK[0](self, args, kwargs)
            if out is not NotImplemented:
                return out
        if kwargs and self._fast_names:
            # keywords naming the parameters right after the positional ones, as the full
            # path binds them (``inspect.BoundArguments.args``): positional here too
            names = self._fast_names[len(args):len(args) + len(kwargs)]
            if len(names) == len(kwargs) and all([n in kwargs for n in names]):
                args, kwargs = args + tuple([kwargs[n] for n in names]), {}
        if not kwargs and len(args) in self._fast_arities:
            key, arrays = _fast_key(args, self._fast_scalars)
            if key is not None:
                shapes = tuple([a.shape for a in arrays])
                entry = self._exact.get((key, shapes))
                if entry is not None:
                    self._hits += 1
                    self._touch((key, shapes))
                    return entry.run((), arrays)
                for entry in self._fast.get(key, ()):
                    dims = entry.binder(shapes)
                    if type(dims) is tuple:
                        self._hits += 1
                        return entry.run(dims, arrays)
                if any(0 in s for s in shapes) and all(type(a) is np.ndarray for a in arrays):
                    # a miss on empty arrays: maybe nothing to compile
                    empty = self._empty_results(args)
                    if empty is not None:
                        return empty
                keyed = []
                out = self._call_slow(args, kwargs, keyed)
                if keyed:           # this call's cache key (per call: other threads have theirs)
                    with self._lock:
                        if keyed[1] is not None:
                            self._remember((key, shapes), keyed[1])
                            return out
                        entries = self._fast.setdefault(key, [])
                        for e in self._cache.get(keyed[0], ()):
                            if e not in entries:
                                entries.append(e)
                return out
        return self._call_slow(args, kwargs)

    def _call_slow(self, args, kwargs, keyed: list | None = None):
        call = self._prepare(args, kwargs)
        if call.has_tracer:                       # jit inside jit: inline
            return self.fun(*args, **kwargs)
        if call.has_struct:
            raise TypeError("ShapeDtypeStruct arguments are for lower()/make_ir(), not for calls")
        if keyed is not None:
            keyed += [call.key, None]
        shapes = call.shapes
        entry = self._exact.get((call.key, shapes))
        if entry is not None:
            self._hits += 1
            self._touch((call.key, shapes))
            if keyed is not None:
                keyed[1] = entry
            return self._run(entry, (), call)
        entries = self._cache.setdefault(call.key, [])
        for entry in entries:
            dims = entry.binder(shapes)
            if isinstance(dims, tuple):
                self._hits += 1
                return self._run(entry, dims, call)
        with self._lock:
            for entry in entries:                 # added by another thread meanwhile?
                dims = entry.binder(shapes)
                if isinstance(dims, tuple):
                    self._hits += 1
                    break
            else:
                self._misses += 1
                if entries and self.shapes is not None and not call.any_auto:
                    # explicit signature: the only entry was rejected -> say precisely why
                    entry = entries[0]
                    raise ShapeError(f"{self.__name__}: " + entry.binder.explain(shapes, entry.binder(shapes)))
                module, build = self._trace(call)
                entry = build(self.pipeline)
                self._compiles += 1
                dims = entry.binder(shapes)
                if not isinstance(dims, tuple):
                    raise ShapeError(f"{self.__name__}: " + entry.binder.explain(shapes, dims))
                if _exact(entry, shapes):
                    self._remember((call.key, shapes), entry)
                    if keyed is not None:
                        keyed[1] = entry
                else:
                    entries.append(entry)
        return self._run(entry, dims, call)

    def _remember(self, key, entry: _Entry) -> None:
        """Keep an entry for one set of shapes, dropping the least recently used past the bound."""
        with self._lock:
            self._exact[key] = entry
            while len(self._exact) > MAX_EXACT_ENTRIES:
                self._exact.popitem(last=False)

    def _touch(self, key) -> None:
        try:
            self._exact.move_to_end(key)
        except KeyError:            # dropped by another thread meanwhile
            pass

    # -- calls ---------------------------------------------------------------------------
    def _prepare(self, args, kwargs) -> CallArgs:
        return CallArgs(self, args, kwargs)

    def _run(self, entry: _Entry, dims: tuple, call: CallArgs):
        return entry.run(dims, call.arrays())

    # -- tracing -------------------------------------------------------------------------
    def _trace(self, call: CallArgs):
        traced = trace_call(self.fun, self.__name__, call)
        module = traced.module
        backend_name = "cuda" if self._auto_backend and call.on_device else self.backend

        def build(pipeline):
            backend = get_backend(backend_name)
            if pipeline is None:
                pipeline = default_pipeline(
                    lower=getattr(backend, "runs_loops", True),
                    pointwise_loops_in_cache=getattr(backend, "pointwise_loops_in_cache", False),
                    strided_products=getattr(backend, "strided_products", False))
                lowered, exe = build_cached(module, pipeline, backend_name, backend)
            else:
                if split_complex not in pipeline and has_complex(module):
                    # no backend takes complex values: split them first, as the default does
                    pipeline = [split_complex, *pipeline]
                lowered = run_pipeline(module, pipeline)
                if getattr(backend, "runs_loops", True) and unlowered(lowered.main):
                    # a backend is handed a fully lowered module: lower what the user's
                    # pipeline left (a pipeline without Legalize)
                    lowered = run_pipeline(lowered, [legalize], dump_input=False)
                exe = backend(lowered)
            return _Entry(lowered, exe, traced.binder, traced.out_tree, traced.out_kinds,
                          traced.trace_seconds)
        return module, build

def jit(fun: Callable | None = None, *, shapes=None, static_argnums=(), static_argnames=(),
        donate_argnums=(), donate_argnames=(), backend: str | None = None,
        pipeline: Sequence[Pass] | None = None):
    """Compile ``fun`` for dynamic shapes.

    Without ``shapes`` (automatic mode) the first call makes every dimension a symbol (of
    bounds [1, inf), or [0, inf) when it is first seen empty); what the trace needs to know about a symbol (whether it is
    1 where it broadcasts, an equality, ...) is recorded as a guard, and a call that fails a
    guard traces a new entry.  With ``shapes``
    (one :class:`ShapeDtypeStruct` pytree per positional argument) the declared symbolic
    signature is the contract: calls that break it raise :class:`ShapeError`.

    ``backend``: "llvm" (the CPU), "cuda" (CuPy arrays out), "numpy" (the reference
    interpreter); by default "llvm", or "cuda" for calls whose arrays are CuPy arrays.

    As in JAX, every call returns new arrays (never an argument or a cached constant), NumPy
    arrays the function captures (closures, globals) are constants of the trace, copied when
    it is traced, and static arguments key the cache by type and value bits.

    ``donate_argnums``/``donate_argnames`` (JAX's buffer donation): the arrays of these
    arguments may be written over to hold results, so an update of a donated array (a cache
    written at one position, ``x.at[i].set(v)``) is made in place and touches only what it
    changes.  The caller gives the arrays up: their contents after the call are unspecified
    (JAX deletes them).  An array is only reused when it is writeable and shares no memory
    with another argument; the LLVM backend reuses, the others ignore the hint.  A donated
    array that one concatenation extends along an inner axis and the function returns (a
    KV cache growing by a position per call, ``concatenate([cache, k], axis=1)``) is kept in
    an array with room: the result is a view of it, which the next call takes back and
    extends in place (``compile/growing_caches.py``, ``relaxjax/growing.py``).
    """
    if fun is None:
        return lambda f: jit(f, shapes=shapes, static_argnums=static_argnums,
                             static_argnames=static_argnames, donate_argnums=donate_argnums,
                             donate_argnames=donate_argnames, backend=backend, pipeline=pipeline)
    return Jitted(fun, shapes=shapes, static_argnums=static_argnums, static_argnames=static_argnames,
                  donate_argnums=donate_argnums, donate_argnames=donate_argnames, backend=backend,
                  pipeline=pipeline)


# Jitteds unpickled in this process, by the token of the Jitted they are copies of, least
# recently unpickled first: each task a Dask worker runs arrives with its own pickled copy of
# the function, and all of them are this one Jitted, with its compiled entries.  Bounded:
# past MAX_UNPICKLED the least recently unpickled one goes (and compiles again if it comes
# back).
MAX_UNPICKLED = 256
_UNPICKLED: OrderedDict = OrderedDict()
_UNPICKLED_LOCK = threading.Lock()


def pickle_token(f: "Jitted") -> str:
    """The token that ``f``'s pickles carry (made on first use): every copy unpickled in
    one process is the same Jitted, found by ``unpickled(token)``."""
    with _UNPICKLED_LOCK:             # (not f's lock, which a compile holds)
        if f._pickle_token is None:
            f._pickle_token = uuid.uuid4().hex
        return f._pickle_token


def unpickled(token: str) -> "Jitted | None":
    """The Jitted this process unpickled under ``token`` (``pickle_token``), if any."""
    with _UNPICKLED_LOCK:
        return _UNPICKLED.get(token)


def _rebuild(fun: Callable, options: dict, token: str | None = None) -> "Jitted":
    if token is None:                       # a pickle without a token
        return Jitted(fun, **options)
    with _UNPICKLED_LOCK:
        f = _UNPICKLED.get(token)
        if f is None:
            f = _UNPICKLED[token] = Jitted(fun, **options)
            f._pickle_token = token
            while len(_UNPICKLED) > MAX_UNPICKLED:
                _UNPICKLED.popitem(last=False)
        else:
            _UNPICKLED.move_to_end(token)
        return f


def eval_shape(fun: Callable, *args, **kwargs):
    """``fun``'s result shapes and dtypes for these arguments, traced, not compiled (see
    :meth:`Jitted.eval_shape`)."""
    return (fun if isinstance(fun, Jitted) else jit(fun)).eval_shape(*args, **kwargs)


def make_ir(fun: Callable, **jit_kwargs) -> Callable[..., IRModule]:
    """``make_ir(f)(*args)`` -> the traced graph IR (prints as text), for arrays or structs."""
    def trace(*args, **kwargs) -> IRModule:
        return jit(fun, **jit_kwargs).lower(*args, **kwargs).module
    return trace


def traced_or_jitted(transformed: Callable) -> Callable:
    """``transformed`` when called inside a trace (on tracers), else jit-compiled: NumPy
    arguments are traced once per transformed function, for all shapes."""
    jitted = []

    @functools.wraps(transformed)
    def call(*args, **kwargs):
        if current_trace() is not None or find_trace(list(args)) is not None:
            return transformed(*args, **kwargs)
        if not jitted:
            jitted.append(jit(transformed))
        return jitted[0](*args, **kwargs)
    return call
