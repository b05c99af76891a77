"""Attention on the CUDA backend without the score matrix: one kernel, a flash schedule.

The library functions ``nn.attention*`` (:func:`relaxjax.library.attention_name`; what
``relaxjax.nn.dot_product_attention`` and the ``compile.attention`` rewrite call) run here on
a GPU.  Each thread block takes ``BQ`` query rows of one (batch, head) and walks the keys in
tiles of ``BK``: the tile of K and V goes to shared memory, each row's scores for the tile
are computed by a group of 8 threads, and an online softmax (running max ``m`` and sum
``l``, the accumulated output rescaled by ``exp(m_old - m_new)``) folds the tile into the
row's output, which lives in registers.  Causal masking bounds the key loop (a block stops
at its last query) and masks within the diagonal tile; key lengths bound it per batch.  So
memory traffic is one read of Q, K and V per query block and one write of the output.

The kernel is generated per (dtype, head sizes, threads per block, variant): every size
that decides a loop bound or a shared-memory array is a constant, so NVRTC unrolls the dot
products; batch, heads and both sequence lengths are run-time integers.  Head sizes whose
tiles do not fit in 48 KiB of shared memory take the reference (the scores formed per head
through CuPy's matmul).  The same source runs on the CPU emulator (``EmulatedDevice``), where
the tests check it without a GPU.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

from ...library import attention_reference

GROUP = 8                   # threads per query row
SHARED_BYTES = 48 * 1024    # static shared memory a block may use


@dataclass(frozen=True)
class _Phase:
    name: str
    partial_bytes: int = 0


@dataclass(frozen=True)
class HandKernel:
    """A hand-written kernel in the shape the devices load: one phase, its CUDA C source
    (after the prelude) and its parameters' C types (the emulator's launcher casts to them)."""
    name: str
    source: str
    param_types: tuple

    @property
    def phases(self) -> list:
        return [_Phase(self.name)]


def key_tile(itemsize: int, bq: int, h: int, hv: int) -> int | None:
    """The largest key tile (64, 32, 16 or 8 keys) whose Q, K, V and probability tiles fit
    in shared memory; None when none does."""
    for bk in (64, 32, 16, 8):
        if itemsize * (bq * (h + 1) + bk * (h + 1) + bk * hv + bq * bk) <= SHARED_BYTES:
            return bk
    return None


@functools.lru_cache(maxsize=None)
def attention_kernel(dtype: str, h: int, hv: int, threads: int, causal: bool, lengths: int) -> HandKernel | None:
    """The kernel for these constants, or None when its tiles do not fit (``key_tile``).
    ``lengths``: 0, 1 (key lengths per batch) or 2 (key and query lengths)."""
    t = "float" if dtype == "float32" else "double"
    bq = threads // GROUP
    bk = key_tile(np.dtype(dtype).itemsize, bq, h, hv)
    if bk is None:
        return None
    inf = "RJ_INF_F" if dtype == "float32" else "RJ_INF_D"
    exp = "expf" if dtype == "float32" else "exp"
    sj, oj = bk // GROUP, -(-hv // GROUP)
    key_end = "const int64_t send = S;"
    if lengths:
        key_end = "const int64_t send = klen[b] < 0 ? 0 : (klen[b] > S ? S : (int64_t)klen[b]);"
    q_end = "const int64_t qend = Tq;"
    if lengths == 2:
        q_end = "const int64_t qend = qlen[b] < 0 ? 0 : (qlen[b] > Tq ? Tq : (int64_t)qlen[b]);"
    loop_end = "(send < q0 + BQ ? send : q0 + BQ)" if causal else "send"
    keep = "kk < kend && kk <= qi" if causal else "kk < kend"
    body = f"""
#define BQ {bq}
#define BK {bk}
#define HD {h}
#define HV {hv}
extern "C" __global__ void __launch_bounds__({threads}, {max(1, 512 // threads)}) NAME(
    const {t} *__restrict__ q, const {t} *__restrict__ k, const {t} *__restrict__ v,
    const {t} *__restrict__ scale_p, const int32_t *__restrict__ klen, const int32_t *__restrict__ qlen,
    {t} *__restrict__ out, int64_t B, int64_t Tq, int64_t S, int64_t N, int64_t KH) {{
  __shared__ {t} Qs[BQ][HD + 1];
  __shared__ {t} Ks[BK][HD + 1];
  __shared__ {t} Vs[BK][HV];
  __shared__ {t} Ps[BQ][BK];
  const int tid = threadIdx.x, r = tid / {GROUP}, l = tid % {GROUP};
  const {t} scale = scale_p[0];
  const int64_t nqt = (Tq + BQ - 1) / BQ, total = nqt * N * B, g = N / KH;
  for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {{
    const int64_t qt = w % nqt, n = (w / nqt) % N, b = w / nqt / N, kh = n / g;
    const int64_t q0 = qt * BQ, qi = q0 + r;
    {key_end}
    {q_end}
    const int64_t kend = {loop_end};
    for (int e = tid; e < BQ * HD; e += {threads}) {{
      const int rr = e / HD, hh = e % HD;
      const int64_t qq = q0 + rr;
      Qs[rr][hh] = qq < Tq ? q[((b * Tq + qq) * N + n) * HD + hh] : ({t})0;
    }}
    {t} m = -{inf}, lsum = 0;
    {t} acc[{oj}];
    #pragma unroll
    for (int j = 0; j < {oj}; ++j) acc[j] = 0;
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {{
      __syncthreads();
      for (int e = tid; e < BK * HD; e += {threads}) {{
        const int cc = e / HD, hh = e % HD;
        const int64_t kk = k0 + cc;
        Ks[cc][hh] = kk < kend ? k[((b * S + kk) * KH + kh) * HD + hh] : ({t})0;
      }}
      for (int e = tid; e < BK * HV; e += {threads}) {{
        const int cc = e / HV, hh = e % HV;
        const int64_t kk = k0 + cc;
        Vs[cc][hh] = kk < kend ? v[((b * S + kk) * KH + kh) * HV + hh] : ({t})0;
      }}
      __syncthreads();
      {t} s[{sj}];
      #pragma unroll
      for (int j = 0; j < {sj}; ++j) s[j] = 0;
      #pragma unroll 8
      for (int hh = 0; hh < HD; ++hh) {{
        const {t} qv = Qs[r][hh];
        #pragma unroll
        for (int j = 0; j < {sj}; ++j) s[j] += qv * Ks[l + {GROUP} * j][hh];
      }}
      {t} tmax = -{inf};
      #pragma unroll
      for (int j = 0; j < {sj}; ++j) {{
        const int64_t kk = k0 + l + {GROUP} * j;
        s[j] = ({keep}) ? s[j] * scale : -{inf};
        tmax = s[j] > tmax ? s[j] : tmax;
      }}
      #pragma unroll
      for (int o = {GROUP // 2}; o > 0; o /= 2) {{
        const {t} other = __shfl_xor_sync(0xffffffffu, tmax, o);
        tmax = other > tmax ? other : tmax;
      }}
      const {t} mnew = tmax > m ? tmax : m;
      const {t} corr = m == -{inf} ? ({t})0 : {exp}(m - mnew);
      {t} psum = 0;
      #pragma unroll
      for (int j = 0; j < {sj}; ++j) {{
        const {t} p = s[j] == -{inf} ? ({t})0 : {exp}(s[j] - mnew);
        Ps[r][l + {GROUP} * j] = p;
        psum += p;
      }}
      #pragma unroll
      for (int o = {GROUP // 2}; o > 0; o /= 2) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      lsum = lsum * corr + psum;
      m = mnew;
      __syncwarp();
      #pragma unroll
      for (int j = 0; j < {oj}; ++j) acc[j] *= corr;
      #pragma unroll 8
      for (int kc = 0; kc < BK; ++kc) {{
        const {t} p = Ps[r][kc];
        #pragma unroll
        for (int j = 0; j < {oj}; ++j)
          if (l + {GROUP} * j < HV) acc[j] += p * Vs[kc][l + {GROUP} * j];
      }}
    }}
    if (qi < Tq) {{
      const bool live = qi < qend && lsum > 0;
      #pragma unroll
      for (int j = 0; j < {oj}; ++j) {{
        const int c = l + {GROUP} * j;
        if (c < HV) out[((b * Tq + qi) * N + n) * HV + c] = live ? acc[j] / lsum : ({t})0;
      }}
    }}
    __syncthreads();
  }}
}}
#undef BQ
#undef BK
#undef HD
#undef HV
"""
    name = "rj_attn_" + hashlib.sha256(body.encode()).hexdigest()[:20]
    ptr, cptr = f"{t} *", f"const {t} *"
    params = (cptr, cptr, cptr, cptr, "const int32_t *", "const int32_t *", ptr) + ("int64_t",) * 5
    return HandKernel(name, body.replace("NAME(", name + "(", 1), params)


def threads_for(device, work_rows: int) -> int:
    """Threads per block (8 per query row): the largest whose blocks still cover the GPU's
    multiprocessors, at most the device's block size."""
    sms = max(device.max_blocks // 32, 1)
    options = [n for n in (256, 128, 64) if n <= device.threads_per_block] or [device.threads_per_block]
    for n in options:
        if -(-work_rows // (n // GROUP)) >= sms:
            return n
    return options[-1]


def flash_attention(device, q, k, v, scale, out, causal: bool = False, klen=None, qlen=None) -> bool:
    """``out = softmax(q k^T * scale [masks]) v`` on ``device``'s arrays (the layout of
    ``attention_name``); False when the head sizes do not fit the kernel (nothing written)."""
    B, T, N, H = q.shape
    S, K, Hv = k.shape[1], k.shape[2], v.shape[3]
    if out.size == 0:
        return True
    threads = threads_for(device, B * N * T)
    kernel = attention_kernel(np.dtype(q.dtype).name, H, Hv, threads, causal, 2 if qlen is not None else
                              1 if klen is not None else 0)
    if kernel is None:
        return False
    fn = device.load([kernel])[kernel.name]
    total = -(-T // (threads // GROUP)) * N * B
    bufs = [q, k, v, scale, klen if klen is not None else scale, qlen if qlen is not None else scale, out]
    device.launch(fn, min(total, device.max_blocks), threads, bufs, [B, T, S, N, K])
    return True


def _gpu_impl(causal: bool, lengths: int):
    reference = attention_reference("cupy", causal, lengths)

    def run(q, k, v, scale, *rest):
        import cupy
        from . import cupy_device
        q, k, v = (cupy.ascontiguousarray(x) for x in (q, k, v))      # (no copy when they are)
        klen = rest[0] if lengths else None
        qlen = rest[1] if lengths == 2 else None
        if not flash_attention(cupy_device(), q, k, v, scale, rest[-1], causal, klen, qlen):
            reference(q, k, v, scale, *rest)
    return run


# the library implementations (relaxjax.library registers them by these names)
float32 = float64 = _gpu_impl(False, 0)
float32_causal = float64_causal = _gpu_impl(True, 0)
float32_lengths = float64_lengths = _gpu_impl(False, 1)
float32_qlengths = float64_qlengths = _gpu_impl(False, 2)
