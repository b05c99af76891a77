"""The CUDA backend's host side against a stand-in for a GPU's arrays, without a GPU.

The emulator runs the generated CUDA C on NumPy arrays, which accept everything NumPy
does; CuPy's arrays refuse implicit conversion to NumPy (``np.asarray`` raises) and
NumPy values in their assignments, and keep 0-d arrays 0-d.  The first GPU run found bugs
of exactly that kind in the host side (explicit-shape checks, 0-d arguments, results,
library calls).  ``StrictArray`` behaves as CuPy's arrays do in those respects and
``StrictDevice`` is the emulator over them, registered as a backend for these tests only:
the runtime, the call path (``jit``'s fast path for device arrays), where results live,
host operations, data-dependent sizes and host-only library functions run as on a GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends import registry
from relaxjax.backends.cuda.device import EmulatedDevice
from relaxjax.backends.cuda.runtime import CudaExecutable

S = rj.ShapeDtypeStruct


class StrictArray:
    """A device array as CuPy has it: no implicit conversion to NumPy either way."""

    def __init__(self, a: np.ndarray):
        assert isinstance(a, np.ndarray)
        self._a = a

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: StrictArray(self._a.T))

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._a.ctypes.data, False),
                "version": 3}

    def __array__(self, *a, **k):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (as CuPy's arrays)")

    def get(self) -> np.ndarray:
        return self._a.copy()

    def __getitem__(self, index):
        return StrictArray(np.asarray(self._a[index]))

    def __setitem__(self, index, value):
        if isinstance(value, np.ndarray):
            raise TypeError("Unsupported type <class 'numpy.ndarray'> (as CuPy's arrays)")
        self._a[index] = value._a if isinstance(value, StrictArray) else value

    def __int__(self) -> int:
        return int(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def reshape(self, *shape):
        return StrictArray(self._a.reshape(*shape))

    def view(self, dtype):
        return StrictArray(self._a.view(dtype))

    def copy(self):
        return StrictArray(self._a.copy())

    def astype(self, dtype):
        return StrictArray(self._a.astype(dtype))

    def swapaxes(self, i, j):
        return StrictArray(self._a.swapaxes(i, j))


def _raw(x):
    return x._a if isinstance(x, StrictArray) else x


class StrictDevice(EmulatedDevice):
    """The emulator over ``StrictArray``: kernels run on the arrays' NumPy storage.  Named
    ``cuda``, so library calls take the GPU's branches (no test here calls one registered
    with a CuPy implementation, which would import CuPy)."""
    name = "cuda"

    def is_array(self, x) -> bool:
        return isinstance(x, StrictArray)

    def asarray(self, x):
        if isinstance(x, StrictArray):
            return x if x.flags.c_contiguous else StrictArray(np.ascontiguousarray(x._a))
        return StrictArray(np.array(x, order="C"))          # a host -> device copy

    def to_host(self, x) -> np.ndarray:
        return x.get() if isinstance(x, StrictArray) else np.asarray(x)

    def empty(self, shape, dtype):
        return StrictArray(np.empty(shape, dtype))

    def launch(self, fn, grid, block, buffers, dims) -> None:
        super().launch(fn, grid, block, [_raw(b) for b in buffers], [_raw(d) for d in dims])

    def matmul(self, a, b, out) -> None:
        np.matmul(_raw(a), _raw(b), out=_raw(out))


@pytest.fixture(scope="module")
def strict():
    device = StrictDevice()
    registry.register_backend("cuda-strict", lambda m: CudaExecutable(m, lambda: device),
                              available=lambda: False)
    yield "cuda-strict"
    registry._BACKENDS.pop("cuda-strict", None)
    registry._AVAILABLE.pop("cuda-strict", None)


def test_numpy_arguments_get_numpy_results_device_arguments_device_results(strict):
    f = rj.jit(lambda x, b: rnp.tanh(x) * 2.0 + b, backend=strict)
    x = np.linspace(-2, 2, 12).astype(np.float32).reshape(3, 4)
    b = np.arange(4, dtype=np.float32)
    want = np.tanh(x) * 2.0 + b
    got = f(x, b)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for _ in range(2):                                  # the slow path, then the fast one
        got = f(StrictArray(x), StrictArray(b))
        assert isinstance(got, StrictArray)
        np.testing.assert_allclose(got.get(), want, rtol=1e-6)


def test_explicit_shapes_and_zero_d_arguments(strict):
    n = rj.dim("n")
    f = rj.jit(lambda x, k: x * k + rj.lax.iota_count(k).sum(), shapes=(S((n,), "float32"), S((), "int64")),
               backend=strict)
    x = np.arange(5, dtype=np.float32)
    got = f(StrictArray(x), StrictArray(np.array(3)))
    np.testing.assert_allclose(got.get(), x * 3 + 3)
    with pytest.raises(TypeError, match="expected dtype float32, got float64"):
        f(StrictArray(x.astype(np.float64)), StrictArray(np.array(3)))


def test_constant_and_dim_results_live_with_the_other_results(strict):
    f = rj.jit(lambda x: (x + 1.0, rnp.ones(3), x.shape[0] * 2), backend=strict)
    a, c, d = f(StrictArray(np.zeros(4)))
    assert isinstance(a, StrictArray) and isinstance(c, StrictArray) and d == 8
    np.testing.assert_array_equal(c.get(), np.ones(3))


def test_host_operations_and_data_dependent_sizes(strict):
    def f(x, k):
        pos = x[x > 0]                                  # a size known only at run time
        i = rnp.arange(x.shape[0])
        return pos * 2.0, rnp.sum(rnp.where(i < k, x, 0.0)), x.reshape(2, -1)
    x = np.array([1.0, -2.0, 3.0, -4.0, 5.0, 6.0])
    for k in (0, 3, 9):
        pos, s, r = rj.jit(f, backend=strict)(StrictArray(x), StrictArray(np.array(k)))
        np.testing.assert_allclose(pos.get(), x[x > 0] * 2.0)
        np.testing.assert_allclose(float(s.get()), x[:k].sum())
        np.testing.assert_array_equal(r.get(), x.reshape(2, -1))


def test_host_only_library_functions_run_on_host_copies(strict):
    def double_plus_one(a, out):
        out[...] = a * 2.0 + 1.0
    rj.register_library("test.glue_host_only", numpy=double_plus_one, num_inputs=1, num_outputs=1,
                        out_dtypes=lambda d: [d])
    f = rj.jit(lambda x: rj.call_library("test.glue_host_only", rnp.exp(x), out=S(x.shape, x.dtype)) - 1.0,
               backend=strict)
    x = np.linspace(-1, 1, 7)
    got = f(StrictArray(x))
    assert isinstance(got, StrictArray)
    np.testing.assert_allclose(got.get(), np.exp(x) * 2.0, rtol=1e-12)


def test_attention_runs_the_flash_kernel_on_device_arrays(strict):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 9, 2, 16)).astype(np.float32) for _ in range(3))
    f = rj.jit(lambda q, k, v: rj.nn.dot_product_attention(q, k, v, is_causal=True), backend=strict)
    got = f(*(StrictArray(a) for a in (q, k, v)))
    want = rj.jit(lambda q, k, v: rj.nn.dot_product_attention(q, k, v, is_causal=True), backend="numpy")(q, k, v)
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
