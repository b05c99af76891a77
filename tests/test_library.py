"""rj.register_library / rj.call_library: Python and native implementations, inside jit and
eagerly, on every backend (the CUDA emulator included), and their errors."""
import ctypes
import itertools
import shutil
import subprocess

import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends import available_backends
from relaxjax.library import NATIVE_SIGNATURE, lookup
from helpers import assert_same

S = rj.ShapeDtypeStruct
BACKENDS = sorted(set(available_backends()) | {"cuda-emulated"})
_ids = itertools.count()


def fresh(prefix="test"):
    """A library name no other test uses (registrations are process-wide)."""
    return f"{prefix}.f{next(_ids)}"


def _add_scaled(x, y, out):
    out[...] = 2.0 * x + y


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_implementation(backend):
    name = fresh()
    rj.register_library(name, cpu=_add_scaled)

    def f(x, y):
        z = rj.call_library(name, x * 1.5, y, out=S(x.shape, x.dtype))
        return rnp.tanh(z) + 1.0
    f = rj.jit(f, backend=backend)
    for n in (2, 3, 7, 31, 1):
        x, y = np.linspace(-1, 1, n), np.linspace(2, 3, n)
        assert_same(f(x, y), np.tanh(2.0 * (x * 1.5) + y) + 1.0)
    assert f.cache_info().compiles == 1          # n symbolic for every size, 1 included
    text = f.lower(np.ones(4), np.ones(4)).as_text("optimized")
    assert f'call_library("{name}"' in text


def test_eager_and_return_structure():
    name = fresh()

    def split(x, lo, hi):
        lo[...] = np.minimum(x, 0)
        hi[...] = np.maximum(x, 0)
    rj.register_library(name, numpy=split)
    x = np.array([-1.0, 2.0, -3.0])
    lo, hi = rj.call_library(name, x, out=[S((3,), "float64"), S((3,), "float64")])
    assert_same(lo, np.minimum(x, 0))
    assert_same(hi, np.maximum(x, 0))
    t = rj.call_library(name, x, out=(S((3,), "float64"), S((3,), "float64")))
    assert isinstance(t, tuple)
    single = lookup(name)
    assert single.numpy is split


@pytest.mark.parametrize("backend", BACKENDS)
def test_multiple_outputs_and_derived_dims(backend):
    name = fresh()

    def row_stats(x, total, first):
        total[...] = x.sum(axis=1)
        first[...] = x[:, :1]
    rj.register_library(name, cpu=row_stats, num_outputs=2, out_dtypes=lambda d: [d, d])

    def f(x):
        m = x.shape[0]
        total, first = rj.call_library(name, x, out=[S((m,), x.dtype), S((m, 1), x.dtype)])
        return total * 2.0, first
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = rj.jit(f, backend=backend)(x)
    assert_same(got, (x.sum(axis=1) * 2, x[:, :1]))
    assert_same(f(x), (x.sum(axis=1) * 2, x[:, :1]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_operands(backend):
    name = fresh()

    def scale(x, s, out):
        assert s.ndim == 0
        out[...] = x * s
    rj.register_library(name, cpu=scale)
    f = rj.jit(lambda x: rj.call_library(name, x, 3.0, out=S(x.shape, x.dtype)), backend=backend)
    x = np.arange(5.0)
    assert_same(f(x), x * 3)


# -- native implementations ------------------------------------------------------------------

_SEEN = []


@NATIVE_SIGNATURE
def _native_negate(data, shapes, ndims, nargs):
    """A native function pointer (a ctypes callback): out = -x for float64 x of any rank,
    recording the ABI values it was given."""
    nd = [ndims[i] for i in range(nargs)]
    dims = [shapes[i] for i in range(sum(nd))]
    _SEEN.append((nargs, nd, dims))
    size = int(np.prod(dims[:nd[0]]))
    if size:
        x = np.ctypeslib.as_array(ctypes.cast(data[0], ctypes.POINTER(ctypes.c_double)), (size,))
        out = np.ctypeslib.as_array(ctypes.cast(data[1], ctypes.POINTER(ctypes.c_double)), (size,))
        out[:] = -x
    return 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_native_function_pointer(backend):
    name = fresh()
    rj.register_library(name, cpu=_native_negate, out_dtypes=["float64"])
    f = rj.jit(lambda x: rj.call_library(name, x + 1.0, out=S(x.shape, x.dtype)) * 2.0, backend=backend)
    _SEEN.clear()
    x = np.arange(6.0).reshape(2, 3)
    assert_same(f(x), -(x + 1) * 2)
    assert _SEEN == [(2, [2, 2], [2, 3, 2, 3])]
    if backend == "llvm":                  # called from the generated segment, not from Python
        assert "rjlib." in f.lower(x).as_text("llvm")
        assert "_lib(" not in f.lower(x).as_text("host")
    assert_same(rj.call_library(name, x, out=S((2, 3), "float64")), -x)       # eager: ctypes


C_SOURCE = r"""
#include <stdint.h>
/* out[i] = sum of row i of x (m, n): the library ABI of relaxjax.library */
int32_t rj_row_sums(void *const *data, const int64_t *shapes, const int64_t *ndims, int64_t nargs) {
    if (nargs != 2 || ndims[0] != 2 || ndims[1] != 1) return 3;
    const double *x = data[0];
    double *out = data[1];
    int64_t m = shapes[0], n = shapes[1];
    for (int64_t i = 0; i < m; i++) {
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += x[i * n + j];
        out[i] = s;
    }
    return 0;
}
int32_t rj_fails(void *const *data, const int64_t *shapes, const int64_t *ndims, int64_t nargs) {
    return 42;
}
"""


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("clib")
    src, so = d / "lib.c", d / "lib.so"
    src.write_text(C_SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return ctypes.CDLL(str(so))


class CustomError(Exception):
    pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_c_function(clib, backend):
    name, bad = fresh("c"), fresh("c")
    rj.register_library(name, cpu=clib.rj_row_sums, num_inputs=1, num_outputs=1)
    rj.register_library(bad, cpu=ctypes.cast(clib.rj_fails, ctypes.c_void_p).value,
                        error=lambda status: CustomError(f"status {status}"))
    f = rj.jit(lambda x: rj.call_library(name, x * 2.0, out=S(x.shape[:1], x.dtype)), backend=backend)
    for m, n in ((1, 1), (3, 5), (17, 2)):
        x = np.arange(m * n, dtype=np.float64).reshape(m, n)
        assert_same(f(x), (2 * x).sum(axis=1))
    g = rj.jit(lambda x: rj.call_library(bad, x, out=S(x.shape, x.dtype)) + 1.0, backend=backend)
    with pytest.raises(CustomError, match="status 42"):
        g(np.ones(3))
    with pytest.raises(CustomError):
        rj.call_library(bad, np.ones(3), out=S((3,), "float64"))


def test_status_without_error_mapping(clib):
    name = fresh("c")
    rj.register_library(name, cpu=clib.rj_fails)
    with pytest.raises(RuntimeError, match=f"library function '{name}' failed with status 42"):
        rj.jit(lambda x: rj.call_library(name, x, out=S(x.shape, x.dtype)))(np.ones(2))


def test_reregistration_replaces_native(clib):
    name = fresh("c")
    rj.register_library(name, cpu=_native_negate)
    f = rj.jit(lambda x: rj.call_library(name, x, out=S(x.shape, x.dtype)))
    assert_same(f(np.ones(3)), -np.ones(3))
    rj.register_library(name, cpu=clib.rj_fails)
    with pytest.raises(RuntimeError, match="status 42"):
        rj.jit(lambda x: rj.call_library(name, x, out=S(x.shape, x.dtype)))(np.ones(3))


# -- errors -------------------------------------------------------------------------------------

def test_unknown_name():
    with pytest.raises(KeyError, match="unknown library function 'no.such'.*register_library"):
        rj.jit(lambda x: rj.call_library("no.such", x, out=S(x.shape, x.dtype)))(np.ones(3))
    with pytest.raises(KeyError, match="no.such"):
        rj.call_library("no.such", np.ones(3), out=S((3,), "float64"))


def test_wrong_outs():
    name = fresh()
    rj.register_library(name, cpu=_add_scaled, num_inputs=2, num_outputs=1, out_dtypes=["float64"])
    x = np.ones(3)
    with pytest.raises(TypeError, match="produces 1 outputs, got 2"):
        rj.jit(lambda x: rj.call_library(name, x, x, out=[S(x.shape, x.dtype)] * 2))(x)
    with pytest.raises(TypeError, match="output 0 is float64, the out struct says float32"):
        rj.jit(lambda x: rj.call_library(name, x, x, out=S(x.shape, "float32")))(x)
    with pytest.raises(TypeError, match="takes 2 inputs, got 1"):
        rj.call_library(name, x, out=S((3,), "float64"))
    with pytest.raises(TypeError, match="out= must be a ShapeDtypeStruct"):
        rj.call_library(name, x, x, out=np.empty(3))
    with pytest.raises(ValueError, match="no input binds"):
        rj.jit(lambda x: rj.call_library(name, x, x, out=S(("q",), "float64")))(x)
    with pytest.raises(TypeError, match="non-negative int dims"):
        rj.call_library(name, x, x, out=S(("q",), "float64"))


@pytest.mark.parametrize("backend", ["numpy", "llvm", "cuda-emulated"])
def test_no_implementation_for_backend(backend):
    name = fresh()
    rj.register_library(name, cuda=lambda x, out: None)
    f = rj.jit(lambda x: rj.call_library(name, x, out=S(x.shape, x.dtype)), backend=backend)
    kind = "cpu" if backend == "llvm" else "numpy"
    with pytest.raises(NotImplementedError, match=rf"no implementation for the '{backend}' backend.*"
                                                  rf"register_library\('{name}', {kind}=\.\.\.\)"):
        f(np.ones(3))


def test_registration_errors():
    with pytest.raises(ValueError, match="at least one of"):
        rj.register_library("test.empty")
    with pytest.raises(TypeError, match="numpy= must be a callable"):
        rj.register_library("test.bad", numpy=3)
    with pytest.raises(ValueError, match="null pointer"):
        rj.register_library("test.null", cpu=0)


def test_blas_goes_through_the_registry():
    assert lookup("blas.sgemm").numpy is not None and lookup("blas.dgemm").cuda is not None
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    assert_same(rj.call_library("blas.sgemm", a, b, out=S((2, 4), "float32")), a @ b)


def test_python_fallback_between_segments():
    """The Python host-op path works between native segments (allocations from the plan)."""
    name = fresh()
    rj.register_library(name, cpu=lambda x, out: out.__setitem__(Ellipsis, x[::-1]))
    f = rj.jit(lambda x: rnp.exp(rj.call_library(name, rnp.sin(x), out=S(x.shape, x.dtype))) * 2.0)
    x = np.linspace(0, 1, 9)
    assert_same(f(x), np.exp(np.sin(x)[::-1]) * 2.0)
    assert "_lib(" in f.lower(x).as_text("host")
