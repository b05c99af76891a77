"""The Tracer's operators and array methods, and NumPy's dispatch to this layer.

The tracing core (``relaxjax.core``) defines ``Tracer`` without them: what ``x + y``,
``x[i]``, ``x.sum()`` or ``np.exp(x)`` mean is NumPy's API, which lives here.  Importing
``relaxjax.numpy`` installs them once; so is arithmetic between a symbolic dim and a
non-integer (``n / 2`` inside a trace is a traced scalar, as NumPy would make it a float),
and NumPy's ufuncs on dims (``np.sqrt(n)``).
"""
from __future__ import annotations

import operator

import numpy as np

from ..core import Tracer, current_trace, find_trace
from ..shapes import SymbolicDim, numpy_int_dim, set_value_op_hook
from ._at import IndexUpdateHelper, inplace, setitem
from ._indexing import getitem

_METHODS = ("reshape", "astype", "sum", "mean", "max", "min", "prod", "argmax", "argmin", "any",
            "all", "var", "std", "transpose", "swapaxes", "squeeze", "ravel", "flatten", "clip",
            "round", "take", "repeat", "cumsum", "cumprod", "diagonal", "trace", "dot", "nonzero",
            "conj", "conjugate", "ptp", "copy", "argsort")


def _method(rnp, name: str):
    def m(self, *args, **kwargs):
        if name == "astype":
            return rnp.astype(self, *args, **kwargs)
        if name == "flatten":
            return rnp.ravel(self)
        if name == "reshape" and args and not isinstance(args[0], (tuple, list)) and len(args) > 1:
            args = (args,)
        if name == "reshape" and len(args) == 1 and not isinstance(args[0], (tuple, list)):
            args = ((args[0],),)
        if name == "transpose" and args and not isinstance(args[0], (tuple, list)):
            args = (args,)
        return getattr(rnp, name)(self, *args, **_without_out(f"{name}()", kwargs))
    m.__name__ = name
    return m


def _array_ufunc(rnp):
    def dispatch(self, ufunc, method, *inputs, **kwargs):
        """NumPy ufuncs on tracers dispatch to relaxjax.numpy (np.exp(x) works in @jit), their
        methods too (np.add.outer, np.add.reduce, np.maximum.accumulate)."""
        fn = getattr(rnp, ufunc.__name__, None)
        if method != "__call__":
            fn = getattr(fn, method, None)
        if fn is None:
            raise NotImplementedError(
                f"numpy.{ufunc.__name__}{'' if method == '__call__' else '.' + method} on traced "
                f"arrays is not supported by relaxjax.numpy")
        return fn(*inputs, **_without_out(f"numpy.{ufunc.__name__}", kwargs))
    return dispatch


def _array_function(rnp):
    def dispatch(self, func, types, args, kwargs):
        """NumPy's functions on tracers (np.sum(x), np.concatenate([x, y]) in @jit) dispatch to
        the relaxjax.numpy function of the same name (NEP 18)."""
        module = func.__module__ or ""
        ns = rnp if module == "numpy" else \
            getattr(rnp, module[len("numpy."):], None) if module.startswith("numpy.") else None
        fn = getattr(ns, func.__name__, None)
        if fn is None:
            raise NotImplementedError(f"{module}.{func.__name__} on traced arrays is not supported "
                                      f"by relaxjax.numpy")
        return fn(*args, **_without_out(f"{module}.{func.__name__}", kwargs))
    return dispatch


def _without_out(what: str, kwargs: dict) -> dict:
    """NumPy's ``out=None`` (what its wrappers pass along) means nothing here; a real ``out=``
    cannot be honoured on traced values."""
    out = kwargs.get("out")
    if out is not None and not (isinstance(out, tuple) and all(o is None for o in out)):
        raise TypeError(f"{what}(..., out=...) is not supported on traced arrays: use the "
                        f"returned array")
    return {k: v for k, v in kwargs.items() if k != "out"}


# NumPy ufuncs that are integer arithmetic on dims (np.int64(2) * n stays a dim)
_DIM_ARITHMETIC = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
                   "floor_divide": operator.floordiv, "remainder": operator.mod}


def _dim_array_ufunc(rnp):
    def dispatch(self, ufunc, method, *inputs, **kwargs):
        """NumPy ufuncs on symbolic dims: integer arithmetic stays dim arithmetic; anything
        else (np.sqrt(n), np.log2(n), n * x) is a traced value, as for a Python int."""
        if method != "__call__" or kwargs:
            return NotImplemented
        arith = _DIM_ARITHMETIC.get(ufunc.__name__)
        if arith is not None and all(isinstance(a, (int, np.integer, SymbolicDim)) and
                                     not isinstance(a, (bool, np.bool_)) for a in inputs):
            # NumPy gives an np.int64 scalar: a dim that promotes like one
            r = arith(*[a if isinstance(a, SymbolicDim) else int(a) for a in inputs])
            return numpy_int_dim(r.expr, r.bounds) if isinstance(r, SymbolicDim) else np.int64(r)
        fn = getattr(rnp, ufunc.__name__, None)
        return NotImplemented if fn is None else fn(*inputs)
    return dispatch


def _operator(fn):
    """The version of a NumPy function that implements a Python operator (weak operands
    give a weak result), where it has one."""
    return getattr(fn, "as_operator", fn)


def _dim_value_op(rnp):
    ops = {k: _operator(f) for k, f in (("truediv", rnp.true_divide), ("pow", rnp.power), ("_add", rnp.add),
                                         ("_sub", rnp.subtract), ("_mul_", rnp.multiply),
                                         ("floordiv", rnp.floor_divide), ("mod", rnp.mod))}

    def dim_value_op(dim, other, opname: str, reflected: bool):
        fn = ops.get(opname)
        if fn is None or find_trace([dim, other]) is None and not isinstance(other, (int, float, complex)):
            return NotImplemented
        if current_trace() is None:
            raise TypeError(f"cannot compute {opname} of the symbolic dim {dim} with "
                            f"{type(other).__name__} outside a trace")
        return fn(other, dim) if reflected else fn(dim, other)
    return dim_value_op


def install(rnp) -> None:
    """Give ``Tracer`` the operators and methods of ``rnp`` (the relaxjax.numpy namespace)."""
    binops = {"add": rnp.add, "sub": rnp.subtract, "mul": rnp.multiply, "truediv": rnp.true_divide,
              "floordiv": rnp.floor_divide, "mod": rnp.mod, "pow": rnp.power, "matmul": rnp.matmul,
              "and": rnp.bitwise_and, "or": rnp.bitwise_or, "xor": rnp.bitwise_xor,
              "lshift": rnp.left_shift, "rshift": rnp.right_shift}
    for name, fn in binops.items():
        fn = _operator(fn)
        setattr(Tracer, f"__{name}__", lambda a, b, fn=fn: fn(a, b))
        setattr(Tracer, f"__r{name}__", lambda a, b, fn=fn: fn(b, a))
    cmps = {"lt": rnp.less, "le": rnp.less_equal, "gt": rnp.greater, "ge": rnp.greater_equal,
            "eq": rnp.equal, "ne": rnp.not_equal}
    for name, fn in cmps.items():
        setattr(Tracer, f"__{name}__", lambda a, b, fn=fn: fn(a, b))
    neg, absolute, invert = _operator(rnp.negative), _operator(rnp.abs), _operator(rnp.invert)
    Tracer.__neg__ = lambda a: neg(a)
    Tracer.__pos__ = lambda a: rnp.positive(a)
    # like ndarray.__pow__, x ** 2 is square (bool ** 2 -> int8, as in NumPy)
    Tracer.__pow__ = lambda a, b: rnp.square(a) if type(b) in (int, float) and b == 2 else rnp.power(a, b)
    Tracer.__abs__ = lambda a: absolute(a)
    Tracer.__invert__ = lambda a: invert(a)
    Tracer.__getitem__ = lambda a, idx: getitem(a, idx)
    Tracer.__setitem__ = setitem                 # x[i] = v rebinds x (functional update)
    Tracer.at = property(IndexUpdateHelper)      # JAX's x.at[i].set(v), .add(v), ...
    inplace_ops = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
                   "floordiv": "floor_divide", "mod": "remainder", "pow": "power",
                   "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
                   "lshift": "left_shift", "rshift": "right_shift"}
    for name, ufunc in inplace_ops.items():
        setattr(Tracer, f"__i{name}__", inplace(ufunc))
    Tracer.__array_ufunc__ = _array_ufunc(rnp)
    Tracer.__array_function__ = _array_function(rnp)
    SymbolicDim.__array_ufunc__ = _dim_array_ufunc(rnp)
    for name in _METHODS:
        if hasattr(rnp, name) or name in ("astype", "flatten"):
            setattr(Tracer, name, _method(rnp, name))
    Tracer.real = property(lambda a: rnp.real(a))
    Tracer.imag = property(lambda a: rnp.imag(a))
    Tracer.T = property(lambda a: rnp.transpose(a))
    Tracer.mT = property(lambda a: rnp.swapaxes(a, -1, -2))
    set_value_op_hook(_dim_value_op(rnp))
