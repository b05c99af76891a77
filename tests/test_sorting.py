"""sort and argsort against NumPy (stable, NaN last) on every backend, over hypothesis-drawn
shapes, axes and dtypes with many ties."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from helpers import BACKENDS, arrays, assert_same, check, shapes

PER_OP = settings(max_examples=10, deadline=None)


@given(dtype=st.sampled_from(["float32", "float64", "int32", "int64", "uint8", "bool"]),
       shape=shapes(1, 3), data=st.data())
@PER_OP
def test_sort_and_argsort(dtype, shape, data):
    x = data.draw(arrays(dtype, shape, -3, 3), label="x")          # few values: many ties
    if np.dtype(dtype).kind == "f" and x.size and data.draw(st.booleans(), label="nan"):
        x = x.copy()
        x.flat[data.draw(st.integers(0, x.size - 1), label="where")] = np.nan
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)), label="axis")
    check(lambda a: rnp.sort(a, axis=axis), lambda a: np.sort(a, axis=axis), x)
    check(lambda a: rnp.argsort(a, axis=axis),
          lambda a: np.argsort(a, axis=axis, kind="stable"), x)
    # NumPy's own functions and the method dispatch here inside jit
    check(lambda a: np.sort(a, axis=axis), lambda a: np.sort(a, axis=axis), x, eager=False)
    check(lambda a: a.argsort(axis=-1), lambda a: a.argsort(axis=-1, kind="stable"), x, eager=False)


def test_sort_is_a_library_call_and_compiles_once():
    f = rj.jit(lambda x: rnp.sort(x, axis=0) + 1.0)
    assert 'call_library("sort"' in f.lower(np.ones((3, 4))).as_text("optimized")
    for n in (2, 3, 17, 1000):
        x = np.random.default_rng(n).standard_normal((n, 4))
        assert_same(f(x), np.sort(x, axis=0) + 1.0)
    assert f.cache_info().compiles == 1


def test_sort_errors():
    with pytest.raises(Exception, match="axis 1 is out of bounds"):
        rnp.sort(np.ones(3), axis=1)
    with pytest.raises(ValueError, match="kind must be one of"):
        rnp.sort(np.ones(3), kind="bogo")
    with pytest.raises(NotImplementedError, match="order="):
        rnp.argsort(np.ones(3), order="f")
    for b in BACKENDS:
        with pytest.raises(rj.ShapeError, match="0-d"):
            rj.jit(lambda x: rj.lax.sort.bind(x), backend=b)(np.float64(1.0))
