"""``custom_jvp`` and ``checkpoint`` (``relaxjax/ad_custom.py``), with JAX's semantics:
a custom forward-mode rule is the one every derivative uses (grad, jvp, vmap of grad,
second derivatives), checked against the rule's closed form over hypothesis-drawn shapes in
float64; ``checkpoint`` gives the same gradient as the function without it, recomputes its
intermediates in the backward pass (more ``tanh`` in the program, less memory planned) and
keeps static arguments static."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.compile import run_pipeline
from relaxjax.compile.memplan import plan_memory
from relaxjax.compile.pipeline import default_pipeline

from helpers import BACKENDS

SIZES = st.one_of(st.sampled_from([1, 2, 3, 7, 13]), st.integers(1, 200))


@rj.custom_jvp
def softplus(x):
    return rnp.log1p(rnp.exp(x))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * (1 / (1 + rnp.exp(-x)))     # sigmoid: finite where exp(x) overflows


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@given(n=SIZES, seed=st.integers(0, 2 ** 16))
@settings(max_examples=15, deadline=None)
def test_custom_jvp_rule_is_every_derivative(n, seed):
    x = np.random.default_rng(seed).uniform(-30, 30, n)
    x[0] = 800.0                            # exp overflows: only the rule is finite there
    for backend in BACKENDS:
        g = rj.jit(rj.grad(lambda x: softplus(x).sum()), backend=backend)(x)
        np.testing.assert_allclose(g, _sigmoid(x), rtol=1e-12)
        out, tan = rj.jit(lambda x, t: rj.jvp(softplus, (x,), (t,)), backend=backend)(x, np.full(n, 2.0))
        np.testing.assert_allclose(tan, 2 * _sigmoid(x), rtol=1e-12)
        per = rj.jit(rj.vmap(rj.grad(softplus)), backend=backend)(x)
        np.testing.assert_allclose(per, _sigmoid(x), rtol=1e-12)
    # differentiating the function itself gives nan there: the rule is what was used
    assert np.isnan(rj.grad(lambda x: rnp.log1p(rnp.exp(x)).sum())(x)[0])


def test_second_derivative_goes_through_the_rule():
    """The Hessian-vector product differentiates the rule's tangent: sigmoid'."""
    x = np.linspace(-5, 5, 11)
    hv = rj.jvp(rj.grad(lambda x: softplus(x).sum()), (x,), (np.ones_like(x),))[1]
    np.testing.assert_allclose(hv, _sigmoid(x) * (1 - _sigmoid(x)), rtol=1e-10)


def test_defjvps_and_nondiff_arguments():
    @rj.custom_jvp
    def f(x, y):
        return x * rnp.sin(y)
    f.defjvps(lambda tx, ans, x, y: tx * rnp.sin(y) * 10.0,      # 10x: visibly the rule's
              lambda ty, ans, x, y: x * rnp.cos(y) * ty)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(5), rng.standard_normal(5)
    gx, gy = rj.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 10 * np.sin(y), rtol=1e-12)
    np.testing.assert_allclose(gy, x * np.cos(y), rtol=1e-12)
    np.testing.assert_allclose(rj.jit(f)(x, y), x * np.sin(y))      # undifferentiated: f itself

    def scale(k, x):
        return x * k
    g = rj.custom_jvp(scale, nondiff_argnums=(0,))
    g.defjvp(lambda k, primals, tangents: (scale(k, primals[0]), tangents[0] * (k + 1.0)))
    np.testing.assert_allclose(rj.grad(lambda x: g(3.0, x).sum())(x), np.full(5, 4.0))


def test_custom_jvp_without_a_rule_says_so():
    @rj.custom_jvp
    def f(x):
        return x * 2
    with pytest.raises(TypeError, match="has no rule: define one with its defjvp"):
        rj.grad(lambda x: f(x).sum())(np.ones(3))
    np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])        # eager: f itself


def _block(w, h):
    for _ in range(4):
        h = rnp.tanh(h @ w) * 1.5 + h
    return h


def _loss(block):
    def loss(w, x):
        h = x
        for _ in range(4):
            h = block(w, h)
        return (h ** 2).sum()
    return loss


@given(m=SIZES, d=st.sampled_from([1, 4, 16, 33]), seed=st.integers(0, 2 ** 16))
@settings(max_examples=10, deadline=None)
def test_checkpoint_gives_the_same_gradient(m, d, seed):
    rng = np.random.default_rng(seed)
    w, x = rng.standard_normal((d, d)) / (2 * d), rng.standard_normal((m, d))
    for backend in BACKENDS:
        want = rj.jit(rj.grad(_loss(_block)), backend=backend)(w, x)
        got = rj.jit(rj.grad(_loss(rj.checkpoint(_block))), backend=backend)(w, x)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_checkpoint_recomputes_instead_of_keeping():
    S = rj.ShapeDtypeStruct
    args = S((64, 64), "float32"), S((256, 64), "float32")
    plans, tanhs = {}, {}
    for name, block in (("plain", _block), ("remat", rj.checkpoint(_block))):
        module = rj.jit(rj.grad(_loss(block))).lower(*args).module
        tanhs[name] = rj.jit(rj.grad(_loss(block))).lower(*args).as_text("optimized").count("tanh")
        plans[name] = plan_memory(run_pipeline(module, default_pipeline()).main).total_bytes
    assert tanhs["remat"] > tanhs["plain"]          # the forward pass again, in the backward
    assert plans["remat"] < plans["plain"] * 0.6    # 16 layers' intermediates not kept
    # prevent_cse=False: canonicalization merges the copy back into the forward pass
    merged = rj.jit(rj.grad(_loss(rj.checkpoint(_block, prevent_cse=False)))).lower(*args)
    assert merged.as_text("optimized").count("tanh") == tanhs["plain"]


def test_checkpoint_static_arguments_and_integers():
    def layer(n, h, idx):
        for _ in range(n):
            h = rnp.sin(h) + h[:, idx]
        return h
    f = rj.checkpoint(layer, static_argnums=(0,))
    x, idx = np.linspace(0, 1, 6), np.array([1, 0])

    def loss(g):
        return lambda x: g(3, x.reshape(3, 2), idx).sum()
    np.testing.assert_allclose(rj.grad(loss(f))(x), rj.grad(loss(layer))(x), rtol=1e-12)
    assert rj.remat is rj.checkpoint
