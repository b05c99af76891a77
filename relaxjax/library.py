"""External functions called in destination-passing style: ``rj.call_library``.

A library function is registered once by name with one implementation per kind of backend
(:func:`register_library`) and called from traced code (or eagerly) with its inputs and the
struct info of its outputs (:func:`call_library`).  Inside ``@rj.jit`` the call becomes a
binding ``call_library("name", x, ...)`` whose callee is a :class:`LibraryFunc`; every
backend runs it through the registry:

* ``llvm``: a *native* ``cpu`` implementation (a C function pointer with the ABI below) is
  called directly from the generated segment code, without the GIL and without a trip
  through Python; a Python ``cpu`` callable runs between segments as a host operation.
* ``numpy`` (the reference backend) and ``cuda-emulated``: the ``numpy`` callable
  (default: the ``cpu`` callable when it is Python).
* ``cuda``: the ``cuda`` callable, on CuPy arrays.

Native ABI (``RJ_LIBRARY_ABI``)::

    int32_t f(void *const *data, const int64_t *shapes, const int64_t *ndims, int64_t nargs);

``nargs`` arrays are passed, the inputs in call order and then the outputs; ``data[i]`` is
array ``i``'s C-contiguous data, ``ndims[i]`` its rank and ``shapes`` all the arrays' dims
concatenated (array 0's ``ndims[0]`` dims, then array 1's, ...).  Outputs are fresh buffers
(never aliasing an input, contents undefined) that the function must fill; inputs are
read-only.  dtypes are not passed: a name stands for fixed dtypes (register one name per
dtype).  Return 0 on success; any other value is a failure status, turned into the
exception the registration's ``error`` gives (default ``RuntimeError``) after the call.
The function runs without the GIL, possibly on several threads at once.

Python implementations are called ``f(*inputs, *outputs)`` with NumPy arrays (CuPy arrays
for ``cuda``), the inputs as read-only views, write the outputs in place, and may return a
nonzero int status (or raise).
"""
from __future__ import annotations

import ctypes
import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import dtypes as dt

__all__ = ["register_library", "lookup", "registered_libraries", "LibraryFunc", "attention_name",
           "attention_lengths_name", "attention_varlen_name",
           "LibraryImpl", "lazy", "NATIVE_SIGNATURE"]

RJ_LIBRARY_ABI = ("int32_t f(void *const *data, const int64_t *shapes, const int64_t *ndims, "
                  "int64_t nargs)")

#: the ctypes prototype of a native implementation
NATIVE_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                    ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                                    ctypes.c_int64)


@dataclass(eq=False)
class LibraryFunc:
    """The callee of a ``call_library`` binding: a registered function, by name."""
    name: str
    call_kind = "library"

    def text(self) -> str:
        return f"# library {self.name}"


class lazy:
    """An implementation resolved at first use from ``"package.module:attribute"`` (an
    attribute that is a zero-argument function is called): keeps heavy imports (CuPy,
    compiled LAPACK wrappers) out of registration."""

    def __init__(self, path: str):
        self.path = path
        self._value = None

    def resolve(self):
        if self._value is None:
            mod, _, attr = self.path.partition(":")
            v = getattr(importlib.import_module(mod), attr)
            self._value = v() if getattr(v, "_rj_loader", False) else v
        return self._value

    def __repr__(self) -> str:
        return f"lazy({self.path!r})"


def loader(fn: Callable) -> Callable:
    """Mark a zero-argument function that :class:`lazy` calls to get the implementation."""
    fn._rj_loader = True
    return fn


def native_address(f: Any) -> int | None:
    """The address of a native function (an int, a ctypes function pointer or a cffi
    function), or None when ``f`` is a Python callable."""
    if isinstance(f, bool):
        raise TypeError("a library implementation cannot be a bool")
    if isinstance(f, (int, np.integer)):
        if int(f) == 0:
            raise ValueError("a native library implementation cannot be a null pointer")
        return int(f)
    if isinstance(f, ctypes._CFuncPtr):                     # CDLL attributes, CFUNCTYPE(...)
        return ctypes.cast(f, ctypes.c_void_p).value
    if type(f).__module__ == "_cffi_backend":             # cffi: ffi.cast / lib.f
        import cffi
        return int(cffi.FFI().cast("uintptr_t", f))
    return None


class LibraryImpl:
    """One registered library function (see :func:`register_library`)."""

    def __init__(self, name, cpu, cuda, numpy, num_inputs, num_outputs, out_dtypes, error, version,
                 stacked=False):
        self.name = name
        self.stacked = stacked
        self._cpu, self._cuda, self._numpy = cpu, cuda, numpy
        self.num_inputs, self.num_outputs, self.out_dtypes = num_inputs, num_outputs, out_dtypes
        self.error = error
        self.version = version          # bumped by each registration: native symbols are renamed
        self._lock = threading.Lock()

    @staticmethod
    def _resolved(f):
        return f.resolve() if isinstance(f, lazy) else f

    @property
    def cpu(self):
        return self._resolved(self._cpu)

    @property
    def cpu_native(self) -> int | None:
        """The address of the native cpu implementation, or None."""
        c = self.cpu
        return None if c is None or c is BUILTIN else native_address(c)

    @property
    def cpu_python(self) -> Callable | None:
        c = self.cpu
        return c if c is not None and c is not BUILTIN and native_address(c) is None else None

    @property
    def numpy(self) -> Callable | None:
        n = self._resolved(self._numpy)
        return n if n is not None else self.cpu_python

    @property
    def cuda(self) -> Callable | None:
        return self._resolved(self._cuda)

    # -- checks and errors --------------------------------------------------------------------
    def check_call(self, in_types: Sequence, out_types: Sequence) -> None:
        """Raise TypeError when the call does not fit the registration."""
        if self.num_inputs is not None and len(in_types) != self.num_inputs:
            raise TypeError(f"call_library({self.name!r}): takes {self.num_inputs} inputs, "
                            f"got {len(in_types)}")
        if self.num_outputs is not None and len(out_types) != self.num_outputs:
            raise TypeError(f"call_library({self.name!r}): produces {self.num_outputs} outputs, "
                            f"got {len(out_types)} out structs")
        if self.out_dtypes is not None:
            want = self.out_dtypes
            if callable(want):
                want = want(*[np.dtype(t.dtype) for t in in_types])
            want = [np.dtype(d) for d in want]
            got = [np.dtype(t.dtype) for t in out_types]
            if len(want) != len(got):
                raise TypeError(f"call_library({self.name!r}): produces {len(want)} outputs, "
                                f"got {len(got)} out structs")
            for k, (w, g) in enumerate(zip(want, got)):
                if w != g:
                    raise TypeError(f"call_library({self.name!r}): output {k} is {w}, the out "
                                    f"struct says {g}")

    def raise_status(self, status: int) -> None:
        if self.error is not None:
            e = self.error(int(status))
            if e is not None:
                raise e
        raise RuntimeError(f"library function {self.name!r} failed with status {int(status)}")

    def missing(self, backend: str, kind: str) -> NotImplementedError:
        return NotImplementedError(
            f"library function {self.name!r} has no implementation for the {backend!r} backend; "
            f"register one with rj.register_library({self.name!r}, {kind}=...)")

    # -- running on NumPy arrays -----------------------------------------------------------------
    def run_numpy(self, inputs: list, outputs: list) -> None:
        """Run on host arrays: the numpy callable, else the cpu one (Python or native)."""
        fn = self.numpy
        if fn is not None:
            status = fn(*[read_only(a) for a in inputs], *outputs)
        elif self.cpu_native is not None:
            status = call_native(self.cpu_native, inputs, outputs)
        else:
            raise self.missing("numpy", "numpy")
        if isinstance(status, (int, np.integer)) and not isinstance(status, bool) and status:
            self.raise_status(status)

    def __repr__(self) -> str:
        return f"LibraryImpl({self.name!r})"


BUILTIN = object()          # cpu implementation generated by the LLVM backend itself (gemm)

_REGISTRY: dict[str, LibraryImpl] = {}
_VERSIONS: dict[str, int] = {}
# Registrations replaced by a later one whose cpu implementation is (or may be) native, kept
# for the process: code compiled before the replacement has the native function's address
# in its machine code and keeps calling it, so it must never be freed (a ctypes callback's
# thunk is freed with the CFUNCTYPE object; a cffi callback's with its handle).
_RETIRED: list = []
_LOCK = threading.Lock()


def register_library(name: str, *, cpu: Any = None, cuda: Any = None, numpy: Any = None,
                     num_inputs: int | None = None, num_outputs: int | None = None,
                     out_dtypes: Sequence | Callable | None = None,
                     error: Callable[[int], BaseException] | None = None, stacked: bool = False) -> None:
    """Register (or replace) the implementations of library function ``name``.

    ``cpu``: a native function (int address, ctypes function pointer, cffi function) with the
    ABI in this module's docstring, called directly from generated code; or a Python
    callable ``f(*inputs, *outputs)``, run between native segments on the llvm backend.
    ``numpy``: a Python callable for the numpy reference backend and the CUDA emulator
    (default: ``cpu`` when it is Python).  ``cuda``: a Python callable on CuPy arrays.
    Any of them may be a :class:`lazy` reference.  ``num_inputs``/``num_outputs``/
    ``out_dtypes`` (dtypes, or a function of the input dtypes giving them) check calls at
    trace time; ``error(status)`` turns a nonzero status into the exception to raise.
    ``stacked``: the function maps over leading axes its inputs and outputs share (a stack of
    matrices, as ``numpy.linalg`` takes), so ``vmap`` calls it once with the batch axis in
    front instead of once per example.

    Registering a name again replaces it for what is traced or compiled afterwards.  A
    function already compiled by the llvm backend keeps calling the *native* ``cpu``
    implementation it was compiled with (its address is in the machine code; the old
    implementation is kept alive for the process, so it is never a dangling pointer);
    Python implementations are looked up at each call, so every backend calls the new one.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a library function name must be a non-empty str, got {name!r}")
    if cpu is None and cuda is None and numpy is None:
        raise ValueError(f"register_library({name!r}): give at least one of cpu=, cuda=, numpy=")
    for kind, f in (("cpu", cpu), ("cuda", cuda), ("numpy", numpy)):
        if f is None or f is BUILTIN or isinstance(f, lazy):
            continue
        if kind == "cpu" and native_address(f) is not None:
            continue
        if not callable(f):
            raise TypeError(f"register_library({name!r}): {kind}= must be "
                            f"{'a function pointer or ' if kind == 'cpu' else ''}a callable, "
                            f"got {type(f).__name__}")
    if out_dtypes is not None and not callable(out_dtypes):
        out_dtypes = [dt.canonical(d) for d in out_dtypes]
        if num_outputs is not None and len(out_dtypes) != num_outputs:
            raise ValueError(f"register_library({name!r}): {len(out_dtypes)} out_dtypes for "
                             f"num_outputs={num_outputs}")
    with _LOCK:
        old = _REGISTRY.get(name)
        if old is not None and old._cpu is not None and (isinstance(old._cpu, lazy) or
                                                         native_address(old._cpu) is not None):
            _RETIRED.append(old)
        version = _VERSIONS[name] = _VERSIONS.get(name, 0) + 1
        _REGISTRY[name] = LibraryImpl(name, cpu, cuda, numpy, num_inputs, num_outputs, out_dtypes,
                                      error, version, stacked)


def lookup(name: str) -> LibraryImpl:
    """The registration of ``name``; ``KeyError`` naming the registered functions if none."""
    impl = _REGISTRY.get(name)
    if impl is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"unknown library function {name!r}; register it with "
                       f"rj.register_library({name!r}, cpu=..., numpy=...) (registered: {known})")
    return impl


def registered_libraries() -> list[str]:
    return sorted(_REGISTRY)


def contiguous(a) -> np.ndarray:
    """``a`` as a C-contiguous NumPy array (np.ascontiguousarray would make a 0-d array 1-d)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else np.array(a, order="C")


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of input ``a`` for a Python implementation: inputs are read-only
    (the ABI above), and the array may be the caller's own argument or a value other
    operations still read."""
    v = a.view()
    v.flags.writeable = False
    return v


def call_native(address: int, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> int:
    """Call a native implementation through ctypes (eager calls; the LLVM backend calls it
    from generated code instead)."""
    arrays = list(inputs) + list(outputs)
    for a in arrays:
        if not a.flags.c_contiguous:
            raise ValueError("internal error: native library calls need C-contiguous arrays")
    n = len(arrays)
    data = (ctypes.c_void_p * max(n, 1))(*[a.ctypes.data for a in arrays])
    shapes = [int(d) for a in arrays for d in a.shape]
    sh = (ctypes.c_int64 * max(len(shapes), 1))(*shapes)
    nd = (ctypes.c_int64 * max(n, 1))(*[a.ndim for a in arrays])
    return int(NATIVE_SIGNATURE(address)(data, sh, nd, n))


# ---------------------------------------------------------------------------------------------
# Built-in registrations: the gemm that Legalize produces for float matmul
# ---------------------------------------------------------------------------------------------

def _cupy_matmul(a, b, out):
    import cupy
    cupy.matmul(a, b, out=out)


def _matmul(xp_matmul, complex_dtype=None, form: str = "nn"):
    """``out = a @ b`` through NumPy's or CuPy's matmul; with ``complex_dtype``, on operands
    packed as (..., 2) real arrays, viewed as that complex dtype; ``form`` says which
    operand is given transposed (last two axes swapped, "t"), as gemm's flags do."""
    def view(x):
        return x if complex_dtype is None else x.view(complex_dtype)[..., 0]

    def swap(x, flag):
        return x.swapaxes(-1, -2) if flag == "t" else x

    def run(a, b, out):
        if out.size:
            xp_matmul(swap(view(a), form[0]), swap(view(b), form[1]), out=view(out))
    return run


# cpu: the LLVM backend emits the (batched, broadcast) CBLAS call itself; the complex gemms
# take their operands packed (the layout complex values have after SplitComplex); the
# "_nt", "_tn" and "_tt" gemms take the operand(s) the product transposes untransposed
# (compile.blas_calls)
for _n, _d, _c in (("blas.sgemm", "float32", None), ("blas.dgemm", "float64", None),
                   ("blas.cgemm", "float32", "complex64"), ("blas.zgemm", "float64", "complex128")):
    for _f in ("nn",) if _c else ("nn", "nt", "tn", "tt"):
        register_library(_n + ("" if _f == "nn" else "_" + _f), cpu=BUILTIN,
                         numpy=_matmul(np.matmul, _c, _f), cuda=_matmul(_cupy_matmul, _c, _f),
                         num_inputs=2, num_outputs=1, out_dtypes=[_d])
del _n, _d, _c, _f


# The Gram products A @ A.T ("?syrk") and A.T @ A ("?syrk_tn") of a 2-D A (compile.blas_calls):
# BLAS syrk fills the lower triangle, which is all their readers use; NumPy's and CuPy's
# matmul of A and its transposed view compute the whole product (NumPy through syrk too).
def _gram(xp_matmul, trans: bool):
    def run(a, out):
        if out.size:
            xp_matmul(a.T, a, out=out) if trans else xp_matmul(a, a.T, out=out)
    return run


for _n, _d, _t in (("blas.ssyrk", "float32", False), ("blas.dsyrk", "float64", False),
                   ("blas.ssyrk_tn", "float32", True), ("blas.dsyrk_tn", "float64", True)):
    register_library(_n, cpu=BUILTIN, numpy=_gram(np.matmul, _t), cuda=_gram(_cupy_matmul, _t),
                     num_inputs=1, num_outputs=1, out_dtypes=[_d])
del _n, _d, _t


# ---------------------------------------------------------------------------------------------
# Built-in registrations: sorting along the last axis, which Legalize lowers to these
# ---------------------------------------------------------------------------------------------

def _sort_numpy(a, out):
    out[...] = np.sort(a, axis=-1, kind="stable")


def _argsort_numpy(a, out):
    out[...] = np.argsort(a, axis=-1, kind="stable")


def _sort_cuda(a, out):
    import cupy
    out[...] = cupy.sort(a, axis=-1)


def _argsort_cuda(a, out):
    import cupy
    out[...] = cupy.argsort(a, axis=-1)


register_library("sort", cpu=_sort_numpy, cuda=_sort_cuda, num_inputs=1, num_outputs=1,
                 out_dtypes=lambda d: [d])
register_library("argsort", cpu=_argsort_numpy, cuda=_argsort_cuda, num_inputs=1, num_outputs=1,
                 out_dtypes=lambda d: [np.dtype("int64")])


# ---------------------------------------------------------------------------------------------
# Built-in registrations: attention without the score matrix (relaxjax.nn.dot_product_attention
# and the compile.attention rewrite call these)
# ---------------------------------------------------------------------------------------------

def attention_name(dtype, causal: bool) -> str:
    """The library function computing ``softmax(q k^T * scale [causal]) v`` on ``dtype``
    (float32 or float64): inputs q (B, T, N, H), k (B, S, K, H), v (B, S, K, Hv) with K
    dividing N, a 0-d scale; output (B, T, N, Hv).  Causal: key j <= query i."""
    return f"nn.attention{'_causal' if causal else ''}_{'f32' if np.dtype(dtype) == np.float32 else 'f64'}"


def attention_lengths_name(dtype, queries: bool = False) -> str:
    """``attention_name(dtype, False)`` with one more input before the output, ``lengths``
    (B,) int32: batch b attends to its first ``lengths[b]`` keys (clamped to [0, S]; none:
    zeros), as ``key_value_seq_lengths`` of ``jax.nn.dot_product_attention``; ``queries``:
    then ``query_lengths`` (B,) int32 too, batch b's query rows from ``query_lengths[b]`` on
    zeros (``query_seq_lengths``), not computed."""
    return f"nn.attention_{'q' if queries else ''}lengths_{'f32' if np.dtype(dtype) == np.float32 else 'f64'}"


def attention_reference(xp_name: str, causal: bool, lengths: int = 0):
    """The reference (NumPy) or CuPy implementation: the scores per head, formed in full
    (the CUDA backend's flash kernel falls back to it for head sizes it does not take)."""
    def run(q, k, v, scale, *rest):
        xp = np if xp_name == "numpy" else importlib.import_module(xp_name)
        out = rest[-1]
        B, T, N, H = q.shape
        S, K, Hv = k.shape[1], k.shape[2], v.shape[3]
        if out.size == 0:
            return
        if S == 0:                     # an empty sum: zeros, as NumPy's matmul gives
            out[...] = 0
            return
        g = N // K                     # query head n reads key/value head n // g
        qh = q.reshape(B, T, K, g, H).transpose(0, 2, 3, 1, 4)              # (B, K, g, T, H)
        logits = xp.matmul(qh, k.transpose(0, 2, 3, 1)[:, :, None]) * scale[()]   # (B, K, g, T, S)
        if causal:
            logits = xp.where(xp.tril(xp.ones((T, S), dtype=bool)), logits, -xp.inf)
        if lengths:                    # keys from lengths[b] on: none (all: zero weights)
            keep = xp.arange(S)[None, :] < xp.clip(rest[0].astype(xp.int64), 0, S)[:, None]   # (B, S)
            logits = xp.where(keep[:, None, None, None, :], logits, -xp.inf)
        top = logits.max(axis=-1, keepdims=True)
        logits = xp.exp(logits - xp.where(xp.isfinite(top), top, 0))
        total = logits.sum(axis=-1, keepdims=True)
        logits /= xp.where(total > 0, total, 1)
        o = xp.matmul(logits, v.transpose(0, 2, 1, 3)[:, :, None])          # (B, K, g, T, Hv)
        out[...] = o.transpose(0, 3, 1, 2, 4).reshape(B, T, N, Hv)
        if lengths == 2:               # query rows past their lengths: zeros
            out[xp.arange(T)[None, :] >= rest[1].astype(xp.int64)[:, None]] = 0
    return run



def attention_varlen_name(dtype, causal: bool, cross: bool = False) -> str:
    """Attention within each of ``B`` sequences packed along axis 0 (FlashAttention's varlen
    form; ``relaxjax.ragged``'s layout): inputs q (T, N, H), k (T, K, H), v (T, K, Hv) with K
    dividing N, a 0-d scale and ``offsets`` (B + 1,) int64, sequence b being rows
    ``offsets[b]:offsets[b + 1]`` of all three; output (T, N, Hv).  Causal: key j <= query i,
    both counted from their sequence's start.  The offsets must run from 0 to T without
    decreasing (an empty sequence has no rows), else ``ValueError``.

    ``cross``: the keys and values are sequences of their own (cross attention between two
    packed batches, FlashAttention's ``cu_seqlens_q`` and ``cu_seqlens_k``): k (Tk, K, H), v
    (Tk, K, Hv) and ``key_offsets`` (B + 1,) after ``offsets``, query sequence b attending to
    key rows ``key_offsets[b]:key_offsets[b + 1]`` (causal: key j <= query i, as
    ``attention_name``'s for a query and key length that differ)."""
    return (f"nn.attention_varlen{'_cross' if cross else ''}{'_causal' if causal else ''}_"
            f"{'f32' if np.dtype(dtype) == np.float32 else 'f64'}")


VARLEN_ERRORS = {1: "the offsets must run from 0 to the number of packed rows without decreasing",
                 2: "q, k and v must have the same packed rows, k the head size of q, k and v the "
                    "same heads, dividing q's, and offsets at least one entry",
                 3: "q and k the same head size, k and v the same packed rows and heads, the key "
                    "heads dividing q's, and offsets and key offsets one entry per sequence and "
                    "one more (at least one)"}


def _varlen_error(status: int) -> BaseException:
    return ValueError(f"attention over packed sequences (nn.attention_varlen*): "
                      f"{VARLEN_ERRORS.get(status, f'failed with status {status}')}")


def check_varlen_shapes(q, k, v, offsets, key_offsets=None) -> None:
    """The ``ValueError`` of status 2 (3 with ``key_offsets``, the cross variant) when the
    arrays of an ``attention_varlen_name`` call do not fit together (what the native
    implementation checks too)."""
    (T, N, H), (Tk, K, Hk), (Tv, Kv, _) = q.shape, k.shape, v.shape
    heads = K == 0 and N > 0 or K > 0 and N % K
    if key_offsets is None:
        if Tk != T or Tv != T or Hk != H or Kv != K or heads or offsets.shape[0] < 1:
            raise _varlen_error(2)
    elif Tv != Tk or Hk != H or Kv != K or heads or offsets.shape[0] < 1 or \
            key_offsets.shape[0] != offsets.shape[0]:
        raise _varlen_error(3)


def _host_offsets(offsets, rows: int):
    """Offsets on the host, checked to run from 0 to ``rows`` without decreasing."""
    off = np.asarray(offsets.get() if hasattr(offsets, "get") else offsets)
    if off[0] != 0 or off[-1] != rows or np.any(np.diff(off) < 0):
        raise _varlen_error(1)
    return off.tolist()


def attention_varlen_reference(xp_name: str, causal: bool, cross: bool = False):
    """The reference (NumPy) or CuPy implementation of ``attention_varlen_name``: each
    sequence through ``attention_reference`` as a batch of one (the offsets read on the
    host)."""
    dense = attention_reference(xp_name, causal)

    def run(q, k, v, scale, offsets, *rest):
        key_offsets = rest[0] if cross else None
        out = rest[-1]
        check_varlen_shapes(q, k, v, offsets, key_offsets)
        off = _host_offsets(offsets, q.shape[0])
        koff = _host_offsets(key_offsets, k.shape[0]) if cross else off
        for s, e, ks, ke in zip(off[:-1], off[1:], koff[:-1], koff[1:]):
            if e > s:                  # the sequence as a batch of one: views, out written in place
                dense(q[None, s:e], k[None, ks:ke], v[None, ks:ke], scale, out[None, s:e])
    return run


for _c in (False, True):
    for _d in ("float32", "float64"):
        register_library(attention_name(_d, _c),
                         cpu=lazy(f"relaxjax.backends.llvm.attention:{_d}{'_causal' if _c else ''}"),
                         numpy=attention_reference("numpy", _c),
                         cuda=lazy(f"relaxjax.backends.cuda.attention:{_d}{'_causal' if _c else ''}"),
                         num_inputs=4, num_outputs=1, out_dtypes=[_d])
for _d in ("float32", "float64"):
    register_library(attention_lengths_name(_d), cpu=lazy(f"relaxjax.backends.llvm.attention:{_d}_lengths"),
                     numpy=attention_reference("numpy", False, 1),
                     cuda=lazy(f"relaxjax.backends.cuda.attention:{_d}_lengths"),
                     num_inputs=5, num_outputs=1, out_dtypes=[_d])
    register_library(attention_lengths_name(_d, True), cpu=lazy(f"relaxjax.backends.llvm.attention:{_d}_qlengths"),
                     numpy=attention_reference("numpy", False, 2),
                     cuda=lazy(f"relaxjax.backends.cuda.attention:{_d}_qlengths"),
                     num_inputs=6, num_outputs=1, out_dtypes=[_d])
for _x in (False, True):
    for _c in (False, True):
        for _d in ("float32", "float64"):
            _s = f"{_d}_varlen{'_cross' if _x else ''}{'_causal' if _c else ''}"
            register_library(attention_varlen_name(_d, _c, _x), cpu=lazy(f"relaxjax.backends.llvm.attention:{_s}"),
                             numpy=attention_varlen_reference("numpy", _c, _x),
                             cuda=lazy(f"relaxjax.backends.cuda.attention:{_s}"),
                             num_inputs=6 if _x else 5, num_outputs=1, out_dtypes=[_d], error=_varlen_error)
del _x, _c, _d, _s
