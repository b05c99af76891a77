"""One call's arguments for ``jit``: pytrees flattened into array leaves and static values,
each leaf's kind, display name and explicit struct, the cache key of the call, and the
function's arguments rebuilt around tracers for tracing."""
from __future__ import annotations

import collections
import inspect
import struct

import numpy as np
import optree

from . import dtypes as dt
from .core import Tracer
from .errors import ShapeError
from .ir import TensorType
from .shapes import INF, ShapeEnv, symbol
from .structs import ShapeDtypeStruct


PY_SCALARS = (bool, int, float, complex)


def leaf_kind(x, name: str):
    dt.reject_masked(x, f"argument {name}")
    if isinstance(x, np.ndarray):
        dt.canonical(x.dtype)
        return "array"
    if isinstance(x, np.generic):
        dt.canonical(x.dtype)
        return "array"
    if isinstance(x, PY_SCALARS):
        return "scalar"
    if on_device(x):
        dt.canonical(x.dtype)
        return "array"
    if isinstance(x, ShapeDtypeStruct):
        return "struct"
    if isinstance(x, Tracer):
        return "tracer"
    raise TypeError(f"argument {name}: unsupported type {type(x).__name__}; jitted functions take "
                    f"arrays, Python scalars and pytrees of them (mark other arguments static "
                    f"with static_argnums/static_argnames)")


def check_static(fname: str, sig, argnums: tuple, argnames: tuple, what: str = "static") -> tuple:
    """``static_argnums`` (``what="donate"``: ``donate_argnums``) with negative indices
    counted from the last positional parameter, after checking both against the signature
    (when it can be read): an index past the positional parameters or a name that is no
    parameter is an error naming it, as in JAX, not an argument silently never static."""
    for i in argnums:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
            raise TypeError(f"{fname}: {what}_argnums must be ints, got {i!r}")
    for n in argnames:
        if not isinstance(n, str):
            raise TypeError(f"{fname}: {what}_argnames must be strings, got {n!r}")
    if sig is None:
        return tuple(int(i) for i in argnums)
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind == p.VAR_POSITIONAL for p in params)
    out = []
    for i in argnums:
        i = int(i)
        j = i + len(positional) if i < 0 and not var_pos else i
        if j < 0 or (j >= len(positional) and not var_pos):
            raise ValueError(f"{fname}: {what}_argnums has {i}, but the function takes "
                             f"{len(positional)} positional argument{'s' * (len(positional) != 1)}"
                             f"{' (and *args: a negative index is ambiguous)' if var_pos else ''}")
        out.append(j)
    keyword = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        for n in argnames:
            if n not in keyword:
                raise ValueError(f"{fname}: {what}_argnames has {n!r}, which is not a parameter "
                                 f"the function takes by name (it takes {sorted(keyword)})")
    return tuple(out)


def static_key_of(v):
    """A static argument's part of the cache key: its type and, for numbers, its bits.

    ``==`` would let values that trace differently share an entry: ``0.0 == -0.0``
    (``x / s`` gives -inf for one), ``2 == 2.0 == np.float64(2)`` (an int, a weak float and
    a strong float64 promote differently); and a NaN, unequal to itself, would never hit."""
    t = type(v)
    if isinstance(v, tuple):
        return (t, tuple(static_key_of(e) for e in v))
    if isinstance(v, np.generic):
        return (t, v.dtype.str, v.tobytes())
    if isinstance(v, float):
        return (t, struct.pack("<d", v))
    if isinstance(v, complex):
        return (t, struct.pack("<dd", v.real, v.imag))
    return (t, v)


def on_device(x) -> bool:
    """A GPU array (CuPy's, or any with the CUDA array interface)."""
    return hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray)


def identifier(s: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in s).strip("_") or "arg"
    return out if not out[0].isdigit() else f"a{out}"


def path_name(argname: str, path: tuple) -> tuple[str, str]:
    """(display name like params['w'], identifier like params_w) for a pytree leaf."""
    disp, ident = argname, argname
    for k in path:
        disp += f"[{k!r}]"
        ident += f"_{k}"
    return disp, identifier(ident)


class Leaf:
    __slots__ = ("value", "kind", "display", "ident", "struct", "arg")

    def __init__(self, value, kind, display, ident, struct=None, arg=None):
        self.value, self.kind, self.display, self.ident, self.struct = value, kind, display, ident, struct
        self.arg = arg          # the argument it is a leaf of: its position, or its keyword

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
        a = self.value if on_device(self.value) else np.asarray(self.value)
        dims = []
        for ax, n in enumerate(a.shape):
            base = self.ident if not self.ident[-1].isdigit() else self.ident + "_"
            nm, k = f"{base}{ax}", 0
            while nm in taken:
                k += 1
                nm = f"{base}{ax}_{k}"
            taken.add(nm)
            s = symbol(nm)
            # a dim first seen empty ranges over [0, inf): the entry serves the sizes a
            # growing cache takes next (the guards the trace needed permitting); otherwise
            # [1, inf), where more relations are provable (n - 1 >= 0)
            env.declare(s, 0 if n == 0 else 1, INF, value=n)
            dims.append(s)
        return TensorType(tuple(dims), a.dtype)


def spec_list(shapes) -> list | None:
    """``jit``'s ``shapes=`` as a list with one entry per dynamic positional argument (a
    single ShapeDtypeStruct for a one-argument function), or None."""
    if shapes is None:
        return None
    return [shapes] if isinstance(shapes, ShapeDtypeStruct) else list(shapes)


class CallArgs:
    """One call's arguments split into static values and array leaves, with its cache key."""

    def __init__(self, jitted, args, kwargs):
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
            hash(tuple(v for _, v in statics))         # static arguments are hashable, as in JAX
            static_key = tuple((i, static_key_of(v)) for i, v in statics)
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
        self.leaves: list[Leaf] = []
        treedefs = []
        self.has_tracer = self.has_struct = False
        self.any_auto = False
        dyn_pos = [i for i in range(len(self.args)) if i not in self.static_pos]
        for (arg, name, value, spec) in ([(i, n, a, s) for i, n, a, s in zip(dyn_pos, dyn_names, dyn_args, specs)] +
                                         [(k, k, v, None) for k, v in dyn_kwargs.items()]):
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
                disp, ident = path_name(name, path)
                kind = leaf_kind(leaf, disp)
                if kind == "scalar" and sp is None:      # its weak type's dtype holds it exactly
                    _check_scalar(disp, leaf, dt.WEAK_DEFAULT[type(leaf)])
                if kind == "tracer":
                    self.has_tracer = True
                if kind == "struct":
                    self.has_struct = True
                    sp = leaf
                if sp is None and kind != "struct":
                    self.any_auto = True
                self.leaves.append(Leaf(leaf, kind, disp, ident, sp, arg))
        self.treedefs = treedefs
        self.on_device = any(l.kind == "array" and on_device(l.value) for l in self.leaves)
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
        specs = spec_list(jitted.shapes)
        if specs is None:
            return [None] * len(dyn_args)
        if len(specs) < len(dyn_args):
            raise TypeError(f"{jitted.__name__}: shapes= has {len(specs)} entries for "
                            f"{len(dyn_args)} non-static positional arguments")
        # (fewer arguments: trailing defaulted parameters left out, their entries unused)
        return specs[:len(dyn_args)]

    def _check_explicit(self, l: Leaf):
        s = l.struct
        value = l.value
        d = None if l.kind != "array" else value.dtype if on_device(value) else np.asarray(value).dtype
        if l.kind == "scalar":
            if s.ndim != 0:
                raise ShapeError(f"argument {l.display}: expected an array of rank {s.ndim} "
                                 f"{s.shape}, got a Python scalar")
            _check_scalar(l.display, value, s.dtype)
            return
        if d != s.dtype:
            raise TypeError(f"argument {l.display}: expected dtype {s.dtype}, got {d}")
        if np.ndim(value) != s.ndim:
            raise ShapeError(f"argument {l.display}: expected rank {s.ndim} "
                             f"({', '.join(str(x) for x in s.shape)}), got rank {np.ndim(value)} "
                             f"with shape {np.shape(value)}")

    @staticmethod
    def _leaf_key(l: Leaf):
        if l.struct is not None:
            return ("explicit", l.struct.dtype, l.struct.ndim)
        if l.kind == "scalar":
            return ("scalar", type(l.value))
        a = l.value
        return (a.dtype, tuple(n if n < 1 else -1 for n in np.shape(a)), on_device(a))

    def arrays(self) -> list:
        out = []
        for l in self.leaves:
            if l.kind == "scalar":
                out.append(np.asarray(l.value, dt.WEAK_DEFAULT[type(l.value)]) if l.struct is None
                           else np.asarray(l.value, l.struct.dtype))
            else:
                out.append(l.value if on_device(l.value) else np.asarray(l.value))
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


def _check_scalar(name: str, value, dtype: np.dtype) -> None:
    """A Python scalar given for a struct of ``dtype`` converts exactly or is an error: a
    float is not truncated to an int struct, an int out of range does not wrap."""
    if isinstance(value, complex) and dtype.kind != "c":
        raise TypeError(f"argument {name}: expected dtype {dtype}, got a Python complex {value!r}")
    if isinstance(value, bool) or dtype.kind in "fc":
        return
    if isinstance(value, float):
        raise TypeError(f"argument {name}: expected dtype {dtype}, got a Python float {value!r}")
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise OverflowError(f"argument {name}: Python int {value} is out of range for "
                                f"dtype {dtype} [{info.min}, {info.max}]")
    elif dtype.kind == "b" and value not in (0, 1):
        raise TypeError(f"argument {name}: expected dtype bool, got the Python int {value}")


def _ordered(sig, args, kwargs):
    out = collections.OrderedDict()
    names = list(sig.parameters)
    pos_i = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            if args[pos_i:]:          # (none: left out, else a defaulted parameter before it
                out[p.name] = tuple(args[pos_i:])      # left out would make it a keyword)
            pos_i = len(args)
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if pos_i < len(args):
                out[p.name] = args[pos_i]
                pos_i += 1
            elif p.kind == p.POSITIONAL_OR_KEYWORD and p.name in kwargs:
                out[p.name] = kwargs[p.name]     # by keyword after a defaulted one left out
        elif p.kind == p.VAR_KEYWORD:
            out[p.name] = {k: v for k, v in kwargs.items() if k not in names}
        elif p.name in kwargs:
            out[p.name] = kwargs[p.name]
    return out
