"""A reference interpreter for loop-level programs (``PrimFunc``).

Each program is turned once into Python source (nested ``for`` loops, locals, ``if``) over
NumPy scalars of the exact dtypes, compiled with ``exec`` and cached per program.  Every
scalar ``Op`` is evaluated with the NumPy implementation of the graph primitive it is named
after, so the interpreter's results are NumPy's by construction; ``if_then_else`` is lazy
(only the taken branch runs), ``select`` is eager.  Expressions are flattened into one
statement per operation, so deep expressions cannot hit Python's nesting limits.  Every load
and store checks its indices against the buffer's shape: a program that reads or writes out
of bounds raises instead of wrapping around like a negative Python index would.

It is meant for tests (arrays of thousands of elements), not for speed.

``run_primfunc(f, arrays, dims)`` runs ``f`` in destination-passing style: ``arrays`` holds
one array per buffer parameter (outputs last, written in place).
"""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np
import sympy

from .. import tir
from ..tir import (BOOL, INDEX, Assign, Const, For, If, Load, Local, Op, PrimFunc,
                           Seq, Store, Var)
from ..errors import ShapeError
from ..shapes import dim_str
from .elementwise import convert_reference, scalar_reference

_GLOBALS = {"min": min, "max": max, "__builtins__": {}}

# Ops evaluated with Python's operators on two NumPy scalars of one (non-bool) dtype, where
# NumPy's scalar arithmetic is its ufunc's (wrapping integers, IEEE floats).
_ARITH_INFIX = {"add": "+", "sub": "-", "mul": "*"}
_CMP_INFIX = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_BIT_INFIX = {"and": "&", "or": "|", "xor": "^"}
# bool arithmetic as NumPy (and the LLVM backend) define it: + is or, * is and, - is xor
_BOOL_ARITH = {"add": "or", "mul": "and", "sub": "xor"}


# ---------------------------------------------------------------------------------------
# Scalar operations
# ---------------------------------------------------------------------------------------

def _scalar(v, dtype) -> np.generic:
    """``v`` as a NumPy scalar of ``dtype`` (integers wrap like a NumPy cast)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return np.bool_(bool(v))
    if dtype.kind in "iu":
        return np.array(int(v)).astype(dtype)[()]
    return dtype.type(v)


# Scalars go through the NumPy implementations as one-element arrays, not 0-d ones: NumPy
# takes shortcuts for 0-d operands that its array loops do not (power(x, 0.5) is sqrt there,
# so power(-inf, 0.5) is nan instead of inf), and the graph runs on arrays.

def _convert_fn(dtype) -> Callable:
    dtype = np.dtype(dtype)

    def convert(x):
        return convert_reference(np.array([x]), dtype=dtype)[0]
    return convert


def _op_fn(name: str, in_dtypes: tuple, out_dtype) -> Callable:
    """A function of NumPy scalars computing ``Op(name)`` with its primitive's reference
    implementation, returning a NumPy scalar of ``out_dtype``."""
    out_dtype = np.dtype(out_dtype)
    if name == "convert":
        return _convert_fn(out_dtype)
    if name in _BOOL_ARITH and all(d == BOOL for d in in_dtypes):
        name = _BOOL_ARITH[name]
    impl = scalar_reference(name)
    if impl is None:
        raise NotImplementedError(f"the loop interpreter has no scalar operation {name!r}")
    dts = [np.dtype(d) for d in in_dtypes]

    def fn(*args):
        r = np.asarray(impl(*[np.array([a], d) for a, d in zip(args, dts)]))
        if r.dtype != out_dtype:
            r = r.astype(out_dtype)
        return r[0]
    fn.__name__ = f"op_{name}"
    return fn


def _select(c, a, b):
    return a if c else b


def _oob(fname, buf, axis, i, n):
    raise IndexError(f"loop program {fname}: index {i} is out of bounds for axis {axis} of "
                     f"buffer {buf} with size {n}")


def _arange(start, stop):
    return np.arange(start, stop, dtype=INDEX)


# ---------------------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------------------

class _Gen:
    def __init__(self, f: PrimFunc):
        self.f = f
        self.g: dict = {"_select": _select, "_oob": _oob, "_arange": _arange,
                        "_fname": f.name, "__builtins__": {}}
        self.lines: list[str] = []
        self.names: dict = {}             # TIR variable name -> Python local
        self.n_tmp = 0
        self.consts: dict = {}
        self.ops: dict = {}
        self.buf: dict = {}               # id(Buffer) -> (python name, shape locals, name)

    # -- names ---------------------------------------------------------------------------
    def tmp(self) -> str:
        self.n_tmp += 1
        return f"_t{self.n_tmp}"

    def var(self, name: str) -> str:
        if name not in self.names:
            self.names[name] = f"v{len(self.names)}_"
        return self.names[name]

    def const(self, c: Const) -> str:
        key = (np.dtype(c.dtype).str, repr(c.value))
        if key not in self.consts:
            nm = f"_k{len(self.consts)}"
            self.consts[key] = nm
            self.g[nm] = _scalar(c.value, c.dtype)
        return self.consts[key]

    def opfn(self, e: Op) -> str:
        key = (e.name, tuple(np.dtype(a.dtype).str for a in e.args), np.dtype(e.dtype).str)
        if key not in self.ops:
            nm = f"_op{len(self.ops)}_{e.name}"
            self.ops[key] = nm
            self.g[nm] = _op_fn(e.name, tuple(np.dtype(a.dtype) for a in e.args), e.dtype)
        return self.ops[key]

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    # -- the program -----------------------------------------------------------------------
    def source(self) -> str:
        f = self.f
        self.emit(0, "def _prim(_bufs, _dims):")
        for k, b in enumerate(f.params):
            shape = [f"_s{k}_{ax}" for ax in range(len(b.shape))]
            self.buf[id(b)] = (f"_b{k}", shape, b.name)
            self.emit(1, f"_b{k} = _bufs[{k}]")
            if shape:
                self.emit(1, f"{', '.join(shape)}, = _b{k}.shape")
        for k, d in enumerate(f.dim_vars):
            self.emit(1, f"{self.var(d)} = _dims[{k}]")
        self.stmt(f.body, 1)
        self.emit(1, "return None")
        return "\n".join(self.lines) + "\n"

    # -- statements ----------------------------------------------------------------------
    def block(self, s, depth: int) -> None:
        """A nested body; ``pass`` when it emits nothing (an empty Seq)."""
        n = len(self.lines)
        self.stmt(s, depth)
        if len(self.lines) == n:
            self.emit(depth, "pass")

    def stmt(self, s, depth: int) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, For):
            start = self.expr(s.start, depth)
            ext = self.expr(s.extent, depth)
            self.emit(depth, f"for {self.var(s.var.name)} in _arange({start}, {ext}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, Store):
            idx = self.index(s.buffer, s.index, depth)
            v = self.expr(s.value, depth)
            self.emit(depth, f"{self.buf[id(s.buffer)][0]}[{idx}] = {v}")
        elif isinstance(s, (Local, Assign)):
            v = self.expr(s.init if isinstance(s, Local) else s.value, depth)
            self.emit(depth, f"{self.var(s.var.name)} = {v}")
        elif isinstance(s, If):
            c = self.expr(s.cond, depth)
            self.emit(depth, f"if {c}:")
            self.block(s.then, depth + 1)
            if s.else_ is not None:
                self.emit(depth, "else:")
                self.block(s.else_, depth + 1)
        else:
            raise TypeError(f"not a loop-level statement: {s!r}")

    def index(self, b, index, depth: int) -> str:
        """Index temporaries for an access to ``b``, each checked against the buffer's shape."""
        if id(b) not in self.buf:
            raise TypeError(f"{self.f.name}: buffer {b.name} is not a parameter")
        _, shape, name = self.buf[id(b)]
        if not index:
            return "()"
        parts = []
        for ax, (i, n) in enumerate(zip(index, shape)):
            v = self.expr(i, depth)
            self.emit(depth, f"if not 0 <= {v} < {n}: _oob(_fname, {name!r}, {ax}, {v}, {n})")
            parts.append(v)
        return ", ".join(parts) + ("," if len(parts) == 1 else "")

    # -- expressions: each operation becomes one assignment to a temporary ----------------
    def expr(self, e, depth: int) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            if e.name not in self.names:
                raise NameError(f"{self.f.name}: variable {e.name} is used outside its scope")
            return self.names[e.name]
        if isinstance(e, Load):
            idx = self.index(e.buffer, e.index, depth)
            t = self.tmp()
            self.emit(depth, f"{t} = {self.buf[id(e.buffer)][0]}[{idx}]")
            return t
        if not isinstance(e, Op):
            raise TypeError(f"not a loop-level expression: {e!r}")
        if e.name == "if_then_else":                       # lazy: only the taken branch
            c = self.expr(e.args[0], depth)
            t = self.tmp()
            self.emit(depth, f"if {c}:")
            self.emit(depth + 1, f"{t} = {self.expr(e.args[1], depth + 1)}")
            self.emit(depth, "else:")
            self.emit(depth + 1, f"{t} = {self.expr(e.args[2], depth + 1)}")
            return t
        args = [self.expr(a, depth) for a in e.args]
        t = self.tmp()
        dts = [np.dtype(a.dtype) for a in e.args]
        same = len(args) == 2 and dts[0] == dts[1]
        out = np.dtype(e.dtype)
        if e.name == "select":                             # eager: both values computed
            self.emit(depth, f"{t} = _select({', '.join(args)})")
        elif same and e.name in _ARITH_INFIX and dts[0] == out and out != BOOL:
            self.emit(depth, f"{t} = {args[0]} {_ARITH_INFIX[e.name]} {args[1]}")
        elif same and e.name in _CMP_INFIX and out == BOOL:
            self.emit(depth, f"{t} = {args[0]} {_CMP_INFIX[e.name]} {args[1]}")
        elif same and e.name in _BIT_INFIX and dts[0] == out and out.kind in "biu":
            self.emit(depth, f"{t} = {args[0]} {_BIT_INFIX[e.name]} {args[1]}")
        else:
            self.emit(depth, f"{t} = {self.opfn(e)}({', '.join(args)})")
        return t


# ---------------------------------------------------------------------------------------
# Compiled programs
# ---------------------------------------------------------------------------------------

class CompiledPrimFunc:
    """A PrimFunc as a Python function; ``source`` is the generated code.  (It keeps the
    program's buffers and names, not the program, so the per-program cache stays weak.)"""

    def __init__(self, f: PrimFunc):
        tir.verify_primfunc(f)
        self.name = f.name
        self.params = list(f.params)
        self.n_outputs = f.n_outputs
        self.zero_outputs = f.zero_outputs
        self.dim_vars = list(f.dim_vars)
        gen = _Gen(f)
        self.source = gen.source()
        g = gen.g
        exec(compile(self.source, f"<relaxjax loops {f.name}>", "exec"), g)  # noqa: S102
        self._fn = g["_prim"]
        dim_names = set(self.dim_vars)
        # dims bound from buffer shapes: (dim name, param position, axis)
        self._binders = []
        for k, b in enumerate(self.params):
            for ax, d in enumerate(b.shape):
                if isinstance(d, sympy.Symbol) and d.name in dim_names:
                    self._binders.append((d.name, k, ax))
        self._shape_code = [[(int(d) if isinstance(d, (int, np.integer)) else
                              compile(dim_str(d), "<dim>", "eval")) for d in b.shape]
                            for b in self.params]

    def bind_dims(self, arrays: list, dims: dict | None = None) -> dict:
        """The program's dims: from the buffers' shapes, else from ``dims``."""
        out: dict = {}
        for name, k, ax in self._binders:
            if name not in out and k < len(arrays) and arrays[k] is not None:
                out[name] = int(np.shape(arrays[k])[ax])
        for name in self.dim_vars:
            if name not in out:
                if dims is None or name not in dims:
                    raise ShapeError(f"loop program {self.name}: dim {name} is not bound by its "
                                     f"buffers' shapes nor by the caller")
                out[name] = int(dims[name])
        return out

    def buffer_shape(self, k: int, D: dict) -> tuple:
        return tuple(c if isinstance(c, int) else int(eval(c, _GLOBALS, D))  # noqa: S307
                     for c in self._shape_code[k])

    def allocate_outputs(self, inputs: list, dims: dict | None = None) -> list:
        """Fresh output arrays for ``inputs``, filled with a poison value (NaN for floats,
        an extreme value for integers) so that elements a program fails to write show."""
        D = self.bind_dims(list(inputs), dims)
        outs = []
        n_in = len(self.params) - self.n_outputs
        for k in range(n_in, len(self.params)):
            dtype = np.dtype(self.params[k].dtype)
            if self.zero_outputs:
                fill = 0
            elif dtype.kind == "f":
                fill = np.nan
            elif dtype.kind in "iu":
                fill = np.iinfo(dtype).min if dtype.kind == "i" else np.iinfo(dtype).max
            else:
                fill = False
            outs.append(np.full(self.buffer_shape(k, D), fill, dtype))
        return outs

    def __call__(self, arrays: list, dims: dict | None = None) -> None:
        if len(arrays) != len(self.params):
            raise TypeError(f"loop program {self.name} takes {len(self.params)} buffers, got "
                            f"{len(arrays)}")
        D = self.bind_dims(arrays, dims)
        for k, (b, a) in enumerate(zip(self.params, arrays)):
            if not isinstance(a, np.ndarray) or a.dtype != b.dtype:
                raise TypeError(f"loop program {self.name}: buffer {b.name} is {b.type_str()}, "
                                f"got {getattr(a, 'dtype', type(a).__name__)}")
            want = self.buffer_shape(k, D)
            if a.shape != want:
                dims_s = ", ".join(f"{n}={v}" for n, v in D.items())
                raise ShapeError(f"loop program {self.name}: buffer {b.name}: {b.type_str()} "
                                 f"with {dims_s} is {list(want)}, got an array of shape "
                                 f"{list(a.shape)}")
            if k >= len(self.params) - self.n_outputs and not a.flags.writeable:
                raise ValueError(f"loop program {self.name}: output buffer {b.name} is read-only")
        with np.errstate(all="ignore"):
            self._fn(arrays, [np.int64(D[d]) for d in self.dim_vars])


_CACHE: "weakref.WeakKeyDictionary[PrimFunc, CompiledPrimFunc]" = weakref.WeakKeyDictionary()


def compile_primfunc(f: PrimFunc) -> CompiledPrimFunc:
    """The interpreter for ``f``, generated once per program."""
    c = _CACHE.get(f)
    if c is None:
        c = _CACHE[f] = CompiledPrimFunc(f)
    return c


def run_primfunc(f: PrimFunc, arrays: list, dims: dict | None = None) -> None:
    """Run ``f`` on one array per buffer (outputs last, written in place)."""
    compile_primfunc(f)(arrays, dims)


def check_host(f: PrimFunc, args, D: dict, eval_dim: Callable) -> None:
    """The run-time checks a caller makes before calling ``f`` (``f.host_checks``), as NumPy
    reports them: gather indices out of range raise IndexError, a reduction without
    identity over an empty axis ValueError.  ``args`` are the call's arguments: a list, or
    a function of the position (a backend that must fetch them from a device)."""
    arg = args if callable(args) else args.__getitem__
    for check in f.host_checks:
        kind, pos, size, axis = check
        n = eval_dim(size, D)
        if kind == "nonempty":          # pos: the reduction's name in NumPy's message
            if n == 0:
                raise ValueError(f"attempt to get {pos} of an empty sequence" if pos.startswith("arg")
                                 else f"zero-size array to reduction operation {pos} which has no identity")
            continue
        if kind != "index_range":
            raise NotImplementedError(f"host check {kind!r}")
        idx = np.asarray(arg(pos))
        if idx.size:
            lo, hi = idx.min(), idx.max()
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
