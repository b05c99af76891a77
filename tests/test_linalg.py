"""matmul, dot, tensordot, outer, inner, einsum against NumPy."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import SMALL_SIZES, arrays, assert_same, check, shapes

S = rj.ShapeDtypeStruct
DTYPES = ["float64", "float32", "int32", "int64"]
_JITS: dict = {}


def tol(dtype, k=1):
    """Sums of up to k products of values in [-10, 10] in another order than NumPy's."""
    d = np.dtype(dtype)
    if d == np.float32:
        return dict(rtol=1e-4, atol=1e-4 * k)
    if d == np.float64:
        return dict(rtol=1e-10, atol=1e-11 * k)
    return {}                                             # integers: exact


def check_reuse(key, rj_fn, np_fn, *args, **t):
    want = check(rj_fn, np_fn, *args, **t)
    f = _JITS.setdefault(key, rj.jit(rj_fn))
    assert_same(f(*args), want, **t)


@st.composite
def matmul_operands(draw, dtype=None):
    """Two operands with NumPy-compatible shapes: 1-D cases and broadcasting batch dims."""
    dtype = dtype or draw(st.sampled_from(DTYPES))
    m, k, n = draw(SMALL_SIZES), draw(SMALL_SIZES), draw(SMALL_SIZES)
    batch = draw(shapes(0, 2, st.integers(1, 4)))
    ba = tuple(b if draw(st.booleans()) else 1 for b in batch)[draw(st.integers(0, len(batch))):]
    bb = tuple(b if draw(st.booleans()) else 1 for b in batch)[draw(st.integers(0, len(batch))):]
    sa = (k,) if draw(st.integers(0, 4)) == 0 else ba + (m, k)
    sb = (k,) if draw(st.integers(0, 4)) == 0 else bb + (k, n)
    return draw(arrays(dtype, sa)), draw(arrays(dtype, sb)), k


@settings(max_examples=40)
@given(ops=matmul_operands())
def test_matmul(ops):
    a, b, k = ops
    check_reuse(("matmul", a.ndim, b.ndim, a.dtype), lambda a, b: a @ b, np.matmul, a, b, **tol(a.dtype, k))
    check(rnp.matmul, np.matmul, a, b, **tol(a.dtype, k))


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=10)
@given(data=st.data())
def test_matmul_2d_and_batched(dtype, data):
    m, k, n, b = (data.draw(SMALL_SIZES) for _ in range(4))
    a2, b2 = data.draw(arrays(dtype, (m, k))), data.draw(arrays(dtype, (k, n)))
    check_reuse(("mm2", dtype), lambda a, b: a @ b, lambda a, b: a @ b, a2, b2, **tol(dtype, k))
    a3, b3 = data.draw(arrays(dtype, (b, m, k))), data.draw(arrays(dtype, (b, k, n)))
    check_reuse(("mm3", dtype), lambda a, b: a @ b, lambda a, b: a @ b, a3, b3, **tol(dtype, k))
    check(lambda a, b: a @ b, lambda a, b: a @ b, a3, b2, **tol(dtype, k))     # batch broadcast
    check(lambda a, b: a @ b, lambda a, b: a @ b, a2, b3, **tol(dtype, k))


def test_matmul_mixed_dtypes_promote():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    for b in (np.ones((4, 2), np.float32), np.ones((4, 2), np.int64), np.ones((4, 2), np.uint8),
              np.ones(4, np.float64)):
        check(lambda a, b: a @ b, np.matmul, a, b)
    check(lambda a: a @ np.ones((4, 2)), lambda a: a @ np.ones((4, 2)), a)


@settings(max_examples=30)
@given(data=st.data())
def test_dot(data):
    dtype = data.draw(st.sampled_from(DTYPES))
    k = data.draw(SMALL_SIZES)
    sa = data.draw(shapes(0, 2)) + (k,)
    sb = data.draw(st.sampled_from([(k,), (k, 3), (2, k, 5), (1, 2, k, 1)]))
    a, b = data.draw(arrays(dtype, sa)), data.draw(arrays(dtype, sb))
    check(rnp.dot, np.dot, a, b, **tol(dtype, k))
    check(lambda a: rnp.dot(a, 3), lambda a: np.dot(a, 3), a)
    check(rnp.vdot, np.vdot, a, a, **tol(dtype, a.size))


@settings(max_examples=30)
@given(data=st.data())
def test_tensordot(data):
    dtype = data.draw(st.sampled_from(DTYPES))
    sa = data.draw(shapes(1, 3))
    nax = data.draw(st.integers(0, len(sa)))
    sb = sa[len(sa) - nax:] + data.draw(shapes(0, 2))
    a, b = data.draw(arrays(dtype, sa)), data.draw(arrays(dtype, sb))
    kk = int(np.prod(sa[len(sa) - nax:]))
    check(lambda a, b: rnp.tensordot(a, b, nax), lambda a, b: np.tensordot(a, b, nax), a, b, **tol(dtype, kk))
    # explicit, permuted axis pairs (some negative)
    perm = data.draw(st.permutations(range(len(sa))))
    pairs = perm[:data.draw(st.integers(0, len(sa)))]
    sc = tuple(sa[p] for p in pairs) + data.draw(shapes(0, 1))
    c = data.draw(arrays(dtype, sc))
    axes = ([p - len(sa) if p % 2 else p for p in pairs], list(range(len(pairs))))
    kk = int(np.prod([sa[p] for p in pairs]))
    check(lambda a, c: rnp.tensordot(a, c, axes), lambda a, c: np.tensordot(a, c, axes), a, c, **tol(dtype, kk))


@settings(max_examples=20)
@given(data=st.data())
def test_outer_inner(data):
    dtype = data.draw(st.sampled_from(DTYPES))
    a = data.draw(arrays(dtype, data.draw(shapes(1, 2))))
    b = data.draw(arrays(dtype, data.draw(shapes(1, 2))))
    check(rnp.outer, np.outer, a, b)
    k = data.draw(SMALL_SIZES)
    c = data.draw(arrays(dtype, data.draw(shapes(0, 2)) + (k,)))
    d = data.draw(arrays(dtype, data.draw(shapes(0, 2)) + (k,)))
    check(rnp.inner, np.inner, c, d, **tol(dtype, k))
    check(lambda c: rnp.inner(c, 2), lambda c: np.inner(c, 2), c)


# einsum: (subscripts, operand shapes as strings of the dims below)
EINSUM = [
    ("ij,jk->ik", "ab,bc"),
    ("bij,bjk->bik", "dab,dbc"),
    ("ij->ji", "ab"),
    ("ij->", "ab"),
    ("i,i->", "a,a"),
    ("ij,j->i", "ab,b"),
    ("...ij,...jk->...ik", "dab,dbc"),
    ("...ij,...jk->...ik", "ab,dbc"),
    ("...ij,...jk->...ik", "eab,dbc"),         # batch dims broadcast (e is 1)
    ("ij,jk", "ab,bc"),                        # implicit output: 'ik'
    ("ij,kj", "ab,cb"),                        # implicit output: 'ik'
    ("ba,ac", "ba,ac"),                        # implicit output: 'bc'
    ("ji", "ab"),                              # implicit: transpose
    ("i,j->ij", "a,b"),
    ("ij,ij->i", "ab,ab"),
    ("ij,ij->", "ab,ab"),
    ("bij,bkj->bik", "dab,dcb"),
    ("ijk->kji", "abc"),
    ("ijk->j", "abc"),
    ("ij,i->j", "ab,a"),
    ("ij,jk,kl->il", "ab,bc,cd"),
    ("i...->...", "abc"),
    ("...i,...i", "abc,abc"),
    ("ij,jk->ik", "ae,bc"),                    # size-1 j broadcasts against b
]


@pytest.mark.parametrize("sub,dims", EINSUM, ids=[f"{s}|{d}" for s, d in EINSUM])
@settings(max_examples=8)
@given(data=st.data())
def test_einsum(sub, dims, data):
    dtype = data.draw(st.sampled_from(DTYPES))
    size = dict(zip("abcd", (data.draw(SMALL_SIZES) for _ in range(4))))
    size["e"] = 1
    ops = [data.draw(arrays(dtype, tuple(size[c] for c in s))) for s in dims.split(",")]
    k = max(size.values()) ** 2
    check_reuse(("einsum", sub, dims, dtype), lambda *o: rnp.einsum(sub, *o),
                lambda *o: np.einsum(sub, *o), *ops, **tol(dtype, k))


def test_einsum_small_int_sums_keep_dtype():
    a = np.full((3, 40), 100, np.int8)
    for sub in ("ij->", "ij->i", "ij,ij->i"):
        ops = (a,) * sub.split("->")[0].count(",") + (a,)
        check(lambda *o: rnp.einsum(sub, *o), lambda *o: np.einsum(sub, *o), *ops)


def test_integer_matmul_exact_large():
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, (37, 64), dtype=np.int64)
    b = rng.integers(-1000, 1000, (64, 29), dtype=np.int64)
    check(lambda a, b: a @ b, lambda a, b: a @ b, a, b)
    check(lambda a, b: rnp.einsum("ij,jk->ik", a, b), lambda a, b: a @ b, a, b)


# -- shape rules and errors at the IR level -------------------------------------------------------

n, m, k, j, b = rj.dims("n m k j b")
IR_RULES = [
    ("matmul", lambda x, y: x @ y, [S((n, k), "float32"), S((k, m), "float32")], "f32[n, m]"),
    ("matmul_batched", lambda x, y: x @ y, [S((b, n, k), "float32"), S((k, m), "float32")], "f32[b, n, m]"),
    ("matmul_vec", lambda x, y: x @ y, [S((n, k), "float32"), S((k,), "float32")], "-> f32[n]"),
    ("matmul_vecvec", lambda x, y: x @ y, [S((k,), "float32"), S((k,), "float32")], "-> f32[]"),
    ("dot_nd", lambda x, y: rnp.dot(x, y), [S((n, k), "float32"), S((b, k, m), "float32")], "-> f32[n, b, m]"),
    ("outer", lambda x, y: rnp.outer(x, y), [S((n,), "float32"), S((m,), "float32")], "-> f32[n, m]"),
    ("einsum", lambda x, y: rnp.einsum("bij,bjk->bki", x, y), [S((b, n, k), "float32"), S((b, k, m), "float32")],
     "-> f32[b, m, n]"),
    ("tensordot", lambda x, y: rnp.tensordot(x, y, 2), [S((n, k, m), "float32"), S((k, m, j), "float32")],
     "-> f32[n, j]"),
]


@pytest.mark.parametrize("name,fn,structs,text", IR_RULES, ids=[r[0] for r in IR_RULES])
def test_ir_linalg_rules(name, fn, structs, text):
    assert text in str(rj.make_ir(fn, shapes=structs)(*structs))


IR_ERRORS = [
    ("matmul_undecidable", lambda x, y: x @ y, [S((n, k), "float32"), S((m, j), "float32")],
     rj.InconclusiveDimensionError),
    ("matmul_mismatch", lambda x, y: x @ y, [S((n, 3), "float32"), S((4, j), "float32")], rj.ShapeError),
    ("matmul_batch", lambda x, y: x @ y, [S((2, n, k), "float32"), S((3, k, j), "float32")], rj.ShapeError),
    ("einsum_undecidable", lambda x, y: rnp.einsum("ij,jk->ik", x, y),
     [S((n, k), "float32"), S((m, j), "float32")], rj.InconclusiveDimensionError),
]


@pytest.mark.parametrize("name,fn,structs,exc", IR_ERRORS, ids=[r[0] for r in IR_ERRORS])
def test_ir_linalg_errors(name, fn, structs, exc):
    with pytest.raises(exc):
        rj.make_ir(fn, shapes=structs)(*structs)


ERRORS = [
    ("matmul_0d", lambda: rnp.matmul(np.ones(3), np.float64(2.0)), ValueError),
    ("matmul_mismatch", lambda: rnp.matmul(np.ones((2, 3)), np.ones((4, 2))), rj.ShapeError),
    ("matmul_bool", lambda: rnp.matmul(np.ones((2, 2), bool), np.ones((2, 2), bool)), TypeError),
    ("einsum_repeated_index", lambda: rnp.einsum("ii->i", np.ones((3, 3))), ValueError),
    ("einsum_trace", lambda: rnp.einsum("ii", np.ones((3, 3))), ValueError),
    ("einsum_operand_count", lambda: rnp.einsum("ij,jk->ik", np.ones((3, 3))), ValueError),
    ("einsum_rank", lambda: rnp.einsum("ijk->i", np.ones((3, 3))), ValueError),
    ("einsum_size", lambda: rnp.einsum("ij,jk->ik", np.ones((3, 3)), np.ones((4, 3))), rj.ShapeError),
]


@pytest.mark.parametrize("name,fn,exc", ERRORS, ids=[e[0] for e in ERRORS])
def test_linalg_errors(name, fn, exc):
    with pytest.raises(exc):
        fn()


def test_jit_of_function_with_static_default():
    # unpassed defaults stay Python values (as in JAX), so axes=2 is not traced
    a, b = np.ones((2, 3, 4)), np.ones((3, 4, 5))
    assert_same(rj.jit(rnp.tensordot)(a, b), np.tensordot(a, b))

    def f(x, k=2):
        return rnp.tile(x, k)
    assert_same(rj.jit(f)(np.ones(3)), np.tile(np.ones(3), 2))
