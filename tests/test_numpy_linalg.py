"""relaxjax.numpy.linalg against numpy.linalg on every backend (the CUDA emulator included):
solve, inv, det, cholesky, qr, eigh, eigvalsh, svd, svdvals (library calls) and norm (ord 2, -2
and "nuc" from singular values), with symbolic and batched shapes."""
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.backends import available_backends
from relaxjax.numpy.linalg import LinAlgShapeError
from helpers import assert_same, check

S = rj.ShapeDtypeStruct
BACKENDS = sorted(set(available_backends()) | {"cuda-emulated"})
SIZES = st.sampled_from([1, 2, 3, 5, 7, 13])
BATCH = st.lists(st.sampled_from([1, 2, 3]), min_size=0, max_size=2).map(tuple)
DTYPES = st.sampled_from(["float64", "float32", "int64"])
_JITS: dict = {}


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9, atol=1e-9)


def general(seed, shape, dtype):
    """Diagonally dominant (so well-conditioned) and not symmetric (a transposed operand
    would show)."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    b = rng.integers(-1, 2, shape) if np.dtype(dtype).kind == "i" else rng.uniform(-1, 1, shape)
    return (b + (n + 1) * np.eye(n, dtype=int)).astype(dtype)


def spd(seed, shape, dtype):
    """B B^T + n I: symmetric positive definite."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    b = rng.integers(-2, 3, shape) if np.dtype(dtype).kind == "i" else rng.uniform(-1, 1, shape)
    return (b @ np.swapaxes(b, -1, -2) + n * np.eye(n, dtype=int)).astype(dtype)


def check_all(key, fn, np_fn, *args, **t):
    """Every backend and eager mode; plus one jitted function per ``key`` reused across
    examples, so later examples run an entry traced for other sizes."""
    want = check(fn, np_fn, *args, backends=BACKENDS, **t)
    f = _JITS.setdefault(key, rj.jit(fn))
    assert_same(f(*args), want, **t)
    return want


@settings(max_examples=10)
@given(batch_a=BATCH, n=SIZES, k=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16), data=st.data())
def test_solve_matrix_rhs(batch_a, n, k, dtype, seed, data):
    # b's batch dims broadcast against a's: some dropped, some 1, and a may broadcast too
    batch_b = tuple(data.draw(st.sampled_from([d, 1])) for d in batch_a)
    batch_b = batch_b[data.draw(st.integers(0, len(batch_b))):]
    if batch_a and batch_b and data.draw(st.booleans()):
        batch_a, batch_b = batch_a[:-1] + (1,), batch_b[:-1] + (batch_a[-1],)
    a = general(seed, batch_a + (n, n), dtype)
    b = np.random.default_rng(seed + 1).uniform(-5, 5, batch_b + (n, k)).astype(dtype)
    check_all(("solve", a.ndim, b.ndim, dtype), lambda a, b: rnp.linalg.solve(a, b), np.linalg.solve,
              a, b, **tol(dtype))


@settings(max_examples=10)
@given(batch=BATCH, n=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16))
def test_solve_vector_rhs(batch, n, dtype, seed):
    a = general(seed, batch + (n, n), dtype)
    b = np.random.default_rng(seed + 1).uniform(-5, 5, (n,)).astype(dtype)
    check_all(("solve1", a.ndim, dtype), lambda a, b: rnp.linalg.solve(a, b), np.linalg.solve, a, b,
              **tol(dtype))


@pytest.mark.parametrize("name", ["inv", "det"])
@settings(max_examples=10)
@given(batch=BATCH, n=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16))
def test_inv_det(name, batch, n, dtype, seed):
    a = general(seed, batch + (n, n), dtype)
    t = tol(dtype)
    if name == "det":
        t = dict(rtol=t["rtol"] * 10, atol=0)
    check_all((name, a.ndim, dtype), getattr(rnp.linalg, name), getattr(np.linalg, name), a, **t)


@pytest.mark.parametrize("upper", [False, True])
@settings(max_examples=10)
@given(batch=BATCH, n=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16))
def test_cholesky(upper, batch, n, dtype, seed):
    a = spd(seed, batch + (n, n), dtype)
    if n > 1:               # only one triangle is read, as in NumPy: spoil the other
        a[..., -1, 0] += 1000 if upper else 0
        a[..., 0, -1] += 0 if upper else 1000
    check_all(("cholesky", upper, a.ndim, dtype), lambda a: rnp.linalg.cholesky(a, upper=upper),
              lambda a: np.linalg.cholesky(a, upper=upper), a, **tol(dtype))


@settings(max_examples=10)
@given(batch=BATCH, m=SIZES, n=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16))
# a reflector's leading element zero up to rounding: NumPy's sign only by NumPy's algorithm
@example(batch=(2,), m=3, n=2, dtype="int64", seed=4566)
def test_qr(batch, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-3, 3, batch + (m, n))
    a = (np.round(a) if dtype == "int64" else a).astype(dtype)
    t = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-8, atol=1e-8)
    q, r = check_all(("qr", a.ndim, dtype), lambda a: tuple(rnp.linalg.qr(a)),
                     lambda a: tuple(np.linalg.qr(a)), a, **t)
    assert_same(rnp.linalg.qr(a, mode="r"), r, **t)


NORMS = [dict(), dict(ord=2), dict(ord=1), dict(ord=np.inf), dict(ord=-np.inf), dict(ord=0), dict(ord=3),
         dict(ord=0.5)]
MATRIX_NORMS = [dict(), dict(ord="fro"), dict(ord=1), dict(ord=-1), dict(ord=np.inf), dict(ord=-np.inf)]


@pytest.mark.parametrize("kw", NORMS, ids=str)
@settings(max_examples=8)
@given(shape=st.lists(SIZES, min_size=1, max_size=3).map(tuple), keepdims=st.booleans(),
       dtype=DTYPES, seed=st.integers(0, 2**16), data=st.data())
def test_vector_norm(kw, shape, keepdims, dtype, seed, data):
    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    kw = dict(kw, axis=axis, keepdims=keepdims)
    t = tol(dtype) if dtype != "float32" else dict(rtol=1e-4, atol=1e-4)
    check_all(("vnorm", str(kw), len(shape), dtype), lambda x: rnp.linalg.norm(x, **kw),
              lambda x: np.linalg.norm(x, **kw), x, **t)


@pytest.mark.parametrize("kw", MATRIX_NORMS, ids=str)
@settings(max_examples=6)
@given(shape=st.lists(SIZES, min_size=2, max_size=3).map(tuple), keepdims=st.booleans(),
       dtype=DTYPES, seed=st.integers(0, 2**16), data=st.data())
def test_matrix_norm(kw, shape, keepdims, dtype, seed, data):
    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)
    axes = data.draw(st.permutations(range(len(shape))))[:2]
    kw = dict(kw, axis=tuple(axes), keepdims=keepdims)
    t = tol(dtype) if dtype != "float32" else dict(rtol=1e-4, atol=1e-4)
    check_all(("mnorm", str(kw), len(shape), dtype), lambda x: rnp.linalg.norm(x, **kw),
              lambda x: np.linalg.norm(x, **kw), x, **t)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_norm_default(shape):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3
    check(lambda x: rnp.linalg.norm(x), np.linalg.norm, x, backends=BACKENDS)
    check(lambda x: rnp.linalg.norm(x, keepdims=True), lambda x: np.linalg.norm(x, keepdims=True), x,
          backends=BACKENDS)


# -- eigh, svd and the norms from singular values ---------------------------------------------
# Eigen- and singular vectors are unique only up to sign (NumPy's float32 LAPACK and the
# float64 one relaxjax calls may pick other signs): the checks are the values against
# NumPy's and the factorizations' defining identities.

def _spectral_tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-9, atol=1e-9)


def _on_every_backend(key, fn, *args):
    outs = [rj.jit(fn, backend=b)(*args) for b in BACKENDS]
    outs.append(_JITS.setdefault(key + (args[0].ndim, args[0].dtype), rj.jit(fn))(*args))
    return outs + [fn(*args)]          # eager too


@pytest.mark.parametrize("uplo", ["L", "U"])
@settings(max_examples=8)
@given(batch=BATCH, n=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16))
def test_eigh(uplo, batch, n, dtype, seed):
    """Eigenvalues equal NumPy's; the eigenvectors are orthonormal and A V = V diag(w) for
    the symmetric matrix that UPLO's triangle defines (the other triangle is noise)."""
    a = general(seed, batch + (n, n), dtype)
    tri = np.tril(a) if uplo == "L" else np.triu(a)
    sym = (tri + np.swapaxes(tri, -1, -2) - tri * np.eye(n)).astype(np.float64)
    want_w = np.linalg.eigvalsh(a, UPLO=uplo)
    t = _spectral_tol(dtype)
    rt = np.float32 if dtype == "float32" else np.float64
    for w, v in _on_every_backend(("eigh", uplo), lambda a: tuple(rnp.linalg.eigh(a, UPLO=uplo)), a):
        assert w.dtype == v.dtype == rt and w.shape == batch + (n,) and v.shape == batch + (n, n)
        assert_same(w, want_w.astype(rt), **t)
        v64 = v.astype(np.float64)
        assert_same(np.swapaxes(v64, -1, -2) @ v64, np.broadcast_to(np.eye(n), v.shape), **t)
        assert_same(sym @ v64, v64 * w.astype(np.float64)[..., None, :], rtol=t["rtol"], atol=t["atol"] * 10 * n)
    for w in _on_every_backend(("eigvalsh", uplo), lambda a: rnp.linalg.eigvalsh(a, UPLO=uplo), a):
        assert_same(w, want_w.astype(rt), **t)


@pytest.mark.parametrize("full", [True, False])
@settings(max_examples=8)
@given(batch=BATCH, m=SIZES, n=SIZES, dtype=DTYPES, seed=st.integers(0, 2**16))
def test_svd(full, batch, m, n, dtype, seed):
    """Singular values equal NumPy's (descending); U and Vh have orthonormal columns and
    rows, of NumPy's shapes; U diag(S) Vh gives A back."""
    a = np.random.default_rng(seed).uniform(-3, 3, batch + (m, n))
    a = (np.round(a) if dtype == "int64" else a).astype(dtype)
    k = min(m, n)
    want_s = np.linalg.svd(a, compute_uv=False)
    t = _spectral_tol(dtype)
    rt = np.float32 if dtype == "float32" else np.float64
    for u, s, vh in _on_every_backend(("svd", full), lambda a: tuple(rnp.linalg.svd(a, full_matrices=full)), a):
        assert u.shape == batch + ((m, m) if full else (m, k)) and vh.shape == batch + ((n, n) if full else (k, n))
        assert u.dtype == s.dtype == vh.dtype == rt
        assert_same(s, want_s.astype(rt), **t)
        u64, vh64 = u.astype(np.float64), vh.astype(np.float64)
        assert_same(np.swapaxes(u64, -1, -2) @ u64, np.broadcast_to(np.eye(u.shape[-1]), batch + (u.shape[-1],) * 2), **t)
        assert_same(vh64 @ np.swapaxes(vh64, -1, -2), np.broadcast_to(np.eye(vh.shape[-2]), batch + (vh.shape[-2],) * 2), **t)
        assert_same((u64[..., :, :k] * s.astype(np.float64)[..., None, :]) @ vh64[..., :k, :], a.astype(np.float64),
                    rtol=t["rtol"], atol=t["atol"] * 10 * max(m, n))
    for s in _on_every_backend(("svdvals",), lambda a: rnp.linalg.svdvals(a), a):
        assert_same(s, want_s.astype(rt), **t)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
@settings(max_examples=6)
@given(shape=st.lists(SIZES, min_size=2, max_size=3).map(tuple), keepdims=st.booleans(),
       dtype=DTYPES, seed=st.integers(0, 2**16), data=st.data())
def test_matrix_norms_from_singular_values(ord, shape, keepdims, dtype, seed, data):
    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)
    nd = len(shape)
    axis = tuple(data.draw(st.permutations(range(-nd, 0)))[:2])
    kw = dict(ord=ord, axis=axis, keepdims=keepdims)
    t = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else tol(dtype)
    check_all(("snorm", str(kw), nd, dtype), lambda x: rnp.linalg.norm(x, **kw),
              lambda x: np.linalg.norm(x, **kw), x, **t)


def test_spectral_symbolic_shapes_and_errors():
    """One compile across sizes (k = min(m, n) stays symbolic); a non-square eigh argument
    and bad options raise precise errors."""
    m, n = rj.dims("m n")
    f = rj.jit(lambda a: tuple(rnp.linalg.svd(a, full_matrices=False)), shapes=(S((m, n), "float64"),))
    for ms, ns in ((5, 3), (3, 5), (4, 4), (1, 6)):
        a = np.random.default_rng(ms * ns).standard_normal((ms, ns))
        u, s, vh = f(a)
        assert_same(s, np.linalg.svd(a, compute_uv=False), rtol=1e-9, atol=1e-9)
        assert_same((u * s) @ vh, a, rtol=1e-9, atol=1e-9)
    assert f.cache_info().compiles == 1
    with pytest.raises(LinAlgShapeError, match="linalg.eigh: argument a of shape .* must be square"):
        rj.jit(rnp.linalg.eigh)(np.ones((3, 4)))
    with pytest.raises(ValueError, match="UPLO argument must be 'L' or 'U', got 'X'"):
        rj.jit(lambda a: rnp.linalg.eigh(a, UPLO="X"))(np.eye(2))
    with pytest.raises(NotImplementedError, match="hermitian=True"):
        rj.jit(lambda a: rnp.linalg.svd(a, hermitian=True))(np.eye(2))


# -- symbolic shapes ----------------------------------------------------------------------------

def test_one_compile_for_every_size():
    b, n = rj.dims("b n")
    f = rj.jit(lambda a, y: (rnp.linalg.solve(a, y), rnp.linalg.det(a), rnp.linalg.inv(a)),
               shapes=(S((b, n, n), "float64"), S((b, n, 2), "float64")))
    for bs, ns in ((1, 1), (2, 3), (3, 13), (1, 64)):
        a = general(ns, (bs, ns, ns), "float64")
        y = np.ones((bs, ns, 2))
        assert_same(f(a, y), (np.linalg.solve(a, y), np.linalg.det(a), np.linalg.inv(a)), rtol=1e-9, atol=1e-9)
    assert f.cache_info().compiles == 1
    text = f.lower(S((b, n, n), "float64"), S((b, n, 2), "float64")).as_text("optimized")
    for name in ("solve", "det", "inv"):
        assert f'call_library("linalg.{name}"' in text


def test_qr_symbolic_min():
    m, n = rj.dims("m n")
    f = rj.jit(lambda a: tuple(rnp.linalg.qr(a)), shapes=(S((m, n), "float64"),))
    for ms, ns in ((5, 3), (3, 5), (4, 4), (1, 6)):
        a = np.random.default_rng(ms * ns).standard_normal((ms, ns))
        assert_same(f(a), tuple(np.linalg.qr(a)), rtol=1e-9, atol=1e-9)
    assert f.cache_info().compiles == 1
    assert "min(m, n)" in f.lower(S((m, n), "float64")).as_text()


# -- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_singular_and_not_positive_definite(backend):
    sing = np.array([[1.0, 2.0], [2.0, 4.0]])
    for fn in (rnp.linalg.inv, lambda a: rnp.linalg.solve(a, np.ones(2))):
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
            rj.jit(fn, backend=backend)(sing)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        rj.jit(rnp.linalg.inv, backend=backend)(np.stack([np.eye(3), np.zeros((3, 3))]))
    assert_same(rj.jit(rnp.linalg.det, backend=backend)(sing), np.linalg.det(sing))
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        rj.jit(rnp.linalg.cholesky, backend=backend)(-np.eye(3))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        rnp.linalg.inv(sing)                                              # eager


def test_non_square_at_trace_time():
    with pytest.raises(LinAlgShapeError, match=r"argument a of shape \(a0, a1\) must be square.*a0=3, a1=4"):
        rj.jit(rnp.linalg.inv)(np.ones((3, 4)))
    with pytest.raises(np.linalg.LinAlgError):                           # NumPy's exception too
        rnp.linalg.det(np.ones((2, 3)))
    with pytest.raises(rj.ShapeError, match="must be square"):
        rj.jit(lambda a, b: rnp.linalg.solve(a, b))(np.ones((2, 3)), np.ones(3))
    with pytest.raises(LinAlgShapeError, match="1-dimensional"):
        rnp.linalg.cholesky(np.ones(3))
    with pytest.raises(rj.ShapeError, match="does not match"):
        rj.jit(lambda a, b: rnp.linalg.solve(a, b))(np.eye(3), np.ones(4))
    n, k = rj.dims("n k")
    with pytest.raises(rj.InconclusiveDimensionError, match="square"):   # not provable: say so
        rj.jit(rnp.linalg.inv, shapes=(S((n, k), "float64"),)).lower(S((n, k), "float64"))


def test_symbolic_square_guard():
    """In automatic mode a square input's two dims become one symbol (a guard)."""
    f = rj.jit(rnp.linalg.inv)
    assert_same(f(general(0, (4, 4), "float64")), np.linalg.inv(general(0, (4, 4), "float64")))
    assert_same(f(general(0, (6, 6), "float64")), np.linalg.inv(general(0, (6, 6), "float64")))
    assert f.cache_info().compiles == 1
    with pytest.raises(LinAlgShapeError):
        f(np.ones((4, 5)))


def test_dtypes():
    with pytest.raises(TypeError, match="float16 is unsupported"):
        rnp.linalg.inv(np.eye(2, dtype=np.float16))
    a = general(0, (3, 3), "float32")
    assert rj.jit(rnp.linalg.inv)(a).dtype == np.float32
    assert rj.jit(rnp.linalg.det)(a.astype(np.int32)).dtype == np.float64
    assert rj.jit(lambda a, b: rnp.linalg.solve(a, b))(a, np.ones(3)).dtype == np.float64
    with pytest.raises(NotImplementedError, match="mode 'complete'"):
        rnp.linalg.qr(a, mode="complete")
    assert rj.jit(lambda a: rnp.linalg.norm(a, 2))(a).dtype == np.float32
    assert rj.jit(lambda a: rnp.linalg.svd(a))(a.astype(np.int32))[1].dtype == np.float64


@pytest.mark.parametrize("source", ["numpy-openblas", "scipy"])
def test_native_solve_on_either_lapack(source):
    """The native linalg functions run on NumPy's OpenBLAS LAPACK (64-bit integers) when it
    has one, else on SciPy's (32-bit): both give NumPy's answer through the library ABI."""
    import ctypes
    from relaxjax.backends.llvm import lapack, target
    if source == "scipy":
        pytest.importorskip("scipy")
        bits, routine = 32, lapack._scipy_routine
    else:
        if target.lapack_function("dgetrf") is None:
            pytest.skip("NumPy's BLAS exports no LAPACK")
        bits, routine = 64, lambda r: target.lapack_function(r)[0]
    module, address = lapack.build("solve", bits, routine)
    fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64)(address)
    rng = np.random.default_rng(7)
    for n, k in [(1, 1), (3, 2), (17, 5)]:
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        bt = rng.standard_normal((k, n))
        xt = np.zeros((k, n))
        data = (ctypes.c_void_p * 3)(a.ctypes.data, bt.ctypes.data, xt.ctypes.data)
        shapes = (ctypes.c_int64 * 6)(n, n, k, n, k, n)
        ndims = (ctypes.c_int64 * 3)(2, 2, 2)
        assert fn(data, shapes, ndims, 3) == 0
        np.testing.assert_allclose(xt, np.linalg.solve(a, bt.T).T, rtol=1e-10, atol=1e-12)
    del module
