"""relaxjax quick start: one function, many batch sizes, one compile.

    python examples/quickstart.py
"""
import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp
import relaxjax.nn as nn


@rj.jit
def mlp(x, w1, b1, w2):
    h = nn.gelu(x @ w1 + b1)
    return nn.softmax(h @ w2), x.shape[0]


rng = np.random.default_rng(0)
w1 = rng.standard_normal((64, 128), dtype=np.float32)
b1 = rng.standard_normal(128, dtype=np.float32)
w2 = rng.standard_normal((128, 10), dtype=np.float32)

for batch in (3, 17, 128, 1000, 4099):
    x = rng.standard_normal((batch, 64), dtype=np.float32)
    probs, n = mlp(x, w1, b1, w2)
    # NumPy does the same computation, op by op
    h = x @ w1 + b1
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    e = np.exp(h @ w2 - (h @ w2).max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    err = np.abs(probs - expected).max()
    print(f"batch {batch:5d}: result {probs.dtype}{list(probs.shape)}, n = {n}, max |error| vs NumPy {err:.1e}")
    assert n == batch and np.allclose(probs, expected, rtol=1e-4, atol=1e-4)

print("\nThe traced program, with symbolic batch dim x0 (the sizes >= 1 of the first call became symbols):")
print(mlp.lower(x, w1, b1, w2).as_text())

print("\nAfter fusion and lowering: two library gemms, each followed by one fused loop program:")
print(mlp.lower(x, w1, b1, w2).as_text("optimized"))

info = mlp.cache_info()
print(f"\ncache: {info.compiles} compile, {info.hits} hits, {info.misses} miss for 5 batch sizes")
assert info.compiles == 1

# An explicit symbolic signature: the contract callers must satisfy
b, d = rj.dims("b d")
f = rj.jit(lambda x: rnp.concatenate([x, x[:, ::-1]], axis=1).reshape(-1),
           shapes=(rj.ShapeDtypeStruct((b, d), "float32"),))
print()
print(f.lower(rj.ShapeDtypeStruct((b, d), "float32")).as_text())
try:
    f(np.ones((3, 4, 5), np.float32))
except rj.ShapeError as e:
    print(f"\nShapeError: {e}")
