"""relaxjax: compile numpy-style functions with dynamic (symbolic) shapes.

>>> import relaxjax as rj, relaxjax.numpy as rnp
>>> n, k, m = rj.dims("n k m")
>>> @rj.jit
... def f(x, w):
...     return rnp.tanh(x @ w + 1.0)
"""
from .errors import InconclusiveDimensionError, ShapeError, TracerConversionError
from .shapes import SymbolicDim, dim, dims
from .jit import CacheInfo, Compiled, Jitted, Lowered, ShapeDtypeStruct, jit, make_ir, match_cast
from .ir import IRModule, Function, TensorType
from . import numpy, nn, lax, compile  # noqa: F401
from .core import _install_operators as _install

_install()
del _install

__version__ = "0.1.0"

__all__ = ["InconclusiveDimensionError", "ShapeError", "TracerConversionError", "SymbolicDim",
           "dim", "dims", "CacheInfo", "Compiled", "Jitted", "Lowered", "ShapeDtypeStruct", "jit",
           "make_ir", "match_cast", "IRModule", "Function", "TensorType", "numpy", "nn", "lax",
           "compile"]
