"""Writing your own kernels: a loop-level program in plain Python, called from a jitted
function, fused with the graph ops around it, run for several batch sizes.

    python examples/custom_kernel.py
"""
import numpy as np

import relaxjax as rj
import relaxjax.numpy as rnp


@rj.kernel
def row_scale(x: rj.Buffer[("n", "m"), "float32"], s: rj.Buffer[("n",), "float32"],
              out: rj.Buffer[("n", "m"), "float32"]):
    for i, j in rj.grid(x.shape[0], x.shape[1]):
        out[i, j] = x[i, j] * s[i]


@rj.kernel
def row_sum(x: rj.Buffer[("n", "m"), "float32"], out: rj.Buffer[("n",), "float32"]):
    for i in range(x.shape[0]):
        acc = 0.0                        # a Python float is weak: acc is float32
        for j in range(x.shape[1]):
            if x[i, j] > 0.0:
                acc += x[i, j]
        out[i] = acc


@rj.jit
def f(x, s):
    y = rj.call_tir(row_scale, x, s, out=rj.ShapeDtypeStruct(x.shape, x.dtype))
    return rnp.exp(y) + 1.0


@rj.jit
def positive_row_sums(x):
    return rj.call_tir(row_sum, x, out=rj.ShapeDtypeStruct((x.shape[0],), x.dtype))


print("# the kernels, as loop-level programs")
print(row_scale)
print(row_sum)

b = rj.dim("b")
low = f.lower(rj.ShapeDtypeStruct((b, 64), "float32"), rj.ShapeDtypeStruct((b,), "float32"))
print("\n# traced: the kernel call sits among graph ops")
print(low.as_text("traced"))
print("\n# optimized: row_scale, exp and + 1.0 fused into one kernel")
print(low.as_text("optimized"))
print(low.as_text("loops"))

rng = np.random.default_rng(0)
for batch in (2, 7, 300):
    x = rng.standard_normal((batch, 64), dtype=np.float32)
    s = rng.standard_normal(batch, dtype=np.float32)
    np.testing.assert_allclose(f(x, s), np.exp(x * s[:, None]) + 1, rtol=1e-5)
    np.testing.assert_allclose(positive_row_sums(x), np.where(x > 0, x, 0).sum(1), rtol=1e-5, atol=1e-5)
    eager = rj.call_tir(row_sum, x, out=rj.ShapeDtypeStruct((batch,), "float32"))  # NumPy in, out
    np.testing.assert_allclose(eager, np.where(x > 0, x, 0).sum(1), rtol=1e-5, atol=1e-5)
print(f"\nmatches NumPy for 3 batch sizes; f compiled {f.cache_info().compiles} time(s), "
      f"positive_row_sums {positive_row_sums.cache_info().compiles} time(s)")

try:
    @rj.kernel
    def shifted(x: rj.Buffer[("n",), "float32"], out: rj.Buffer[("n",), "float32"]):
        for i in range(x.shape[0]):
            out[i] = x[i + 1]
except rj.ShapeError as e:
    print(f"\nShapeError: {e}")
