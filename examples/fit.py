"""Fitting a NumPy prototype by gradient descent: a small MLP regression of a noisy curve,
trained with ``rj.value_and_grad`` and plain SGD on minibatches whose size changes every
epoch.  One compile serves every batch size.

    python examples/fit.py
"""
import numpy as np

import relaxjax as rj


def predict(params, x):
    h = np.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params, x, y):
    return np.mean((predict(params, x) - y) ** 2)


@rj.jit
def sgd_step(params, x, y, lr):
    value, grads = rj.value_and_grad(loss)(params, x, y)
    return value, {k: params[k] - lr * grads[k] for k in params}


rng = np.random.default_rng(0)
x_all = rng.uniform(-3, 3, (2000, 1))
y_all = np.sin(x_all) + 0.1 * rng.standard_normal(x_all.shape)
params = {"w1": rng.standard_normal((1, 32)) * 0.5, "b1": np.zeros(32),
          "w2": rng.standard_normal((32, 1)) * 0.5, "b2": np.zeros(1)}

first = loss(params, x_all, y_all)
for epoch in range(30):
    batch = int(rng.choice([16, 33, 64, 127, 250]))     # a different size every epoch
    for start in range(0, len(x_all) - batch + 1, batch):
        value, params = sgd_step(params, x_all[start:start + batch], y_all[start:start + batch], 0.05)
    if epoch % 5 == 4:
        print(f"epoch {epoch + 1:2d}  batch {batch:3d}  loss {loss(params, x_all, y_all):.4f}")

last = loss(params, x_all, y_all)
print(f"loss {first:.3f} -> {last:.4f}; compiles: {sgd_step.cache_info().compiles}")
assert last < 0.1 * first and sgd_step.cache_info().compiles == 1
