"""``jit``: trace once per symbolic signature, cache, bind dims per call, run on a backend."""
from __future__ import annotations

import functools
import inspect
import io
import logging
import os
import pickle
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import optree

from . import cache
from . import dtypes as dt
from .backends import get_backend
from .compile.passes import Pass, default_pipeline, run_pipeline
from .compile.verify import verify
from .core import TraceContext, Tracer
from .errors import ShapeError
from .ir import IRModule, TensorType
from .shapes import INF, ShapeEnv, SymbolicDim, symbol
from .signature import Binder, make_binder
from .structs import ShapeDtypeStruct

log = logging.getLogger("relaxjax.cache")


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

    def fast_run(self, dims: tuple, arrays):
        """Run with NumPy array arguments already checked by the binder."""
        outs = self.executable(dict(zip(self._names, dims)), arrays)
        if self._single:
            return outs[self.out_kinds[0][1]]
        if self._values_only:
            return optree.tree_unflatten(self.out_tree, [outs[i] for _, i in self.out_kinds])
        leaves = [outs[v] if k == "value" else int(outs[v]) if k == "dim" else v
                  for k, v in self.out_kinds]
        return optree.tree_unflatten(self.out_tree, leaves)


_PY_SCALARS = (bool, int, float)


def _leaf_kind(x, name: str):
    if isinstance(x, np.ndarray):
        dt.canonical(x.dtype)
        return "array"
    if isinstance(x, np.generic):
        dt.canonical(x.dtype)
        return "array"
    if isinstance(x, _PY_SCALARS):
        return "scalar"
    if _on_device(x):
        dt.canonical(x.dtype)
        return "array"
    if isinstance(x, ShapeDtypeStruct):
        return "struct"
    if isinstance(x, Tracer):
        return "tracer"
    raise TypeError(f"argument {name}: unsupported type {type(x).__name__}; jitted functions take "
                    f"arrays, Python scalars and pytrees of them (mark other arguments static "
                    f"with static_argnums/static_argnames)")


def _on_device(x) -> bool:
    """A GPU array (CuPy's, or any with the CUDA array interface)."""
    return hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray)


def _ident(s: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in s).strip("_") or "arg"
    return out if not out[0].isdigit() else f"a{out}"


def _path_name(argname: str, path: tuple) -> tuple[str, str]:
    """(display name like params['w'], identifier like params_w) for a pytree leaf."""
    disp, ident = argname, argname
    for k in path:
        disp += f"[{k!r}]"
        ident += f"_{k}"
    return disp, _ident(ident)


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


class Jitted:
    """The object ``jit`` returns.  See :func:`jit`."""

    def __init__(self, fun: Callable, *, shapes=None, static_argnums=(), static_argnames=(),
                 backend: str | None = None, pipeline: Sequence[Pass] | None = None):
        self.fun = fun
        functools.update_wrapper(self, fun)
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
        if self._sig is not None:
            params = list(self._sig.parameters.values())
            for n in names:
                pos = next((i for i, p in enumerate(params) if p.name == n and
                            p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)), None)
                if pos is not None and pos not in self.static_argnums:
                    self.static_argnums += (pos,)
        self.static_argnames = names
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
        self._fast_arity = None
        if self._sig is not None and not self.static_argnums and not names:
            ps = list(self._sig.parameters.values())
            specs = _spec_list(shapes)
            if all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps) and (
                    specs is None or (len(specs) == len(ps) and
                                      all(isinstance(s, ShapeDtypeStruct) for s in specs))):
                self._fast_arity = len(ps)

    # -- public API -----------------------------------------------------------------------
    def cache_info(self) -> CacheInfo:
        """Hits, misses, compiles and entries (``hits`` is approximate while several threads
        call at once; the others are exact)."""
        return CacheInfo(self._hits, self._misses, self._compiles,
                         sum(len(v) for v in self._cache.values()))

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._fast.clear()
            self._hits = self._misses = self._compiles = 0

    def lower(self, *args, **kwargs) -> Lowered:
        """Trace for these arguments (arrays or ShapeDtypeStructs) without running anything."""
        call = self._prepare(args, kwargs)
        module, build = self._trace(call)
        return Lowered(self, module, build)

    def __call__(self, *args, **kwargs):
        if not kwargs and len(args) == self._fast_arity:
            try:
                key = tuple([(a.dtype, a.ndim) for a in args if type(a) is np.ndarray])
            except AttributeError:
                key = ()
            if len(key) == len(args):
                shapes = tuple([a.shape for a in args])
                for entry in self._fast.get(key, ()):
                    dims = entry.binder(shapes)
                    if type(dims) is tuple:
                        self._hits += 1
                        return entry.fast_run(dims, args)
                keyed = []
                out = self._call_slow(args, kwargs, keyed)
                if keyed:           # this call's cache key (per call: other threads have theirs)
                    with self._lock:
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
            keyed.append(call.key)
        entries = self._cache.setdefault(call.key, [])
        shapes = call.shapes
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
                entries.append(entry)
                dims = entry.binder(shapes)
                if not isinstance(dims, tuple):
                    raise ShapeError(f"{self.__name__}: " + entry.binder.explain(shapes, dims))
        return self._run(entry, dims, call)

    # -- calls ---------------------------------------------------------------------------
    def _prepare(self, args, kwargs) -> "_Call":
        return _Call(self, args, kwargs)

    def _run(self, entry: _Entry, dims: tuple, call: "_Call"):
        D = dict(zip(entry.binder.names, dims))
        arrays = call.arrays()
        outs = entry.executable(D, arrays)
        leaves = []
        for kind, v in entry.out_kinds:
            if kind == "value":
                leaves.append(outs[v])
            elif kind == "dim":
                leaves.append(int(outs[v]))
            else:
                leaves.append(v)
        return optree.tree_unflatten(entry.out_tree, leaves)

    # -- tracing -------------------------------------------------------------------------
    def _trace(self, call: "_Call"):
        t0 = time.perf_counter()
        env = ShapeEnv("auto" if call.any_auto else "explicit")
        ctx = TraceContext(env)
        params, names, leaf_names = [], [], []
        taken: set = set()
        for leaf in call.leaves:
            t = leaf.struct_type(env, taken)
            tr = ctx.new_param(t, leaf.ident)
            params.append(tr)
            names.append(_unique(leaf.ident, names))
            leaf_names.append(leaf.display)
        with ctx:
            args, kwargs = call.rebuild(params)
            out = self.fun(*args, **kwargs)
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
                    results.append(ctx.atom(np.asarray(o)))
                elif isinstance(o, _PY_SCALARS) or o is None:
                    kinds.append(("const", o))
                else:
                    raise TypeError(f"{self.__name__} returned a {type(o).__name__}; return arrays, "
                                    f"scalars, dims or pytrees of them")
        fn = ctx.finalize(_ident(self.__name__), [p.atom for p in params], names, results)
        _check_dims_bound(fn, self.__name__)
        module = IRModule({fn.name: fn}, fn.name)
        verify(module)
        trace_seconds = time.perf_counter() - t0
        binder = make_binder([p.type.shape for p in fn.params], leaf_names, fn.bounds, fn.guards,
                             self.__name__)

        backend_name = "cuda" if self._auto_backend and call.on_device else self.backend

        def build(pipeline):
            backend = get_backend(backend_name)
            if pipeline is None:
                pipeline = default_pipeline(lower=getattr(backend, "runs_loops", True))
                lowered = _lower_cached(module, pipeline)
            else:
                lowered = run_pipeline(module, pipeline)
            exe = backend(lowered)
            return _Entry(lowered, exe, binder, out_tree, kinds, trace_seconds)
        return module, build


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


_LOWERED_MAX_BYTES = 16 << 20
# modules whose functions and classes the key may name (pickle stores them by name): their
# code is covered by the source digest or the versions in the key
_KEY_MODULES = ("relaxjax", "numpy", "sympy", "builtins", "math", "operator", "collections", "fractions")


class _KeyPickler(pickle.Pickler):
    """Pickles the traced module for the key, refusing functions and classes from elsewhere
    (a user's callable stored by name could change without the key changing)."""

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            mod = getattr(obj, "__module__", None) or ""
            if mod.split(".")[0] not in _KEY_MODULES:
                raise pickle.PicklingError(f"{obj!r} from {mod or 'an unknown module'} in a traced module")
        return NotImplemented


def _lower_cached(module: IRModule, pipeline: list) -> IRModule:
    """``run_pipeline(module, pipeline)`` for the default pipeline, through the persistent
    cache: the lowered module is stored pickled, keyed by the pickled traced module (all the
    pipeline reads), the passes' names, relaxjax's source digest and the versions of Python,
    NumPy and SymPy.  Skipped (the pipeline runs) when the cache is off, when IR dumps or
    verification are asked for, or when the module does not pickle or pickles to more than
    ``_LOWERED_MAX_BYTES`` (large constants); an entry that does not unpickle is ignored and
    rewritten."""
    if not cache.enabled() or os.environ.get("RELAXJAX_DUMP_IR", "0") not in ("", "0") or \
            os.environ.get("RELAXJAX_VERIFY", "0") not in ("", "0"):
        return run_pipeline(module, pipeline)
    try:
        buf = io.BytesIO()
        _KeyPickler(buf, protocol=5).dump(module)
        traced = buf.getvalue()
    except Exception:                        # noqa: BLE001 (a value that does not pickle)
        return run_pipeline(module, pipeline)
    if len(traced) > _LOWERED_MAX_BYTES:     # large constants: not worth a disk entry
        return run_pipeline(module, pipeline)
    import sympy
    parts = (traced, tuple(p.name for p in pipeline), cache.source_digest(),
             "%d.%d" % sys.version_info[:2], np.__version__, sympy.__version__)
    data = cache.get("lowered", parts)
    if data is not None:
        try:
            lowered = pickle.loads(data)
            if isinstance(lowered, IRModule):
                return lowered
        except Exception as e:               # noqa: BLE001 (stale or damaged: recompute)
            log.info("relaxjax cache: ignoring a lowered module that does not load (%s)", e)
    lowered = run_pipeline(module, pipeline)
    try:
        cache.put("lowered", parts, pickle.dumps(lowered, protocol=5))
    except Exception as e:                   # noqa: BLE001
        log.info("relaxjax cache: not storing a lowered module that does not pickle (%s)", e)
    return lowered


def _unique(name: str, taken: list) -> str:
    if name not in taken:
        return name
    i = 1
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


class _Leaf:
    __slots__ = ("value", "kind", "display", "ident", "struct")

    def __init__(self, value, kind, display, ident, struct=None):
        self.value, self.kind, self.display, self.ident, self.struct = value, kind, display, ident, struct

    def struct_type(self, env: ShapeEnv, taken: set) -> TensorType:
        if self.struct is not None:                     # explicit: declared dims and bounds
            s = self.struct
            for sym, b in s.bounds().items():
                if sym not in env.bounds:
                    env.declare(sym, *b)
            return TensorType(s.dims(), s.dtype)
        if self.kind == "scalar":
            d = dt.WEAK_DEFAULT[type(self.value)]
            return TensorType((), d, True)
        a = self.value if _on_device(self.value) else np.asarray(self.value)
        dims = []
        for ax, n in enumerate(a.shape):
            if n in (0, 1):
                dims.append(n)                          # sizes 0 and 1 are specialized
                continue
            base = self.ident if not self.ident[-1].isdigit() else self.ident + "_"
            nm, k = f"{base}{ax}", 0
            while nm in taken:
                k += 1
                nm = f"{base}{ax}_{k}"
            taken.add(nm)
            s = symbol(nm)
            env.declare(s, 2, INF, value=n)
            dims.append(s)
        return TensorType(tuple(dims), a.dtype)


def _spec_list(shapes) -> list | None:
    """``jit``'s ``shapes=`` as a list with one entry per dynamic positional argument (a
    single ShapeDtypeStruct for a one-argument function), or None."""
    if shapes is None:
        return None
    return [shapes] if isinstance(shapes, ShapeDtypeStruct) else list(shapes)


class _Call:
    """One call's arguments split into static values and array leaves, with its cache key."""

    def __init__(self, jitted: Jitted, args, kwargs):
        self.jitted = jitted
        sig = jitted._sig
        if sig is not None:
            try:
                ba = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{jitted.__name__}: {e}") from None
            # unpassed defaults are not applied: they stay Python values, as in JAX
            args, kwargs = ba.args, dict(ba.kwargs)
            argnames = list(sig.parameters)
            var_pos = next((p.name for p in sig.parameters.values() if p.kind == p.VAR_POSITIONAL), None)
        else:
            argnames, var_pos = [], None
        self.args, self.kwargs = tuple(args), dict(kwargs)
        statics = []
        for i in jitted.static_argnums:
            if i < len(self.args):          # else the default is used, a Python value anyway
                statics.append((i, self.args[i]))
        for n in jitted.static_argnames:
            if n in self.kwargs:
                statics.append((n, self.kwargs[n]))
        try:
            static_key = tuple(statics)
            hash(static_key)
        except TypeError:
            raise TypeError(f"{jitted.__name__}: static arguments must be hashable, "
                            f"got {[type(v).__name__ for _, v in statics]}") from None
        self.static_pos = {i for i, _ in statics if isinstance(i, int)}
        self.static_names = {n for n, _ in statics if isinstance(n, str)}
        dyn_args = [a for i, a in enumerate(self.args) if i not in self.static_pos]
        dyn_kwargs = {k: v for k, v in self.kwargs.items() if k not in self.static_names}
        dyn_names = [(argnames[i] if i < len(argnames) and argnames[i] != var_pos else
                      f"{var_pos or 'arg'}{i}") for i in range(len(self.args)) if i not in self.static_pos]
        # explicit shapes, one per dynamic positional argument (None: automatic for that one)
        specs = self._shape_specs(jitted, dyn_args)
        self.leaves: list[_Leaf] = []
        treedefs = []
        self.has_tracer = self.has_struct = False
        self.any_auto = False
        for (name, value, spec) in ([(n, a, s) for n, a, s in zip(dyn_names, dyn_args, specs)] +
                                    [(k, v, None) for k, v in dyn_kwargs.items()]):
            paths, leaves, td = optree.tree_flatten_with_path(value, none_is_leaf=False)
            treedefs.append(td)
            spec_leaves = [None] * len(leaves)
            if spec is not None:
                s_leaves, s_td = optree.tree_flatten(spec, none_is_leaf=False,
                                                     is_leaf=lambda x: isinstance(x, ShapeDtypeStruct))
                if len(s_leaves) != len(leaves):
                    raise TypeError(f"{jitted.__name__}: shapes for argument {name} have "
                                    f"{len(s_leaves)} leaves, the argument has {len(leaves)}")
                spec_leaves = s_leaves
            for path, leaf, sp in zip(paths, leaves, spec_leaves):
                disp, ident = _path_name(name, path)
                kind = _leaf_kind(leaf, disp)
                if kind == "tracer":
                    self.has_tracer = True
                if kind == "struct":
                    self.has_struct = True
                    sp = leaf
                if sp is None and kind != "struct":
                    self.any_auto = True
                self.leaves.append(_Leaf(leaf, kind, disp, ident, sp))
        self.treedefs = treedefs
        self.on_device = any(l.kind == "array" and _on_device(l.value) for l in self.leaves)
        if self.has_tracer:
            return
        self.shapes = tuple(np.shape(l.value) if l.kind != "struct" else None for l in self.leaves)
        if specs_given := any(l.struct is not None for l in self.leaves):
            for l in self.leaves:
                if l.struct is not None and l.kind != "struct":
                    self._check_explicit(l)
        leaf_keys = tuple(self._leaf_key(l) for l in self.leaves)
        self.key = (tuple(treedefs), tuple(dyn_kwargs), leaf_keys, static_key, specs_given)

    @staticmethod
    def _shape_specs(jitted, dyn_args):
        specs = _spec_list(jitted.shapes)
        if specs is None:
            return [None] * len(dyn_args)
        if len(specs) != len(dyn_args):
            raise TypeError(f"{jitted.__name__}: shapes= has {len(specs)} entries for "
                            f"{len(dyn_args)} non-static positional arguments")
        return specs

    def _check_explicit(self, l: _Leaf):
        s = l.struct
        value = l.value
        d = np.asarray(value).dtype if l.kind == "array" else None
        if l.kind == "scalar":
            if s.ndim != 0:
                raise ShapeError(f"argument {l.display}: expected an array of rank {s.ndim} "
                                 f"{s.shape}, got a Python scalar")
            return
        if d != s.dtype:
            raise TypeError(f"argument {l.display}: expected dtype {s.dtype}, got {d}")
        if np.ndim(value) != s.ndim:
            raise ShapeError(f"argument {l.display}: expected rank {s.ndim} "
                             f"({', '.join(str(x) for x in s.shape)}), got rank {np.ndim(value)} "
                             f"with shape {np.shape(value)}")

    @staticmethod
    def _leaf_key(l: _Leaf):
        if l.struct is not None:
            return ("explicit", l.struct.dtype, l.struct.ndim)
        if l.kind == "scalar":
            return ("scalar", type(l.value))
        a = l.value
        return (a.dtype, tuple(n if n < 2 else -1 for n in np.shape(a)), _on_device(a))

    def arrays(self) -> list:
        out = []
        for l in self.leaves:
            if l.kind == "scalar":
                out.append(np.asarray(l.value, dt.WEAK_DEFAULT[type(l.value)]) if l.struct is None
                           else np.asarray(l.value, l.struct.dtype))
            else:
                out.append(l.value if _on_device(l.value) else np.asarray(l.value))
        return out

    def rebuild(self, param_tracers):
        """The function's arguments with array leaves replaced by tracers."""
        it = iter(param_tracers)
        i_td = iter(self.treedefs)
        args = []
        for i, a in enumerate(self.args):
            if i in self.static_pos:
                args.append(a)
            else:
                td = next(i_td)
                args.append(optree.tree_unflatten(td, [next(it) for _ in range(td.num_leaves)]))
        kwargs = {}
        for k, v in self.kwargs.items():
            if k in self.static_names:
                kwargs[k] = v
            else:
                td = next(i_td)
                kwargs[k] = optree.tree_unflatten(td, [next(it) for _ in range(td.num_leaves)])
        sig = self.jitted._sig
        if sig is not None:
            # re-split into what the function accepts (positional-or-keyword stay positional)
            ba = inspect.BoundArguments(sig, _ordered(sig, args, kwargs))
            return ba.args, ba.kwargs
        return tuple(args), kwargs


def _ordered(sig, args, kwargs):
    import collections
    out = collections.OrderedDict()
    names = list(sig.parameters)
    pos_i = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out[p.name] = tuple(args[pos_i:])
            pos_i = len(args)
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if pos_i < len(args):
                out[p.name] = args[pos_i]
                pos_i += 1
        elif p.kind == p.VAR_KEYWORD:
            out[p.name] = {k: v for k, v in kwargs.items() if k not in names}
        elif p.name in kwargs:
            out[p.name] = kwargs[p.name]
    return out


def jit(fun: Callable | None = None, *, shapes=None, static_argnums=(), static_argnames=(),
        backend: str | None = None, pipeline: Sequence[Pass] | None = None):
    """Compile ``fun`` for dynamic shapes.

    Without ``shapes`` (automatic mode) the first call makes every dimension of size >= 2 a
    symbol and specializes sizes 0 and 1; what the trace needs to know about a symbol is
    recorded as a guard, and a call that fails a guard traces a new entry.  With ``shapes``
    (one :class:`ShapeDtypeStruct` pytree per positional argument) the declared symbolic
    signature is the contract: calls that break it raise :class:`ShapeError`.

    ``backend``: "llvm" (the CPU), "cuda" (CuPy arrays out), "numpy" (the reference
    interpreter); by default "llvm", or "cuda" for calls whose arrays are CuPy arrays.
    """
    if fun is None:
        return lambda f: jit(f, shapes=shapes, static_argnums=static_argnums,
                             static_argnames=static_argnames, backend=backend, pipeline=pipeline)
    return Jitted(fun, shapes=shapes, static_argnums=static_argnums, static_argnames=static_argnames,
                  backend=backend, pipeline=pipeline)


def make_ir(fun: Callable, **jit_kwargs) -> Callable[..., IRModule]:
    """``make_ir(f)(*args)`` -> the traced graph IR (prints as text), for arrays or structs."""
    def trace(*args, **kwargs) -> IRModule:
        return jit(fun, **jit_kwargs).lower(*args, **kwargs).module
    return trace
