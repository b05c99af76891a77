"""LLVM types of NumPy dtypes and the spelling of constants."""
from __future__ import annotations

import numpy as np

from ...tir import BOOL

_TY = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "i8",
       "uint16": "i16", "uint32": "i32", "uint64": "i64", "float16": "half", "float32": "float",
       "float64": "double"}
BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
FLOAT_RANK = {"half": 0, "float": 1, "double": 2}


def llty(dtype) -> str:
    return _TY[np.dtype(dtype).name]


def memty(dtype) -> str:
    """Type in memory: NumPy stores bool as a byte."""
    return "i8" if np.dtype(dtype) == BOOL else llty(dtype)


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def signed(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def fconst(v: float, ty: str) -> str:
    """LLVM spells non-trivial float constants as 64-bit hex; half as its own bits."""
    if ty == "half":
        return "0xH%04X" % int(np.array(v, np.float16).view(np.uint16))
    if ty == "float":
        v = float(np.float32(v))
    return "0x%016X" % int(np.array(v, np.float64).view(np.uint64))


def suffix(ty: str) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}.get(ty, ty)


# The attribute group of a host segment LLVM neither optimises nor inlines into (the
# module's attribute definitions are ``engine._ATTRIBUTES``)
SEGMENT_OPTNONE = "#2"
