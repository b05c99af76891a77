"""The CUDA backend's flash-attention kernel (``backends/cuda/attention.py``) against the
reference that forms the scores (``library.attention_reference``, float64 inputs where
precision matters), on the CPU emulator — the same CUDA C, one OpenMP thread per CUDA thread,
8 query rows per block and at most 4 blocks, so the grid-stride loop over (query block,
head, batch) runs — and on a GPU when one is present.  Lengths around the tiles (8 rows, 8
to 64 keys), grouped-query heads, causal masking, key and query lengths (0 included), head
sizes that differ between K and V, and the fallback for heads too large for shared memory."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaxjax.backends.cuda import emulated_device, gpu_available
from relaxjax.backends.cuda.attention import (attention_kernel, combine_kernel, flash_attention, key_tile,
                                              schedule)
from relaxjax.library import attention_reference
from test_cuda import nvrtc_errors

DEVICES = ["emulated"] + (["gpu"] if gpu_available() else [])
LENGTHS = st.sampled_from([1, 2, 7, 8, 9, 17, 63, 64, 65, 130])


def _device(name):
    if name == "emulated":
        return emulated_device()
    from relaxjax.backends.cuda import cupy_device
    return cupy_device()


@pytest.mark.parametrize("device", DEVICES)
@given(b=st.sampled_from([1, 2]), t=LENGTHS, s=LENGTHS, heads=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]),
       hv=st.sampled_from([(3, 3), (64, 64), (16, 5)]), causal=st.booleans(), lengths=st.sampled_from([0, 1, 2]),
       dtype=st.sampled_from(["float32", "float64"]), parts=st.sampled_from([None, 1, 2, 5]),
       seed=st.integers(0, 99))
@settings(max_examples=30, deadline=None)
def test_kernel_matches_reference(device, b, t, s, heads, hv, causal, lengths, dtype, parts, seed):
    """``parts``: the keys split into that many slices (flash-decoding), merged by the
    combine kernel; None: the schedule's choice."""
    if causal and lengths:
        causal = False                    # no library variant has both
    dev = _device(device)
    rng = np.random.default_rng(seed)
    n, kv = heads
    h, hvv = hv
    q = rng.standard_normal((b, t, n, h))
    k, v = rng.standard_normal((b, s, kv, h)), rng.standard_normal((b, s, kv, hvv))
    scale = np.array(1 / np.sqrt(h))
    klen = rng.integers(-1, s + 2, b).astype(np.int32) if lengths else None
    qlen = rng.integers(0, t + 1, b).astype(np.int32) if lengths == 2 else None
    want = np.full((b, t, n, hvv), np.nan)
    attention_reference("numpy", causal, lengths)(q, k, v, scale, *[x for x in (klen, qlen) if x is not None], want)
    args = [x.astype(dtype) for x in (q, k, v, scale)]
    out = np.full((b, t, n, hvv), np.nan, dtype)          # poisoned: every element must be written
    if device == "gpu":
        import cupy
        args, out = [cupy.asarray(x) for x in args], cupy.asarray(out)
        klen, qlen = (None if x is None else cupy.asarray(x) for x in (klen, qlen))
    assert flash_attention(dev, *args, out, causal, klen, qlen, parts=parts)
    got = out.get() if device == "gpu" else out
    tol = 1e-12 if dtype == "float64" else 3e-6 * np.sqrt(h) + 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_tiles_fit_shared_memory_or_fall_back():
    assert key_tile(4, 32, 64, 64) == 32 and key_tile(8, 32, 64, 64) == 16 and key_tile(4, 8, 16, 16) == 64
    assert key_tile(4, 32, 128, 128) == 16
    assert key_tile(4, 32, 600, 600) is None
    assert attention_kernel("float32", 600, 600, 256, False, 0) is None
    q = np.ones((1, 2, 1, 600), np.float32)
    assert not flash_attention(emulated_device(), q, q, q, np.array(1.0, np.float32), np.empty_like(q))


def test_kernel_source_has_no_score_matrix_in_global_memory():
    k = attention_kernel("float32", 64, 64, 256, True, 0)
    assert "__shared__ float Ps[BQ][BK]" in k.source and "__shfl_xor_sync" in k.source
    assert k.param_types[-1] == "int64_t" and len(k.param_types) == 17


def test_every_variant_compiles_with_nvrtc():
    """What the GPU compiles at run time (NVRTC, sm_90, relaxjax's options): each dtype,
    block size and variant, at head sizes 64 and 128 (different key tiles)."""
    from relaxjax.backends.cuda.device import module_source
    kernels = [attention_kernel(d, h, h, nt, c, lg) for d in ("float32", "float64") for h in (64, 128)
               for nt in (256, 64) for c, lg in ((False, 0), (True, 0), (False, 1), (False, 2))]
    kernels += [combine_kernel(d, 64, q) for d in ("float32", "float64") for q in (False, True)]
    assert nvrtc_errors(module_source([k for k in kernels if k is not None]), "attention.cu") is None


class _H200:
    """The schedule's view of a GPU: 132 multiprocessors, 256 threads per block."""
    max_blocks, threads_per_block = 132 * 32, 256


def test_schedule_splits_keys_only_when_the_blocks_leave_the_gpu_idle():
    bk = lambda n: 32                                      # noqa: E731
    assert schedule(_H200, 1, 4096, 4096, 8, bk) == (256, 1)          # 128 x 8 blocks of 32 rows
    assert schedule(_H200, 1, 1024, 1024, 8, bk) == (128, 1)          # 64 x 8 blocks of 16 rows
    assert schedule(_H200, 8, 1, 1024, 6, bk) == (64, 6)              # decode: 48 blocks, 6 slices
    assert schedule(_H200, 1, 1, 4096, 32, bk) == (64, 9)
    assert schedule(_H200, 1, 1, 40, 1, bk) == (64, 2)                # no more slices than key tiles
