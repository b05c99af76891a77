"""Complex values as (real, imaginary) pairs of real arrays: what the primitives' complex
rules (``Primitive.complex_rule``) compute with.

SplitComplex (:mod:`relaxjax.compile.split_complex`) runs a rule in a trace, with each
complex operand given as :class:`Parts` of two real tracers and each real operand as a
tracer; the rule binds real primitives and returns Parts for a complex result.  A complex
value crossing a function's boundary (a parameter, a result, a loop carry) is *packed*: one
real array with a trailing axis of 2 holding (real, imaginary), NumPy's memory layout of a
complex array (:func:`pack`, :func:`unpack`).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from .. import dtypes as dt
from ..core import Primitive, Tracer, current_trace
from . import batching
from ..ir import Literal, TensorType


class Parts(NamedTuple):
    """A complex value as its real and imaginary parts (tracers of the part dtype)."""
    re: Any
    im: Any


def scalar(value, dtype) -> Tracer:
    """A 0-d constant of ``dtype`` (strong) in the running trace."""
    d = np.dtype(dtype)
    return Tracer(current_trace(), Literal(np.asarray(value, d), TensorType((), d)))


def type_of(x: Tracer) -> TensorType:
    return x.type


def _prim(name: str) -> Primitive:
    # the layout primitives live in modules that import this one: looked up when a rule runs
    from ..core import PRIMITIVES
    return PRIMITIVES[name]


def zeros_like(x: Tracer) -> Tracer:
    t = type_of(x)
    return _prim("broadcast_to").bind(scalar(0, t.dtype), shape=t.shape)


def pack(p: Parts) -> Tracer:
    """(re, im) -> one real array of shape ``shape + (2,)`` (interleaved, as NumPy stores
    complex numbers)."""
    shape = type_of(p.re).shape
    col = tuple(shape) + (1,)
    reshape, concat = _prim("reshape"), _prim("concatenate")
    return concat.bind(reshape.bind(p.re, new_sizes=col), reshape.bind(p.im, new_sizes=col),
                       axis=len(shape))


def unpack(x: Tracer) -> Parts:
    """A packed array (trailing axis of 2) -> its (re, im) parts."""
    shape = tuple(type_of(x).shape[:-1])
    n = len(shape)
    slc, reshape = _prim("slice"), _prim("reshape")

    def part(k: int) -> Tracer:
        s = slc.bind(x, start=(0,) * n + (k,), size=shape + (1,), step=(1,) * (n + 1))
        return reshape.bind(s, new_sizes=shape)
    return Parts(part(0), part(1))


def by_parts(name: str) -> Callable:
    """The rule of a primitive that acts on the real and the imaginary parts alike (layout
    ops, gathers, sums, add): bound once with every complex operand's real part and once
    with its imaginary part; real operands (indices, masks, predicates) go to both."""
    def rule(*args, **params):
        prim = _prim(name)
        re = prim.bind(*[a.re if isinstance(a, Parts) else a for a in args], **params)
        im = prim.bind(*[a.im if isinstance(a, Parts) else a for a in args], **params)
        return Parts(re, im)
    rule.__name__ = f"{name}_by_parts"
    return rule


def packable(name: str, packed_params: Callable) -> Callable:
    """The rule of an op that acts on every (re, im) pair alike -- layout ops (reshape,
    transpose, slice, ...), sums, add: by parts, or -- when every complex operand is at hand
    packed (a parameter, a complex gemm's result) -- once on the packed arrays with
    ``packed_params(**params)``, which extend the op over the trailing (re, im) axis (None:
    not this time).  Complex matrix products take packed operands, so a chain of transposes,
    reshapes and sums between them stays packed instead of being split and packed again."""
    rule = by_parts(name)
    rule.packed_params = packed_params
    return rule


def packed(name: str) -> Callable:
    """The rule of a primitive that only moves whole values along (control flow: loop
    carries, branch results): complex operands go in packed, and its results come out
    packed (the regions it runs were split to take and return packed values alike)."""
    def rule(*args, **params):
        prim = _prim(name)
        return prim.bind(*[pack(a) if isinstance(a, Parts) else a for a in args], **params)
    rule.__name__ = f"{name}_packed"
    return rule


def complex_operands(types) -> list:
    return [t for t in types if dt.is_complex(t.dtype)]


# ---------------------------------------------------------------------------------------
# The primitives between complex values and their parts.  Kind "complex": they only ever
# take or make complex arrays, so SplitComplex removes every one before fusion or lowering.
# ---------------------------------------------------------------------------------------

def _part_dtype(name: str):
    def rule(x, **p):
        if not dt.is_complex(x.dtype):
            raise TypeError(f"{name} takes a complex array, got {x.dtype}")
        return dt.real_dtype(x.dtype)
    return rule


real = Primitive("real", shape_rule=lambda env, x: x.shape, dtype_rule=_part_dtype("real"),
                 impl=lambda x: np.real(x).copy(), kind="complex",
                 weak_rule=lambda x: x.weak, complex_rule=lambda z: z.re)
imag = Primitive("imag", shape_rule=lambda env, x: x.shape, dtype_rule=_part_dtype("imag"),
                 impl=lambda x: np.imag(x).copy(), kind="complex",
                 weak_rule=lambda x: x.weak, complex_rule=lambda z: z.im)


def _complex_shape(env, re, im):
    from .util import broadcast_shapes
    return broadcast_shapes(env, [re.shape, im.shape], "complex")


def _complex_dtype(re, im):
    if re.dtype != im.dtype or re.dtype not in (np.dtype("float32"), np.dtype("float64")):
        raise TypeError(f"complex takes two float32 or two float64 arrays, got {re.dtype} "
                        f"and {im.dtype}")
    return dt.complex_dtype(re.dtype)


def _complex_impl(re, im):
    re, im = np.broadcast_arrays(re, im)
    out = np.empty(re.shape, dt.complex_dtype(re.dtype))
    out.real, out.imag = re, im          # exact, where re + 1j * im turns inf * 0 into NaN
    return out


def _complex_rule(re, im) -> Parts:
    shape = _complex_shape(current_trace().env, type_of(re), type_of(im))
    bcast = _prim("broadcast_to")
    return Parts(*(x if tuple(type_of(x).shape) == tuple(shape) else bcast.bind(x, shape=shape)
                   for x in (re, im)))


complex = Primitive("complex", shape_rule=_complex_shape, dtype_rule=_complex_dtype,
                    impl=_complex_impl, kind="complex",
                    weak_rule=lambda re, im: re.weak and im.weak, complex_rule=_complex_rule)
complex.__doc__ = "The complex array re + i im of two float arrays (broadcast together)."

# Batching rules (``vmap``, see ``batching``): elementwise, operands broadcast as NumPy does
real.batch = batching.broadcasting(real)
imag.batch = batching.broadcasting(imag)
complex.batch = batching.broadcasting(complex)
