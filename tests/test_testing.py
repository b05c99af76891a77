"""relaxjax.testing: arrays_for draws what a symbolic signature allows, check_against and
assert_shape_polymorphic catch wrong and recompiling functions."""
from __future__ import annotations

import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.nn as rnn
import relaxjax.numpy as rnp
from relaxjax.backends import available_backends
from relaxjax.testing import (arrays_for, assert_shape_polymorphic, assert_tree_close, check_against,
                              default_tolerance)

S = rj.ShapeDtypeStruct
ROOT = pathlib.Path(__file__).resolve().parents[1]


# ----- the optional dependency -------------------------------------------------------------

def test_relaxjax_imports_without_hypothesis_and_testing_says_how_to_get_it():
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "import relaxjax as rj, relaxjax.numpy as rnp\n"
            "assert rj.jit(lambda x: x + 1)(rnp.np.ones(3)).sum() == 6\n"
            "try:\n    import relaxjax.testing\nexcept ImportError as e:\n    print('ERR', e)\n"
            "try:\n    rj.testing\nexcept ImportError as e:\n    print('ERR2', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "ERR " in r.stdout and "pip install hypothesis" in r.stdout
    assert "ERR2 " in r.stdout and "pip install hypothesis" in r.stdout


def test_rj_testing_is_the_package():
    import relaxjax.testing
    assert rj.testing is relaxjax.testing


# ----- arrays_for ---------------------------------------------------------------------------

N = rj.dim("n", min=3, max=9)
K = rj.dim("k")


@given(arrays_for([S((N, K), "float32"), S((K,), "int32"), ((2, N), "bool")], with_dims=True))
def test_arrays_for_respects_bounds_and_dtypes(drawn):
    (x, y, z), dims = drawn
    n, k = dims["n"], dims["k"]
    assert 3 <= n <= 9 and 1 <= k <= 64
    assert x.shape == (n, k) and x.dtype == np.float32
    assert y.shape == (k,) and y.dtype == np.int32
    assert z.shape == (2, n) and z.dtype == np.bool_
    assert np.isfinite(x).all() and np.abs(x).max(initial=0) <= 4
    assert np.abs(y).max(initial=0) <= 8


@given(arrays_for([S((N * 4, K), "float64"), S((N // 2, K * 2, 3), "float64")], with_dims=True, max_side=40))
def test_arrays_for_keeps_dim_expressions_consistent(drawn):
    (a, b), dims = drawn
    n, k = dims["n"], dims["k"]
    assert a.shape == (4 * n, k)
    assert b.shape == (n // 2, 2 * k, 3)
    assert 4 * n <= 40 and 2 * k <= 40            # every symbolic axis within max_side
    assert 3 <= n <= 9 and n // 2 >= 1


@given(arrays_for([S(("m",), "float64"), S(("m", 5), "float64")], min_side=2, max_side=6, with_dims=True))
def test_arrays_for_min_max_side_and_names(drawn):
    (a, b), dims = drawn
    assert 2 <= dims["m"] <= 6 and a.shape == (dims["m"],) and b.shape == (dims["m"], 5)


def test_arrays_for_n_div_2_needs_n_at_least_2():
    m = rj.dim("m_half", min=1, max=3)
    # with min_side=1 an axis m // 2 must be >= 1: m is 2 or 3, never 1
    seen = set()

    @settings(max_examples=40)
    @given(arrays_for([S((m // 2,), "float32")], with_dims=True))
    def t(drawn):
        seen.add(drawn[1]["m_half"])
    t()
    assert seen <= {2, 3} and seen


def test_arrays_for_can_draw_empty_axes_only_when_asked():
    z = rj.dim("z", min=0, max=4)
    arrays, dims = find(arrays_for([S((z, 2), "float64")], min_side=0, with_dims=True),
                        lambda t: t[0][0].shape[0] == 0)
    assert dims == {"z": 0}

    @given(arrays_for([S((z, 2), "float64")], with_dims=True))
    def never_empty(drawn):
        assert drawn[1]["z"] >= 1
    never_empty()


def test_arrays_for_dims_overrides_and_elements():
    q = rj.dim("q")

    @given(arrays_for([S((q, 3), "float32"), S((q,), "int64")], dims={"q": 5},
                      elements={"float32": st.just(np.float32(1.5)), np.int64: st.integers(100, 101)}))
    def fixed(arrays):
        x, y = arrays
        assert x.shape == (5, 3) and (x == 1.5).all()
        assert y.shape == (5,) and set(np.unique(y)) <= {100, 101}
    fixed()

    @given(arrays_for([S((q,), "float32")], dims={q: st.sampled_from([7, 11])}, dtype="float64"))
    def strategy_dims(arrays):
        (x,) = arrays
        assert x.shape[0] in (7, 11) and x.dtype == np.float64
    strategy_dims()
    with pytest.raises(ValueError, match="no shape uses"):
        arrays_for([S((q,), "float32")], dims={"nope": 3})


@settings(max_examples=10)
@given(arrays_for([S(("r", "c"), "float64")], min_side=30, max_side=40))
def test_arrays_for_large_arrays_are_dense(arrays):
    (a,) = arrays                                # not one repeated fill value
    assert len(np.unique(a)) >= 5 and len(np.unique(a[0])) >= 3 and len(np.unique(a[:, 0])) >= 3


# ----- comparing ------------------------------------------------------------------------------

def test_assert_tree_close_checks_structure_shape_dtype_values():
    x = np.ones(3, np.float32)
    assert_tree_close({"a": x, "n": 3}, {"a": x + 1e-7, "n": 3})
    with pytest.raises(AssertionError, match="dtype"):
        assert_tree_close(x, x.astype(np.float64))
    with pytest.raises(AssertionError, match="shape"):
        assert_tree_close(x, np.ones(4, np.float32))
    with pytest.raises(AssertionError, match=r"\['n'\]"):
        assert_tree_close({"a": x, "n": 3}, {"a": x, "n": 4})
    with pytest.raises(AssertionError, match="structure"):
        assert_tree_close((x, x), [x, x])
    with pytest.raises(AssertionError, match="values differ"):
        assert_tree_close(x, x + 1e-3)
    assert default_tolerance("float64")["rtol"] < default_tolerance("float32")["rtol"] < \
        default_tolerance("float16")["rtol"]


# ----- check_against ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_check_against_nn_functions_on_every_backend(dtype):
    b, d = rj.dims("b d")
    check_against(rnn.softmax, shapes=[S((b, d), dtype)], backend="all", max_examples=10)
    check_against(lambda x, g, bb: rnn.layer_norm(x, g, bb), shapes=[S((b, d), dtype), S((d,), dtype),
                                                                      S((d,), dtype)],
                  backend="all", explicit=True, max_examples=10)
    check_against(lambda x: rnn.logsumexp(x, axis=0), shapes=[S((b, d, 3), dtype)], backend="all",
                  max_examples=10)


def test_check_against_a_float64_numpy_reference():
    def ref(x):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)).astype(np.float32)
    check_against(rnn.softmax, ref, shapes=[S(("b", "d"), "float32")], max_examples=10)


def _off_by_one_when_long(x):
    s = rnp.sum(x, axis=0)
    return s + 1.0 if x.shape[0] > 5 else s


def test_check_against_reports_the_smallest_failing_shapes():
    with pytest.raises(AssertionError) as ei:
        check_against(_off_by_one_when_long, lambda x: np.sum(x, axis=0),
                      shapes=[S(("b", "d"), "float64")], max_examples=50)
    msg = str(ei.value)
    assert "llvm backend differs from the reference" in msg
    assert "shapes: x: float64[6, 1]" in msg and "dims: b=6, d=1" in msg, msg


def test_check_against_reports_errors_of_the_jitted_function():
    def scaled(x):
        return x / math.sqrt(x.shape[-1])
    # explicit mode has no concrete value for the dim: the trace fails, and that is reported
    with pytest.raises(AssertionError, match="llvm backend: InconclusiveDimensionError") as ei:
        check_against(scaled, shapes=[S(("n",), "float32")], explicit=True, max_examples=5)
    assert "for shapes: x: float32[1]; dims: n=1" in str(ei.value)
    check_against(scaled, shapes=[S(("n",), "float32")], max_examples=5)   # automatic mode: fine


def test_check_against_pytrees_dims_and_jitted_functions():
    @rj.jit
    def stats(x, y):
        return {"sum": rnp.sum(x * y, axis=-1), "rows": x.shape[0], "pair": (x.T, rnp.max(y))}
    n, m = rj.dims("n m")
    check_against(stats, shapes=[S((n, m), "float64"), S((m,), "float64")], max_examples=10)
    info = stats.cache_info()                  # used as is: its cache served the examples
    assert info.misses >= 1 and info.hits >= 1
    for backend in available_backends():
        check_against(stats, shapes=[S((n, m), "int32"), S((m,), "int32")], backend=backend, max_examples=5)


def test_check_against_catches_a_wrong_dtype():
    def f(x):
        return x * 2.0
    with pytest.raises(AssertionError, match="dtype"):
        check_against(f, lambda x: (x * 2.0).astype(np.float64), shapes=[S(("n",), "float32")], max_examples=5)


# ----- assert_shape_polymorphic --------------------------------------------------------------------

def mlp(x, w, b):
    return rnn.gelu(x @ w + b)


@pytest.mark.parametrize("mode", ["explicit", "auto"])
def test_shape_polymorphic_functions_pass(mode):
    n, k, m = rj.dims("n k m")
    assert_shape_polymorphic(mlp, [S((n, k), "float32"), S((k, m), "float32"), S((m,), "float32")],
                             mode=mode, backend="all", max_examples=4)
    # an axis n * 2 and a reshape that splits it again
    assert_shape_polymorphic(lambda x: rnp.reshape(rnp.concatenate([x, -x]), (2, -1, 3)).sum(0),
                             [S((n, 3), "float64")], mode=mode, max_examples=4)


def _branchy(x):
    # the trace compares a dim with 5: automatic mode guards it, and a call on the other side
    # of the guard traces (and compiles) a second entry
    return x * 2.0 if x.shape[0] > 5 else x + 1.0


def test_assert_shape_polymorphic_fails_for_a_recompiling_function():
    with pytest.raises(AssertionError) as ei:
        assert_shape_polymorphic(_branchy, [S(("b", 4), "float32")], mode="auto", max_examples=20)
    msg = str(ei.value)
    assert "not shape-polymorphic: 2 compiles" in msg, msg
    assert re.search(r"x0 <= 5.*x0 > 5|x0 > 5.*x0 <= 5", msg), msg
    # the smallest pair on both sides of the guard
    assert "float32[2, 4]" in msg and "float32[6, 4]" in msg, msg


def test_assert_shape_polymorphic_fails_for_a_function_needing_concrete_dims():
    def scaled(x):
        return x / math.sqrt(x.shape[-1])
    with pytest.raises(AssertionError, match="not shape-polymorphic"):
        assert_shape_polymorphic(scaled, [S(("b", "d"), "float32")], mode="auto", max_examples=10)
    with pytest.raises(AssertionError, match="InconclusiveDimensionError"):
        assert_shape_polymorphic(scaled, [S(("b", "d"), "float32")], mode="explicit", max_examples=3)


def test_assert_shape_polymorphic_checks_values_too():
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_shape_polymorphic(lambda x: x + 1.0, [S(("b",), "float64")], reference=lambda x: x + 2.0,
                                 max_examples=3)


# ----- the README's example ---------------------------------------------------------------------------

def test_readme_property_testing_example_runs():
    src = (ROOT / "README.md").read_text()
    section = src.split("## Property-based testing of your functions", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    ns: dict = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), ns)
    tests = [v for k, v in ns.items() if k.startswith("test_") and callable(v)]
    assert tests
    for t in tests:
        t()
