"""NEP 50 promotion against NumPy 2 itself: traced arrays of every dtype with Python scalars
(weak) and NumPy scalars (strong, though ``np.float64`` subclasses ``float``), through the
operators, in both operand orders."""
import operator
import warnings

import numpy as np
import pytest

import relaxjax as rj

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
SCALARS = [True, 3, 2.5, np.bool_(True), np.int8(3), np.int32(3), np.int64(3), np.uint8(3),
           np.uint64(3), np.float16(2.5), np.float32(2.5), np.float64(2.5)]
OPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
       operator.mod, operator.pow, operator.lt, operator.eq]


def _numpy_dtype(op, x, s, reflected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return (op(s, x) if reflected else op(x, s)).dtype
        except TypeError:
            return TypeError


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reflected", [False, True])
def test_operators_with_scalars_promote_like_numpy(dtype, reflected):
    mismatches = []
    for s in SCALARS:
        for op in OPS:
            want = _numpy_dtype(op, np.ones(3, dtype), s, reflected)
            fn = (lambda x: op(s, x)) if reflected else (lambda x: op(x, s))
            # NumPy 2 compares signed integers with uint64 in a mixed loop; relaxjax's
            # comparisons take one dtype, and say so
            pair = {np.dtype(dtype), np.asarray(s).dtype}
            mixed = (op in (operator.lt, operator.eq) and np.dtype("uint64") in pair and
                     any(d.kind == "i" for d in pair))
            try:
                got = rj.make_ir(fn)(rj.ShapeDtypeStruct(("n",), dtype)).main.results[0].type.dtype
            except TypeError as e:
                got = TypeError
                if mixed:
                    assert "one dtype" in str(e)
                    continue
            if got != want:
                mismatches.append(f"{dtype} {op.__name__} {s!r}: numpy {want}, relaxjax {got}")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("backend", rj.backends.available_backends())
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_float32_with_numpy_float64_scalars_is_float64(backend, n):
    """x / np.sqrt(8) and x * np.float64(2.0) are float64 in NumPy 2, values included."""
    x = np.linspace(-2, 2, n, dtype=np.float32)
    f = rj.jit(lambda x: (x / np.sqrt(8), x * np.float64(2.0), x + np.float32(1.5), x * 2.0),
               backend=backend)
    outs = f(x)
    wants = (x / np.sqrt(8), x * np.float64(2.0), x + np.float32(1.5), x * 2.0)
    for got, want in zip(outs, wants):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("backend", rj.backends.available_backends())
@pytest.mark.parametrize("rows, d", [(1, 1), (2, 3), (5, 64), (3, 257)])
def test_numpy_ufuncs_on_dims_are_values(backend, rows, d):
    """np.sqrt(q.shape[-1]) (attention's scale), np.log2 of a dim, and integer NumPy scalars
    times a dim, which stay dims (a reshape takes them)."""
    q = np.linspace(-1, 1, rows * d, dtype=np.float32).reshape(rows, d)

    def f(q):
        scaled = q / np.sqrt(q.shape[-1])
        logged = q * np.log2(q.shape[-1] + 1)
        flat = q.reshape(q.shape[0] * np.int64(1), np.int64(1) * q.shape[-1])
        return scaled, logged, flat
    got = rj.jit(f, backend=backend)(q)
    want = (q / np.sqrt(d), q * np.log2(d + 1), q)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_numpy_ufuncs_on_dims_outside_a_trace():
    n = rj.dim("n")
    assert isinstance(np.int64(2) * n, rj.SymbolicDim) and str(np.int64(2) * n) == "n * 2"
    assert str(n * np.int32(3) + np.int64(1)) == "n * 3 + 1"
    with pytest.raises(TypeError, match="symbolic dim n can only be used as a value inside"):
        np.sqrt(n)


def test_python_operators_on_dims_stay_weak_numpy_functions_are_strong():
    """As the README says: ``x / x.shape[-1] ** 0.5`` and ``x * abs(x.shape[-1])`` stay
    float32 (a dim is a weak Python number); ``rnp.sqrt(n)`` is a strong float64, as
    NumPy's ``np.sqrt(4)``."""
    import relaxjax.numpy as rnp
    x = np.ones(4, np.float32)
    for f, dtype, value in ((lambda x: x / x.shape[-1] ** 0.5, np.float32, 0.5),
                            (lambda x: x * abs(x.shape[-1]), np.float32, 4.0),
                            (lambda x: x * abs(-x.shape[-1]), np.float32, 4.0),
                            (lambda x: x * rnp.sqrt(x.shape[-1]), np.float64, 2.0)):
        got = rj.jit(f)(x)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, value)


def test_abs_of_a_dim_of_unknown_sign_says_so():
    with pytest.raises(rj.InconclusiveDimensionError, match="sign of the dim expression"):
        rj.jit(lambda x, y: x * abs(x.shape[0] - y.shape[0]))(np.ones(3), np.ones(2))
