"""The CUDA backend, checked without a GPU and with one.

A corpus of programs covers every primitive (each elementwise op in each dtype it supports,
reductions, shape ops, indexing, matmul with fused epilogues, the five benchmark workloads).

* Every CUDA kernel the corpus generates is compiled for sm_90 by nvcc in one module (ptxas
  included), failing on any error.  Needs no GPU; skipped only without nvcc.
* The corpus runs on ``cuda-emulated`` — the same generated CUDA C, compiled for the CPU
  and run with one OpenMP thread per CUDA thread, two warps per block and at most four
  blocks, so grid-stride loops and cross-warp reductions run even on small inputs — and on
  ``cuda`` when a GPU is present, against NumPy on hypothesis-drawn shapes with symbolic
  dims (sizes 1, primes, larger).
* On a machine with a GPU the whole suite also runs on ``cuda`` (``helpers.BACKENDS``).
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
from typing import Callable, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax import nn
from relaxjax.backends.cuda import emulated_device, gpu_available
from relaxjax.backends.cuda.device import module_source
from relaxjax.core import PRIMITIVES
from helpers import SMALL_SIZES, arrays, assert_same, tolerance
from test_elementwise import BINARY, UNARY
from test_fusion import layer_norm_by_hand, mlp
from test_kernel import row_scale, row_sum
from test_reductions import REDUCTIONS

S = rj.ShapeDtypeStruct
n, m = rj.dims("n m")


class Program(NamedTuple):
    name: str
    fn: Callable
    structs: tuple
    lo: float = -10.0
    hi: float = 10.0
    tol: dict | None = None
    nonzero: bool = False        # integer operands must be nonzero (division)


def _corpus() -> list:
    out = []
    for op in UNARY:
        for d in op.dtypes:
            out.append(Program(f"{op.name}[{d}]", op.rj_fn, (S((n, m), d),), op.lo, op.hi))
    for op in BINARY:
        for d in op.dtypes:
            out.append(Program(f"{op.name}[{d}]", op.rj_fn, (S((n, m), d), S((m,), d)), op.lo, op.hi,
                               nonzero=op.name in ("floor_divide", "mod", "remainder") and d != "float32"
                               and d != "float64"))
    for red in REDUCTIONS:
        if red.name.startswith("x.") or red.extra:
            continue
        for d in ("float32", "int32", "bool"):
            for axis in (None, 0, 1):
                out.append(Program(f"{red.name}[{d},axis={axis}]",
                                   lambda x, r=red, a=axis: r.rj_fn(x, a, False), (S((n, m), d),),
                                   # |x| <= 1 for prod: partial products that overflow to inf
                                   # meet a 0 as NaN in any order but NumPy's
                                   -1 if red.name == "prod" else -10, 1 if red.name == "prod" else 10,
                                   tol=dict(rtol=1e-4, atol=1e-4)))
    f32, f16, f64 = "float32", "float16", "float64"
    more = [
        Program("var", lambda x: rnp.var(x, axis=1), (S((n, m), f32),), tol=dict(rtol=1e-4, atol=1e-4)),
        Program("float16 chain", lambda x: rnp.tanh(x * 2.0 + 1.0) + x, (S((n, m), f16),), -3, 3),
        Program("float16 sum", lambda x: rnp.sum(x, axis=1), (S((n, m), f16),), -1, 1,
                tol=dict(rtol=2e-2, atol=5e-2)),
        Program("astype f32->u8", lambda x: x.astype("uint8"), (S((n, m), f32),), -300, 300),
        Program("astype f64->i16", lambda x: x.astype("int16"), (S((n, m), f64),), -1e6, 1e6),
        Program("astype i64->f16", lambda x: x.astype("float16"), (S((n, m), "int64"),), -1e4, 1e4),
        Program("astype f32->u64", lambda x: x.astype("uint64"), (S((n, m), f32),), 0, 1e6),
        Program("u8 arithmetic", lambda x: (x * 3 + 7) // 2 - x, (S((n, m), "uint8"),), 0, 255),
        Program("i8 arithmetic", lambda x: -(x * 5) + x % 3, (S((n, m), "int8"),), -128, 127),
        Program("where", lambda c, x: rnp.where(c > 0, x, -x), (S((n, m), f32), S((n, m), f32))),
        Program("clip", lambda x: rnp.clip(x, -1.0, 2.0), (S((n, m), f32),)),
        Program("transpose", lambda x: x.T + 1.0, (S((n, m), f32),)),
        Program("reshape", lambda x: (x * 2.0).reshape(m, n) + 1.0, (S((n, m), f32),)),
        Program("broadcast_to", lambda x, y: rnp.broadcast_to(x, y.shape) * y, (S((m,), f32), S((n, m), f32))),
        Program("concatenate", lambda x: rnp.concatenate([x, x * 2.0], axis=1), (S((n, m), f32),)),
        Program("pad", lambda x: rnp.pad(x, ((1, 2), (0, 3))), (S((n, m), f32),)),
        Program("slice", lambda x: x[1:, ::2] * 3.0, (S((n, m), f32),)),
        Program("take", lambda x: rnp.take(x, rnp.array([0, 0]), axis=1) + 1.0, (S((n, m), f32),)),
        Program("take_along_axis", lambda x: rnp.take_along_axis(x, rnp.argsort(x, axis=1)
                                                                 if hasattr(rnp, "argsort") else
                                                                 rnp.argmax(x, axis=1, keepdims=True), axis=1),
                (S((n, m), f32),)),
        Program("arange", lambda x: x + rnp.arange(x.shape[1], dtype="float32"), (S((n, m), f32),)),
        Program("matmul f32", lambda x, w: x @ w, (S((n, m), f32), S((m, 7), f32)),
                tol=dict(rtol=1e-4, atol=1e-4)),
        Program("matmul f64 + epilogue", lambda x, w, b: rnp.tanh(x @ w + b),
                (S((n, m), f64), S((m, 5), f64), S((5,), f64))),
        Program("matmul int32", lambda x, w: x @ w, (S((n, m), "int32"), S((m, 3), "int32")), -5, 5),
        Program("batched matmul", lambda x, w: x @ w, (S((3, n, m), f32), S((m, 4), f32)),
                tol=dict(rtol=1e-4, atol=1e-4)),
        Program("nonzero", lambda x: rnp.nonzero(x > 0)[0] * 2, (S((n,), f32),)),
        Program("boolean_mask", lambda x: x[x > 0] + 1.0, (S((n,), f32),)),
        Program("match_cast", lambda x: rj.match_cast(x * 2.0, (n, m)) + 1.0, (S((n, m), f32),)),
        Program("check_equal", lambda x: rj.lax.check_equal.bind(x, x * 1.0, what="x") + 1.0, (S((n, m), f32),)),
        Program("iota_count", lambda x, k: rj.lax.iota_count(k) * 2 + x[0].astype("int64"),
                (S((1,), "int32"), S((), "int64")), 0, 9),
        Program("cumsum", lambda x: rnp.cumsum(x, axis=0) + rnp.cumsum(x, axis=1), (S((n, m), f32),),
                tol=dict(rtol=1e-4, atol=1e-4)),
        Program("cumprod", lambda x: rnp.cumprod(x, axis=1), (S((n, m), f64),), -1, 1),
        Program("dynamic slice, update", lambda x, i: (
                    rj.lax.dynamic_slice(x, (i, 0), (1, x.shape[1])),
                    rj.lax.dynamic_update_slice(x, x[:1] * 2.0, (i, i))),
                (S((n, m), f32), S((), "int32")), 0, 4),
        Program("at: update_slice, scatter", lambda x, i: (
                    x.at[1:, ::-2].add(1.0), x.at[:, i].add(x[:, :1]), x.at[i].min(-1.0),
                    rnp.zeros(9, "int32").at[i].add(1)),
                (S((n, m), f32), S((5,), "int32")), 0, 4),
        Program("setitem", lambda x, i: _setitems(x, i), (S((n, m), "int32"), S((3,), "int64")), -3, 3),
        Program("sort, argsort", lambda x: (rnp.sort(x, axis=0), rnp.argsort(x, axis=1)),
                (S((n, m), f32),)),
        Program("cummax, cummin", lambda x: (rj.lax.cummax.bind(x, axis=1), rj.lax.cummin.bind(x, axis=0)),
                (S((n, m), "int32"),), -10, 10),
    ]
    out += more
    out += [      # control flow: the regions' kernels driven from the host
        Program("fori_loop stencil", lambda x: rj.lax.fori_loop(
                    0, 3, lambda i, a: a * 0.5 + rnp.roll(a, 1, axis=1) * 0.25 + i, x), (S((n, m), f32),)),
        Program("while_loop", lambda x: rj.lax.while_loop(
                    lambda c: c[1] < 4, lambda c: (c[0] * 0.5 + 1.0, c[1] + 1), (x, 0))[0], (S((n, m), f32),)),
        Program("scan", lambda x: rj.lax.scan(lambda c, r: (c + r, c * r), x[0] * 0.0, x), (S((n, m), f32),),
                tol=dict(rtol=1e-4, atol=1e-4)),
        Program("cond", lambda x: rj.lax.cond(x.sum() > 0, lambda a: a * 2.0, lambda a: -a, x),
                (S((n, m), f32),), tol=dict(rtol=1e-4, atol=1e-4)),
        # complex values: split into real parts (SplitComplex) before any kernel is made
        Program("complex arithmetic", lambda x, y: (rnp.conj(x) * y / (y + 3.0) + x.real,
                                                    x.imag * abs(y) + rnp.exp(x * 0.5j)),
                (S((n, m), "complex64"), S((m,), "complex64")), -2, 2, tol=dict(rtol=1e-4, atol=1e-4)),
    ]

    def w5(q, k, v):
        s = (q @ k.T) * (1.0 / math.sqrt(q.shape[-1]))
        return nn.softmax(s, axis=-1) @ v
    t4 = dict(rtol=1e-4, atol=1e-4)
    out += [
        Program("W1 elementwise chain", lambda x: rnp.tanh(rnp.exp(x) * 2.0 + 1.0) - x, (S((n, m), f32),), -3, 3),
        Program("W2 softmax", lambda x: nn.softmax(x, axis=-1), (S((n, m), f32),)),
        # inputs in [-1, 1]: on a constant row (x - mean) is rounding noise (an ulp of x) that
        # 1/sqrt(var + 1e-5) ~ 316 and g amplify, whatever the summation order
        Program("W3 layer norm", layer_norm_by_hand, (S((n, m), f32), S((m,), f32), S((m,), f32)), -1, 1,
                tol=dict(rtol=1e-4, atol=3e-4)),
        Program("W4 MLP", mlp, (S((n, 16), f32), S((16, 32), f32), S((32,), f32), S((32, 16), f32),
                               S((16,), f32)), -1, 1, tol=t4),
        Program("W5 attention", w5, (S((n, 8), f32),) * 3, -1, 1, tol=t4),
        Program("erf gelu", lambda x: nn.gelu(x, approximate=False), (S((n, m), f32),), tol=t4),
        Program("erf f64", lambda x: nn.erf(x), (S((n, m), f64),)),
        Program("rms_norm", lambda x: x / rnp.sqrt(rnp.mean(x * x, axis=-1, keepdims=True) + 1e-6),
                (S((n, m), f32),), tol=t4),
        Program("logsumexp", lambda x: rnp.log(rnp.sum(rnp.exp(x - rnp.max(x, axis=1, keepdims=True)), axis=1)),
                (S((n, m), f32),), tol=t4),
    ]
    out += _user_kernels()
    return out


def _setitems(x, i):
    i = i % x.shape[0]              # in range: NumPy's assignment raises otherwise
    x[i] = 7
    x[i] += x[0]
    x[x > 2] = -1
    return x


def _user_kernels() -> list:
    """Kernels users write (rj.kernel) run on the CUDA backend like generated ones."""
    f32 = "float32"
    return [
        Program("user kernel row_scale + exp",
                lambda x, s: rnp.exp(rj.call_tir(row_scale, x, s, out=S(x.shape, x.dtype))) + 1.0,
                (S((n, m), f32), S((n,), f32)), -2, 2),
        Program("user kernel row_sum", lambda x: rj.call_tir(row_sum, x, out=S((x.shape[0],), x.dtype)),
                (S((n, m), f32),), tol=dict(rtol=1e-5, atol=1e-4)),
    ]


CORPUS = _corpus()


def _jit(p: Program, backend: str):
    return rj.jit(p.fn, shapes=p.structs, backend=backend)


def _kernels(p: Program) -> list:
    """The CUDA kernels of a program (code generation needs neither CuPy nor a GPU)."""
    exe = _jit(p, "cuda").lower(*p.structs).compile()._entry.executable
    return exe.unique_kernels


def _supported(p: Program) -> bool:
    """Programs NumPy itself rejects for a dtype (no loop) are left to test_elementwise."""
    try:
        _jit(p, "numpy").lower(*p.structs)
    except TypeError:
        return False
    return True


SUPPORTED = [p for p in CORPUS if _supported(p)]


def test_corpus_covers_every_primitive():
    used = set()
    for p in SUPPORTED:
        used |= {b.callee.name for b in rj.make_ir(p.fn)(*p.structs).main.bindings if b.kind == "primitive"}
    assert set(PRIMITIVES) - used == set(), f"primitives the CUDA corpus misses: {set(PRIMITIVES) - used}"


def _all_kernels() -> list:
    seen = {}
    for p in SUPPORTED:
        for k in _kernels(p):
            seen.setdefault(k.phases[0].name, k)
    return list(seen.values())


def test_corpus_uses_every_kernel_mapping():
    modes = {ph.mode for k in _all_kernels() for ph in k.phases}
    assert {"grid", "rows", "threads", "single", "partials", "combine"} <= modes, modes


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no CUDA compiler (nvcc) on this machine")
def test_every_generated_kernel_compiles_for_sm90(tmp_path):
    """nvcc (ptxas included), where NVRTC is not installed: NVRTC with a real architecture
    runs ptxas too, so one of the two compiles suffices (each takes ~20 s on the corpus)."""
    if _libnvrtc() is not None and not os.environ.get("RELAXJAX_TEST_NVCC"):
        pytest.skip("NVRTC checks the same kernels (test_every_generated_kernel_compiles_with_nvrtc); "
                    "RELAXJAX_TEST_NVCC=1 runs nvcc too")
    kernels = _all_kernels()
    src = tmp_path / "corpus.cu"
    src.write_text(module_source(kernels))
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-std=c++17",
                        "-o", str(tmp_path / "corpus.cubin"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-6000:]
    assert (tmp_path / "corpus.cubin").stat().st_size > 0


def _libnvrtc():
    """NVRTC, the compiler CuPy runs: from the nvidia-cuda-nvrtc wheel (the test extra) or
    ``RELAXJAX_NVRTC``; None when absent."""
    import ctypes
    import glob
    cands = [os.environ.get("RELAXJAX_NVRTC", "")]
    try:
        import nvidia
        for root in nvidia.__path__:
            cands += sorted(glob.glob(os.path.join(root, "cu*", "lib", "libnvrtc.so*")))
            cands += sorted(glob.glob(os.path.join(root, "cuda_nvrtc", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    for c in cands:
        if c and os.path.exists(c) and "builtins" not in c:
            return ctypes.CDLL(c)
    return None


def nvrtc_errors(source: str, name: str = "corpus.cu") -> str | None:
    """Compile ``source`` as the GPU does at run time (NVRTC, relaxjax's options, sm_90, no
    include path): None when it compiles, else the log's error lines; skips the test where
    NVRTC is not installed."""
    import ctypes
    from relaxjax.backends.cuda.device import NVRTC_OPTIONS
    lib = _libnvrtc()
    if lib is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc)")
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None) == 0
    opts = [o.encode() for o in NVRTC_OPTIONS] + [b"--gpu-architecture=sm_90"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc == 0:
        return None
    return "\n".join([line for line in log.value.decode().splitlines() if "error" in line][:40]) or f"status {rc}"


def test_every_generated_kernel_compiles_with_nvrtc():
    """What the GPU does at run time: NVRTC with no include path, for sm_90."""
    assert nvrtc_errors(module_source(_all_kernels())) is None


def test_as_text_cuda_needs_no_gpu():
    p = next(p for p in CORPUS if p.name == "W2 softmax")
    text = _jit(p, "cuda").lower(*p.structs).as_text("cuda")
    assert 'extern "C" __global__ void' in text and "rj_block_reduce" in text
    assert "__shfl_down_sync" in text


def test_cuda_backend_without_gpu_says_how_to_install():
    if gpu_available():
        pytest.skip("a GPU is present")
    f = rj.jit(lambda x: x + 1.0, backend="cuda")
    with pytest.raises((ImportError, RuntimeError), match="relaxjax\\[cuda\\]|no (usable )?GPU"):
        f(np.ones(3, np.float32))


# ---------------------------------------------------------------------------------------
# Numerics: the emulator always, the GPU when present
# ---------------------------------------------------------------------------------------

RUN_BACKENDS = ["cuda-emulated"] + (["cuda"] if gpu_available() else [])


@functools.lru_cache(maxsize=None)
def _preload(backend: str) -> None:
    """On the emulator, compile the corpus's kernels as one module first (one C++ compile,
    not hundreds); once per process."""
    if backend == "cuda-emulated":
        emulated_device().load(_all_kernels())


def _inputs(p: Program, data, sizes):
    D = {"n": data.draw(sizes, label="n"), "m": data.draw(sizes, label="m")}
    out = []
    for k, s in enumerate(p.structs):
        shape = tuple(d if isinstance(d, int) else D[str(d)] for d in s.shape)
        lo, hi = p.lo, p.hi
        x = data.draw(arrays(s.dtype, shape, lo, hi), label=f"x{k}")
        if p.nonzero:
            x = np.where(x == 0, np.ones_like(x), x)
        out.append(x)
    return out


@pytest.mark.parametrize("backend", RUN_BACKENDS)
@pytest.mark.parametrize("p", SUPPORTED, ids=lambda p: p.name)
@given(data=st.data())
@settings(max_examples=3, deadline=None)
def test_corpus_matches_numpy(backend, p, data):
    _preload(backend)
    xs = _inputs(p, data, SMALL_SIZES)
    with np.errstate(all="ignore"):
        want = _jit(p, "numpy")(*xs)
    got = _jit(p, backend)(*xs)
    if backend == "cuda":
        import cupy
        got = [cupy.asnumpy(g) for g in got] if isinstance(got, (list, tuple)) else cupy.asnumpy(got)
    assert_same(got, want, **(p.tol or {}))


@pytest.mark.parametrize("backend", RUN_BACKENDS)
@pytest.mark.parametrize("name", ["W2 softmax", "sum[float32,axis=None]", "W1 elementwise chain"])
def test_large_rows_and_grid_stride(backend, name):
    """Rows longer than a block and more rows and elements than the grid holds."""
    _preload(backend)
    p = next(p for p in CORPUS if p.name == name)
    x = np.random.default_rng(0).standard_normal((67, 1031)).astype(np.float32)
    want = _jit(p, "numpy")(x)
    got = _jit(p, backend)(x)
    if backend == "cuda":
        import cupy
        got = cupy.asnumpy(got)
    assert_same(got, want, **(p.tol or tolerance(np.float32)))


class _DeviceArray:
    """Stands in for a CuPy array: what jit looks at to pick the CUDA backend."""

    def __init__(self, a: np.ndarray):
        self._a, self.shape, self.dtype, self.ndim = a, a.shape, a.dtype, a.ndim

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}


def test_gpu_arrays_pick_the_cuda_backend():
    f = rj.jit(lambda x: x * 2.0)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_same(f(x), x * 2.0)                     # NumPy arrays: the CPU
    if gpu_available():
        import cupy
        got = f(cupy.asarray(x))
        assert isinstance(got, cupy.ndarray)
        assert_same(cupy.asnumpy(got), x * 2.0)
    else:
        with pytest.raises((ImportError, RuntimeError), match="relaxjax\\[cuda\\]|no (usable )?GPU"):
            f(_DeviceArray(x))
    assert f.cache_info().entries == 2             # one entry per device


@pytest.mark.parametrize("backend", RUN_BACKENDS)
@pytest.mark.parametrize("offset", [0, 1])
@given(n_=SMALL_SIZES, m_=SMALL_SIZES)
@settings(max_examples=4, deadline=None)
def test_vector_and_scalar_paths_of_elementwise_kernels(backend, offset, n_, m_):
    """16-byte vector loads need a count divisible by the lanes and aligned pointers: an
    array one float into an aligned block takes the scalar loop, as do odd counts."""
    f = rj.jit(lambda x, b: rnp.tanh(x) * 2.0 + b, shapes=(S((n, m), "float32"), S((m,), "float32")),
               backend=backend)
    src = f.lower(S((n, m), "float32"), S((m,), "float32")).as_text("cuda")
    assert "float4" in src and "& 15) == 0" in src
    rng = np.random.default_rng(n_ * 1000 + m_)
    block = rng.standard_normal(n_ * m_ + 1).astype(np.float32)
    x = block[offset:offset + n_ * m_].reshape(n_, m_)
    b = rng.standard_normal(m_).astype(np.float32)
    want = np.tanh(x) * 2.0 + b
    if backend == "cuda":
        import cupy
        x, b = cupy.asarray(x), cupy.asarray(b)
    got = f(x, b)
    assert_same(got.get() if hasattr(got, "get") else got, want)


@pytest.mark.parametrize("backend", RUN_BACKENDS + ["llvm", "numpy"])
def test_failed_match_cast_is_a_shape_error(backend):
    """A data-dependent size bound at run time, then asserted: both shapes in the error."""
    def f(x):
        pos = x[x > 0]                                  # (k,), k known only at run time
        return rj.match_cast(pos, (x.shape[0],)) * 2.0  # asserts k == n
    g = rj.jit(f, shapes=(S((n,), "float32"),), backend=backend)
    ok = np.array([1.0, 2.0, 3.0], np.float32)
    got = g(ok)
    assert_same(got.get() if hasattr(got, "get") else got, ok * 2.0)
    with pytest.raises(rj.ShapeError, match=r"match_cast .*(axis 0 has 2, expected n = 3|"
                                             r"float32\[2\], expected f32\[n\] with n=3)"):
        g(np.array([1.0, -2.0, 3.0], np.float32))


@rj.kernel
def _rows_of_sequences(off: rj.Buffer[("b1",), "int64"], out: rj.Buffer[("t",), "int64"]):
    for s in rj.prange(off.shape[0] - 1):       # parallel; the inner loop's bounds read s
        for i in range(off[s], off[s + 1]):
            out[i] = s + 1


@pytest.mark.parametrize("backend", RUN_BACKENDS)
def test_variable_loops_inside_parallel_loops(backend):
    """A loop whose bounds read an enclosing parallel loop's variable (CoRa's variable
    loops: ``for i in range(off[s], off[s + 1])``) has no one trip count for the grid: it
    runs per row (the generated C once referred to ``s`` outside its loop); a user kernel
    and the ragged reductions built on such loops, against NumPy."""
    from relaxjax import ragged
    lengths = np.array([3, 0, 1, 7, 2])
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    x = np.arange(13 * 4, dtype=np.float32).reshape(13, 4)
    S = rj.ShapeDtypeStruct

    def f(off, x):
        r = ragged.from_offsets(x, off)
        return rj.call_tir(_rows_of_sequences, off, out=S(x.shape[:1], "int64")), r.sum(axis=1), r.max(axis=1)
    ids, total, top = rj.jit(f, backend=backend)(off, x)
    np.testing.assert_array_equal(ids, np.repeat(np.arange(1, 6), lengths))
    parts = np.split(x, off[1:-1])
    np.testing.assert_allclose(total, np.stack([p.sum(0) for p in parts]))
    np.testing.assert_array_equal(top, np.stack([p.max(0) if len(p) else np.full(4, -np.inf) for p in parts]))
