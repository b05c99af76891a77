"""Shape ops against NumPy: reshape, transpose, joining, splitting, tiling, padding, tri."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import SMALL_SIZES, arrays, assert_same, check, check_reuse, shapes, xs

S = rj.ShapeDtypeStruct



# (id, min rank, max rank, fn(xp, x)) -- the same code runs with xp=relaxjax.numpy and xp=numpy
UNARY = [
    ("reshape_-1", 1, 3, lambda xp, x: x.reshape(-1)),
    ("reshape_lead_-1", 1, 3, lambda xp, x: x.reshape(x.shape[0], -1)),
    ("reshape_-1_last", 1, 3, lambda xp, x: xp.reshape(x, (-1, x.shape[-1]))),
    ("reshape_sym_double", 1, 3, lambda xp, x: xp.concatenate([x, x]).reshape(x.shape[0] * 2, -1)),
    ("reshape_add_unit_dims", 1, 3, lambda xp, x: x.reshape(1, *x.shape, 1)),
    ("reshape_product", 2, 3, lambda xp, x: x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])),
    ("ravel", 0, 3, lambda xp, x: xp.ravel(x)),
    ("flatten", 1, 3, lambda xp, x: x.flatten()),
    ("T", 0, 3, lambda xp, x: x.T),
    ("transpose_none", 1, 3, lambda xp, x: xp.transpose(x)),
    ("transpose_neg_axes", 3, 3, lambda xp, x: xp.transpose(x, (-1, 0, 1))),
    ("transpose_method", 3, 3, lambda xp, x: x.transpose(1, 2, 0)),
    ("swapaxes", 2, 3, lambda xp, x: xp.swapaxes(x, 0, -1)),
    ("swapaxes_method", 3, 3, lambda xp, x: x.swapaxes(1, 2)),
    ("moveaxis", 2, 3, lambda xp, x: xp.moveaxis(x, 0, -1)),
    ("moveaxis_multi", 3, 3, lambda xp, x: xp.moveaxis(x, [0, 1], [-1, 0])),
    ("broadcast_to_lead", 1, 2, lambda xp, x: xp.broadcast_to(x, (3,) + x.shape)),
    ("broadcast_to_unit", 1, 2, lambda xp, x: xp.broadcast_to(x[:, None], (x.shape[0], 4) + x.shape[1:])),
    ("expand_dims_0", 0, 3, lambda xp, x: xp.expand_dims(x, 0)),
    ("expand_dims_-1", 0, 3, lambda xp, x: xp.expand_dims(x, -1)),
    ("expand_dims_tuple", 1, 3, lambda xp, x: xp.expand_dims(x, (0, 2, -1))),
    ("squeeze_none", 1, 3, lambda xp, x: xp.squeeze(x[None, :, None])),
    ("squeeze_axis", 1, 3, lambda xp, x: xp.squeeze(x[:, None], 1)),
    ("squeeze_neg_tuple", 1, 3, lambda xp, x: xp.squeeze(x[None, ..., None], (0, -1))),
    ("concatenate_0", 1, 3, lambda xp, x: xp.concatenate([x, x * 2, x[:1]])),
    ("concatenate_-1", 1, 3, lambda xp, x: xp.concatenate([x, x[..., :1]], axis=-1)),
    ("concatenate_none", 1, 3, lambda xp, x: xp.concatenate([x, x.T], axis=None)),
    ("concatenate_promote", 1, 3, lambda xp, x: xp.concatenate([x.astype(np.float32), x.astype(np.int32)])),
    ("concatenate_int_float64", 1, 3, lambda xp, x: xp.concatenate([x.astype(np.int8), x], axis=-1)),
    ("stack_0", 0, 3, lambda xp, x: xp.stack([x, x + 1])),
    ("stack_-1", 0, 3, lambda xp, x: xp.stack([x, x + 1, x], axis=-1)),
    ("hstack", 0, 3, lambda xp, x: xp.hstack([x, x])),
    ("vstack", 0, 3, lambda xp, x: xp.vstack([x, x[None] if x.ndim == 1 else x])),
    ("split_equal", 1, 3, lambda xp, x: xp.split(xp.concatenate([x, x, x]), 3)),
    ("split_equal_-1", 1, 3, lambda xp, x: xp.split(xp.concatenate([x, x], axis=-1), 2, axis=-1)),
    ("split_points", 1, 3, lambda xp, x: xp.split(x, [1, 3, 2, 100])),
    ("split_neg_point", 1, 3, lambda xp, x: xp.split(x, [-1])),
    ("array_split", 1, 3, lambda xp, x: xp.array_split(x, 3)),
    ("flip_all", 0, 3, lambda xp, x: xp.flip(x)),
    ("flip_0", 1, 3, lambda xp, x: xp.flip(x, 0)),
    ("flip_tuple", 2, 3, lambda xp, x: xp.flip(x, (0, -1))),
    ("fliplr", 2, 3, lambda xp, x: xp.fliplr(x)),
    ("flipud", 1, 3, lambda xp, x: xp.flipud(x)),
    ("tile_int", 0, 3, lambda xp, x: xp.tile(x, 3)),
    ("tile_more_reps", 1, 2, lambda xp, x: xp.tile(x, (2, 1, 3))),
    ("tile_fewer_reps", 2, 3, lambda xp, x: xp.tile(x, (2,))),
    ("tile_zero", 1, 3, lambda xp, x: xp.tile(x, (0, 2))),
    ("repeat_none", 0, 3, lambda xp, x: xp.repeat(x, 2)),
    ("repeat_axis", 1, 3, lambda xp, x: xp.repeat(x, 3, axis=0)),
    ("repeat_-1", 1, 3, lambda xp, x: x.repeat(2, axis=-1)),
    ("repeat_zero", 1, 3, lambda xp, x: xp.repeat(x, 0, axis=0)),
    ("pad_int", 1, 3, lambda xp, x: xp.pad(x, 2)),
    ("pad_pair", 1, 3, lambda xp, x: xp.pad(x, (1, 3), constant_values=-1.5)),
    ("pad_per_axis", 2, 2, lambda xp, x: xp.pad(x, ((0, 2), (3, 1)), constant_values=7)),
    ("tri_like", 2, 3, lambda xp, x: xp.tri(x.shape[-2], x.shape[-1])),
    ("tri_k_int", 2, 2, lambda xp, x: xp.tri(x.shape[0], x.shape[1], -2, dtype=np.int32)),
    ("tri_square", 1, 1, lambda xp, x: xp.tri(x.shape[0], k=1)),
]
for _k in (-3, -1, 0, 1, 2, 5):
    UNARY.append((f"tril_{_k}", 2, 3, lambda xp, x, k=_k: xp.tril(x, k)))
    UNARY.append((f"triu_{_k}", 2, 3, lambda xp, x, k=_k: xp.triu(x, k)))


@pytest.mark.parametrize("name,lo,hi,fn", UNARY, ids=[c[0] for c in UNARY])
@settings(max_examples=12)
@given(data=st.data())
def test_unary_shape_op(name, lo, hi, fn, data):
    x = data.draw(xs(lo, hi))
    check_reuse(name, lambda x: fn(rnp, x), lambda x: fn(np, x), x)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@settings(max_examples=10)
@given(data=st.data())
def test_shape_ops_keep_dtype(dtype, data):
    x = data.draw(xs(2, 3, dtype))

    def f(xp, x):
        return (xp.transpose(x), xp.flip(x, 0), xp.tile(x, 2), xp.repeat(x, 2, axis=1),
                xp.pad(x, 1), xp.tril(x), xp.triu(x, 1), xp.concatenate([x, x]), xp.stack([x, x]))
    check_reuse(("dtype", dtype), lambda x: f(rnp, x), lambda x: f(np, x), x)


@settings(max_examples=20)
@given(data=st.data())
def test_random_transpose_and_moveaxis(data):
    x = data.draw(xs(1, 4))
    nd = x.ndim
    perm = tuple(data.draw(st.permutations(range(nd))))
    neg = tuple(p - nd if data.draw(st.booleans()) else p for p in perm)
    src = data.draw(st.integers(-nd, nd - 1))
    dst = data.draw(st.integers(-nd, nd - 1))
    a1, a2 = data.draw(st.integers(-nd, nd - 1)), data.draw(st.integers(-nd, nd - 1))
    check(lambda x: rnp.transpose(x, neg), lambda x: np.transpose(x, neg), x)
    check(lambda x: rnp.moveaxis(x, src, dst), lambda x: np.moveaxis(x, src, dst), x)
    check(lambda x: rnp.swapaxes(x, a1, a2), lambda x: np.swapaxes(x, a1, a2), x)


@settings(max_examples=20)
@given(data=st.data())
def test_random_reshape(data):
    """Reshape to a random factorisation of the size, with one -1."""
    x = data.draw(xs(1, 3))
    size = x.size
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    a = data.draw(st.sampled_from(divisors))
    b = data.draw(st.sampled_from([d for d in divisors if (size // a) % d == 0]))
    target = [a, b, size // (a * b)]
    hole = data.draw(st.integers(0, 2))
    target[hole] = -1
    check(lambda x: x.reshape(target), lambda x: x.reshape(target), x)


@settings(max_examples=20)
@given(data=st.data())
def test_concatenate_random_parts(data):
    """Several inputs of different lengths on a random axis, mixed dtypes promote like NumPy."""
    base = data.draw(shapes(1, 3))
    axis = data.draw(st.integers(-len(base), len(base) - 1))
    dts = ["float32", "float64", "int32", "int64", "int8", "bool", "uint8"]
    parts = []
    for _ in range(data.draw(st.integers(1, 4))):
        s = list(base)
        s[axis] = data.draw(SMALL_SIZES)
        parts.append(data.draw(arrays(data.draw(st.sampled_from(dts)), tuple(s))))
    check(lambda *p: rnp.concatenate(p, axis=axis), lambda *p: np.concatenate(p, axis=axis), *parts)
    check(lambda *p: rnp.concatenate(p, axis=axis), lambda *p: np.concatenate(p, axis=axis), *parts)
    check(lambda *p: rnp.stack(p, axis=axis), lambda *p: np.stack(p, axis=axis),
          *[np.broadcast_to(parts[0], parts[0].shape).astype(p.dtype) for p in parts])


@settings(max_examples=15)
@given(data=st.data())
def test_split_sections(data):
    k = data.draw(st.integers(1, 5))
    q = data.draw(st.integers(1, 8))
    rest = data.draw(shapes(0, 2))
    x = data.draw(arrays("float64", (k * q,) + rest))
    check_reuse(("split", k), lambda x: rnp.split(x, k), lambda x: np.split(x, k), x)
    check_reuse(("array_split", k), lambda x: rnp.array_split(x, k), lambda x: np.array_split(x, k), x)
    m = data.draw(st.integers(2, 40))
    y = np.arange(float(m))
    check_reuse(("array_split_any", k), lambda x: rnp.array_split(x, k),
                lambda x: np.array_split(x, k), y)


@pytest.mark.parametrize("n", [7, 9, 13])
def test_split_non_divisible_raises(n):
    x = np.arange(float(n))
    with pytest.raises(ValueError):
        np.split(x, 2)
    with pytest.raises(ValueError, match="equal division"):
        rnp.split(x, 2)
    with pytest.raises(ValueError, match="equal division"):
        rj.jit(lambda x: rnp.split(x, 2))(x)
    f = rj.jit(lambda x: rnp.split(x, 2))
    assert len(f(np.arange(8.0))) == 2
    with pytest.raises(ValueError, match="equal division"):
        f(x)


@settings(max_examples=20)
@given(data=st.data())
def test_tile_repeat_pad_random(data):
    x = data.draw(xs(1, 3))
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)))
    r = data.draw(st.integers(0, 4))
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    widths = [tuple(data.draw(st.integers(0, 3)) for _ in range(2)) for _ in range(x.ndim)]
    cval = data.draw(st.floats(-5, 5, allow_nan=False))
    check(lambda x: rnp.tile(x, reps), lambda x: np.tile(x, reps), x)
    check(lambda x: rnp.repeat(x, r, axis=axis), lambda x: np.repeat(x, r, axis=axis), x)
    check(lambda x: rnp.pad(x, widths, constant_values=cval),
          lambda x: np.pad(x, widths, constant_values=cval), x)


@settings(max_examples=20)
@given(data=st.data())
def test_tri_family_random(data):
    x = data.draw(xs(2, 3, data.draw(st.sampled_from(["float64", "int32", "bool"]))))
    k = data.draw(st.integers(-45, 45))
    n, m = data.draw(SMALL_SIZES), data.draw(SMALL_SIZES)
    check(lambda x: rnp.tril(x, k), lambda x: np.tril(x, k), x)
    check(lambda x: rnp.triu(x, k), lambda x: np.triu(x, k), x)
    assert_same(rnp.tri(n, m, k), np.tri(n, m, k))
    assert_same(rnp.tri(n, k=k, dtype=np.int64), np.tri(n, k=k, dtype=np.int64))


@settings(max_examples=15)
@given(data=st.data())
def test_broadcast_to_and_arrays(data):
    target = data.draw(shapes(1, 3))
    src = tuple(d if data.draw(st.booleans()) else 1 for d in target)[data.draw(st.integers(0, len(target))):]
    x = data.draw(arrays("int32", src))
    check(lambda x: rnp.broadcast_to(x, target), lambda x: np.broadcast_to(x, target).copy(), x)
    y = data.draw(arrays("float32", target))
    check(lambda x, y: rnp.broadcast_arrays(x, y), lambda x, y: [a.copy() for a in np.broadcast_arrays(x, y)],
          x, y)


# -- errors -------------------------------------------------------------------------------

ERRORS = [
    ("reshape_two_holes", lambda x: rnp.reshape(x, (-1, -1)), ValueError),
    ("reshape_bad_count", lambda x: rnp.reshape(x, (5, 7)), rj.ShapeError),
    ("reshape_not_multiple", lambda x: rnp.reshape(x, (-1, 7)), rj.ShapeError),
    ("squeeze_non_unit", lambda x: rnp.squeeze(x, 0), ValueError),
    ("concat_rank", lambda x: rnp.concatenate([x, x[0]]), rj.ShapeError),
    ("concat_0d", lambda x: rnp.concatenate([x[0, 0], x[0, 0]]), ValueError),
    ("concat_other_axis", lambda x: rnp.concatenate([x, x[:, :2]], axis=0), rj.ShapeError),
    ("transpose_not_perm", lambda x: rnp.transpose(x, (0, 0)), ValueError),
    ("axis_out_of_bounds", lambda x: rnp.flip(x, 2), np.exceptions.AxisError),
    ("expand_dims_repeat", lambda x: rnp.expand_dims(x, (0, -4)), ValueError),
    ("pad_mode", lambda x: rnp.pad(x, 1, mode="edge"), ValueError),
    ("repeat_array", lambda x: rnp.repeat(x, np.array([1, 2])), TypeError),
    ("tile_negative", lambda x: rnp.tile(x, -1), TypeError),
    ("tril_1d", lambda x: rnp.tril(x[0]), ValueError),
    ("broadcast_to_smaller", lambda x: rnp.broadcast_to(x, (6,)), rj.ShapeError),
    ("broadcast_to_mismatch", lambda x: rnp.broadcast_to(x, (4, 6)), rj.ShapeError),
]


@pytest.mark.parametrize("name,fn,exc", ERRORS, ids=[e[0] for e in ERRORS])
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_shape_op_errors(name, fn, exc, mode):
    x = np.ones((3, 6))
    with pytest.raises(exc):
        (fn if mode == "eager" else rj.jit(fn))(x)


# -- shape rules at the IR level ------------------------------------------------------------

n, m, k, j = rj.dims("n m k j")
n2 = rj.dim("n2", min=2)


def _ir(fn, *structs):
    return str(rj.make_ir(fn, shapes=structs)(*structs))


IR_RULES = [
    ("reshape_flat", lambda x: x.reshape(-1), [S((n, 4), "float32")], "f32[n * 4]"),
    ("reshape_sym", lambda x: x.reshape(x.shape[0] * 2, -1), [S((n, 4), "float32")], "f32[n * 2, 2]"),
    ("reshape_split_dim", lambda x: x.reshape(x.shape[0], 2, -1), [S((n, 6), "float32")], "f32[n, 2, 3]"),
    ("ravel", lambda x: rnp.ravel(x), [S((n, m), "float32")], "f32[m * n]"),
    ("transpose", lambda x: x.T, [S((n, m), "float32")], "f32[m, n]"),
    ("moveaxis", lambda x: rnp.moveaxis(x, 0, -1), [S((n, m, 3), "float32")], "f32[m, 3, n]"),
    ("expand_squeeze", lambda x: rnp.squeeze(rnp.expand_dims(x, 1)), [S((n, m), "int32")], "-> i32[n, m]"),
    ("concat", lambda x, y: rnp.concatenate([x, y]), [S((n, 3), "float32"), S((m, 3), "float32")],
     "f32[m + n, 3]"),
    ("concat_self", lambda x: rnp.concatenate([x, x, x], axis=-1), [S((4, n), "float32")], "f32[4, n * 3]"),
    ("stack", lambda x, y: rnp.stack([x, y], -1), [S((n, m), "float32")] * 2, "f32[n, m, 2]"),
    ("split", lambda x: rnp.split(x, 2), [S((2 * n,), "float32")], "(f32[n], f32[n])"),
    ("tile", lambda x: rnp.tile(x, (2, 3)), [S((n, m), "float32")], "f32[n * 2, m * 3]"),
    ("repeat", lambda x: rnp.repeat(x, 3, axis=0), [S((n, m), "float32")], "f32[n * 3, m]"),
    ("pad", lambda x: rnp.pad(x, ((1, 2), (0, 0))), [S((n, m), "float32")], "f32[n + 3, m]"),
    ("tril", lambda x: rnp.tril(x), [S((n, m), "float64")], "-> f64[n, m]"),
    ("tri", lambda x: rnp.tri(x.shape[0], x.shape[0] + 1), [S((n,), "float32")], "f64[n, n + 1]"),
    ("flip", lambda x: rnp.flip(x), [S((n, m), "float32")], "-> f32[n, m]"),
]


@pytest.mark.parametrize("name,fn,structs,text", IR_RULES, ids=[r[0] for r in IR_RULES])
def test_ir_shape_rules(name, fn, structs, text):
    assert text in _ir(fn, *structs)


IR_ERRORS = [
    ("concat_mismatch", lambda x, y: rnp.concatenate([x, y]), [S((n, 3), "float32"), S((m, 4), "float32")],
     rj.ShapeError),
    ("concat_undecidable", lambda x, y: rnp.concatenate([x, y]), [S((n, k), "float32"), S((m, j), "float32")],
     rj.InconclusiveDimensionError),
    ("stack_undecidable", lambda x, y: rnp.stack([x, y]), [S((n, m), "float32"), S((m, n), "float32")],
     rj.InconclusiveDimensionError),
    ("split_undecidable", lambda x: rnp.split(x, 2), [S((n,), "float32")], rj.InconclusiveDimensionError),
    ("squeeze_symbolic", lambda x: rnp.squeeze(x, 0), [S((n, m), "float32")], rj.InconclusiveDimensionError),
    ("reshape_undecidable", lambda x: x.reshape(-1, 3), [S((n,), "float32")], rj.InconclusiveDimensionError),
    ("reshape_count", lambda x: x.reshape(x.shape[0], 3), [S((n, 4), "float32")], rj.ShapeError),
    ("broadcast_undecidable", lambda x: rnp.broadcast_to(x, (n, 3)), [S((n,), "float32")],
     rj.InconclusiveDimensionError),
]


@pytest.mark.parametrize("name,fn,structs,exc", IR_ERRORS, ids=[r[0] for r in IR_ERRORS])
def test_ir_shape_errors(name, fn, structs, exc):
    with pytest.raises(exc):
        _ir(fn, *structs)


def test_split_ir_with_divisibility_guard():
    """Automatic shapes: a split records a divisibility guard; odd sizes retrace and raise."""
    f = rj.jit(lambda x: rnp.split(x, 3))
    for size in (6, 9, 30):
        assert_same(f(np.arange(float(size))), np.split(np.arange(float(size)), 3))
    assert f.cache_info().compiles == 1
    with pytest.raises(ValueError):
        f(np.arange(10.0))
