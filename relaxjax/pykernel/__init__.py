"""Kernels written in Python: ``@rj.kernel`` parses a function's source (not traced) into a
loop-level program (``relaxjax.compile.tir.PrimFunc``) with symbolic buffer shapes;
``rj.call_tir`` calls it from a jitted function (or eagerly on NumPy arrays).

* ``scope.py``: the source, outputs, where locals are declared;
* ``parser.py``: building the program for one binding of the kernel's dims;
* ``verify.py``: accesses provably out of bounds;
* ``call.py``: the kernel object, dim binding, ``call_tir``;
* ``lang.py``, ``math.py``: ``rj.Buffer``, ``rj.grid``, ``rj.math``.
"""
from .call import Kernel, call_tir, kernel
from .lang import Buffer, BufferSpec, grid, prange
from . import math

__all__ = ["Kernel", "call_tir", "kernel", "Buffer", "BufferSpec", "grid", "prange", "math"]
