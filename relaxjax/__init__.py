"""relaxjax: compile numpy-style functions with dynamic (symbolic) shapes.

>>> import relaxjax as rj, relaxjax.numpy as rnp
>>> n, k, m = rj.dims("n k m")
>>> @rj.jit
... def f(x, w):
...     return rnp.tanh(x @ w + 1.0)
"""
from ._version import __version__
from .errors import InconclusiveDimensionError, KernelSyntaxError, ShapeError, TracerConversionError
from .shapes import SymbolicDim, dim, dims
from .structs import ShapeDtypeStruct
from .jit import CacheInfo, Compiled, Jitted, Lowered, eval_shape, jit, make_ir
from .ir import IRModule, Function, TensorType
from .library import register_library
from .frontend import call_library, match_cast
from .ad import grad, jacfwd, jacrev, jvp, stop_gradient, value_and_grad, vjp
from .ad_custom import checkpoint, custom_jvp, custom_vjp, remat
from .vmap import vmap
from .autobatch import autobatch
from . import numpy, nn, lax, compile, ragged  # noqa: F401
from .pykernel import Buffer, call_tir, grid, kernel, math, prange  # noqa: F401
from numpy import (bool_, float16, float32, float64, int8, int16, int32, int64,  # noqa: F401
                   uint8, uint16, uint32, uint64)
from .cache import clear as _clear_persistent




def clear_cache() -> int:
    """Delete every entry of the persistent cache of compiled code (``RELAXJAX_CACHE_DIR``,
    default ``~/.cache/relaxjax``); returns how many.  Functions already compiled in this
    process keep working; ``Jitted.clear_cache()`` empties one function's in-memory cache."""
    return _clear_persistent()



def __getattr__(name):
    # ``rj.testing`` is imported on first use: it needs hypothesis, relaxjax itself does not
    if name == "testing":
        import importlib
        return importlib.import_module(".testing", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["InconclusiveDimensionError", "ShapeError", "TracerConversionError", "SymbolicDim",
           "dim", "dims", "CacheInfo", "Compiled", "Jitted", "Lowered", "ShapeDtypeStruct", "jit",
           "make_ir", "match_cast", "IRModule", "Function", "TensorType", "numpy", "nn", "lax",
           "compile", "KernelSyntaxError", "Buffer", "call_tir", "grid", "prange", "kernel", "math", "bool_",
           "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
           "uint32", "uint64", "clear_cache", "call_library", "register_library", "grad",
           "value_and_grad", "vjp", "jvp", "jacfwd", "jacrev", "stop_gradient", "custom_vjp", "custom_jvp", "checkpoint", "remat", "vmap",
           "autobatch", "eval_shape"]
