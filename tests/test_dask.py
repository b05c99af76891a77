"""Jitted functions on Dask (issue 22, first step): ``da.map_blocks`` with a ``@rj.jit``
function over ragged chunk grids on the threaded scheduler gives NumPy's result with one
compile for every chunk shape (Dask's zero-size meta call makes the dims start from 0), and
a jitted function pickles (cloudpickle, as Dask ships it to workers) as its function and
options.  Skipped where Dask is not installed (``pip install -e '.[dask]'``)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp

da = pytest.importorskip("dask.array")
cloudpickle = pytest.importorskip("cloudpickle")


def _stencil(x):
    """A chunk-local computation with reductions and broadcasting."""
    return rnp.tanh(x) * 2.0 + x.mean(axis=1, keepdims=True) - x[:, :1]


@given(rows=st.integers(1, 300), cols=st.integers(1, 40), chunk=st.integers(1, 120), seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_map_blocks_over_ragged_chunks_compiles_once(rows, cols, chunk, seed):
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    f = rj.jit(_stencil)
    y = da.from_array(x, chunks=(chunk, cols)).map_blocks(f).compute(scheduler="threads")
    want = np.tanh(x) * 2.0 + x.mean(axis=1, keepdims=True) - x[:, :1]
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    assert f.cache_info().compiles == 1


def test_jitted_functions_pickle_as_function_and_options():
    f = rj.jit(lambda x, k: rnp.tanh(x) * k, static_argnums=1, donate_argnums=0)
    x = np.random.default_rng(0).standard_normal((4, 3))
    np.testing.assert_allclose(f(x.copy(), 3), np.tanh(x) * 3)
    g = pickle.loads(cloudpickle.dumps(f))
    assert g.cache_info().compiles == 0 and g.static_argnums == (1,) and g.donated == f.donated
    np.testing.assert_allclose(g(x.copy(), 3), np.tanh(x) * 3)
    h = pickle.loads(pickle.dumps(rj.jit(_stencil)))          # a module-level function: plain pickle
    np.testing.assert_allclose(h(x), _stencil.__wrapped__(x) if hasattr(_stencil, "__wrapped__")
                               else np.tanh(x) * 2.0 + x.mean(axis=1, keepdims=True) - x[:, :1])
