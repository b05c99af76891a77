"""Dtypes and NumPy 2 (NEP 50) promotion, with Python scalars as *weak* types.

NumPy itself is the oracle: ``ufunc.resolve_dtypes`` implements NEP 50 for a
loop, and Python types (``int``, ``float``, ``bool``) stand for weak operands.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any

import numpy as np

SUPPORTED = tuple(np.dtype(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                        "uint16", "uint32", "uint64", "float16", "float32",
                                        "float64", "complex64", "complex128"))
_SHORT = {"bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
          "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16",
          "float32": "f32", "float64": "f64", "complex64": "c64", "complex128": "c128"}
_FROM_SHORT = {v: k for k, v in _SHORT.items()}

# The dtype a weak Python scalar takes when nothing strong is around (NumPy defaults).
WEAK_DEFAULT = {bool: np.dtype("bool"), int: np.dtype("int64"), float: np.dtype("float64"),
                complex: np.dtype("complex128")}


def canonical(dtype: Any) -> np.dtype:
    """Normalise a dtype spelling ("float32", np.float32, "f32", dtype) and check support."""
    if isinstance(dtype, str) and dtype in _FROM_SHORT:
        dtype = _FROM_SHORT[dtype]
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"not a dtype: {dtype!r}") from e
    if dt not in SUPPORTED:
        raise TypeError(f"dtype {dt} is not supported by relaxjax "
                        f"(supported: {', '.join(str(d) for d in SUPPORTED)})")
    return dt


def short_name(dtype: np.dtype) -> str:
    return _SHORT[np.dtype(dtype).name]


def python_type_of(dtype: np.dtype) -> type:
    """The Python scalar type that stands for a weak value of this dtype's kind."""
    k = np.dtype(dtype).kind
    return bool if k == "b" else float if k == "f" else complex if k == "c" else int


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_complex(dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def real_dtype(dtype) -> np.dtype:
    """The dtype of a complex dtype's parts (complex64 -> float32); a real dtype itself."""
    d = np.dtype(dtype)
    return np.dtype(f"float{d.itemsize * 4}") if d.kind == "c" else d


def complex_dtype(dtype) -> np.dtype:
    """The complex dtype whose parts are ``dtype`` (float32 -> complex64; float64 and every
    other real dtype -> complex128, as NumPy promotes them against a Python complex)."""
    d = np.dtype(dtype)
    if d.kind == "c":
        return d
    return np.dtype("complex64") if d in (np.dtype("float32"), np.dtype("float16")) else \
        np.dtype("complex128")


def is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def is_bool(dtype) -> bool:
    return np.dtype(dtype).kind == "b"


@lru_cache(maxsize=None)
def resolve_ufunc(ufunc_name: str, operands: tuple) -> tuple[tuple[np.dtype, ...], tuple[np.dtype, ...]]:
    """Loop dtypes NumPy picks for ``ufunc`` on operands given as dtypes or weak Python types.

    Returns (input dtypes, output dtypes).  Raises TypeError like NumPy when no loop exists.
    """
    uf = getattr(np, ufunc_name)
    # NumPy's loop lookup takes int/float for weak scalars but not bool; a Python bool is the
    # lowest kind, so as a strong bool it promotes the same way
    ops = tuple(np.dtype(bool) if o is bool else o for o in operands)
    if all(isinstance(o, type) for o in ops):
        # only weak operands (a loop index against a Python int): NumPy's loop lookup would
        # say object; Python scalars alone compute in their default dtypes
        ops = tuple(np.result_type(o(0)) for o in ops)
    try:
        res = uf.resolve_dtypes(ops + (None,) * uf.nout)
    except TypeError as e:  # NumPy raises a TypeError subclass when no loop exists
        names = ", ".join(getattr(o, "__name__", str(o)) for o in operands)
        raise TypeError(f"{ufunc_name} is not defined for operands of type ({names})") from e
    return tuple(res[:uf.nin]), tuple(res[uf.nin:])


@lru_cache(maxsize=None)
def result_type(*operands) -> np.dtype:
    """``np.result_type`` with Python types standing for weak scalars (NEP 50)."""
    reps = [o if isinstance(o, np.dtype) else o(0) for o in operands]
    return np.result_type(*reps)


@lru_cache(maxsize=None)
def reduction_dtype(fn_name: str, dtype: np.dtype) -> np.dtype:
    """The dtype NumPy gives for ``np.<fn_name>`` over an array of ``dtype`` (sum of int32 -> int64, ...)."""
    return getattr(np, fn_name)(np.zeros((1,), dtype)).dtype


def reject_masked(x, where: str = "a masked array used in a traced function") -> None:
    """Masked arrays would lose their mask (every conversion keeps only the data): a
    TypeError saying so, where one enters a trace or a jitted call."""
    ma = sys.modules.get("numpy.ma")     # not imported: no masked array exists (saves 16 ms)
    if ma is not None and isinstance(x, ma.MaskedArray):
        raise TypeError(f"{where}: masked arrays are not supported (the mask would be lost); "
                        f"pass x.filled(value), or the data and the mask as two arrays")
