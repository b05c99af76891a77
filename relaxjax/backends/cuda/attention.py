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
With few query rows (decode: one query against a long cache) the blocks would leave most
multiprocessors idle, so the keys are split into slices, a block each, whose partial
results (max, sum, unnormalized output) a second kernel merges (flash-decoding; ``schedule``).

Sequences packed without padding (``library.attention_varlen_name``, FlashAttention's varlen
form) run the same kernel body with another ``_Layout``: a small kernel counts each
sequence's query blocks from the offsets (``varlen_blocks_kernel``), and a work item, (query
block over all sequences, head), finds its sequence by bisecting those counts; its rows are
the sequence's, from its offset, and its keys those of its sequence in the key offsets (the
same offsets, or the keys' own for cross attention between two packed batches).  No key
slices there (P = 1).

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

from ...library import attention_reference, attention_varlen_reference, check_varlen_shapes

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


@dataclass(frozen=True)
class _Layout:
    """What differs between the batched kernels and the packed (varlen) one, as CUDA C: the
    parameters and their C types; ``items``, the loop over work items, whose body defines
    ``n``, ``kh`` (the heads), ``q0``, ``qi`` (the block's first query, the thread's row),
    ``send``, ``qend`` (keys and computed queries of the item's sequence) and ``kbeg``,
    ``kend`` (the keys this block reads); ``qrow``/``krow``, the packed row of query or
    key ``x`` of the item (``x`` counted from its sequence's start); ``qlim``, the rows of
    the sequence; ``store``, the test that opens the output's write (the batched kernels
    may write a key slice's partial result instead)."""
    params: str
    param_types: tuple
    items: str
    qrow: str
    krow: str
    qlim: str
    store: str


def _batched(t: str, causal: bool, lengths: int) -> _Layout:
    """q (B, Tq, N, H), k (B, S, KH, H), v (B, S, KH, Hv): a work item is (key slice, query
    block, head, batch)."""
    key_end = "const int64_t send = S;"
    if lengths:
        key_end = "const int64_t send = klen[b] < 0 ? 0 : (klen[b] > S ? S : (int64_t)klen[b]);"
    q_end = "const int64_t qend = Tq;"
    if lengths == 2:
        q_end = "const int64_t qend = qlen[b] < 0 ? 0 : (qlen[b] > Tq ? Tq : (int64_t)qlen[b]);"
    loop_end = "(send < q0 + BQ ? send : q0 + BQ)" if causal else "send"
    params = f"""const {t} *__restrict__ q, const {t} *__restrict__ k, const {t} *__restrict__ v,
    const {t} *__restrict__ scale_p, const int32_t *__restrict__ klen, const int32_t *__restrict__ qlen,
    {t} *__restrict__ out, {t} *__restrict__ ws_m, {t} *__restrict__ ws_l, {t} *__restrict__ ws_acc,
    int64_t B, int64_t Tq, int64_t S, int64_t N, int64_t KH, int64_t P, int64_t chunk"""
    items = f"""const int64_t nqt = (Tq + BQ - 1) / BQ, total = nqt * N * B * P, g = N / KH;
  for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {{
    const int64_t part = w % P, rest = w / P;
    const int64_t qt = rest % nqt, n = (rest / nqt) % N, b = rest / nqt / N, kh = n / g;
    const int64_t q0 = qt * BQ, qi = q0 + r;
    {key_end}
    {q_end}
    const int64_t klim = {loop_end};        // keys [0, klim) for the block; this part's slice:
    const int64_t kbeg = part * chunk, kend = klim < kbeg + chunk ? klim : kbeg + chunk;"""
    store = f"""if (qi < Tq && P > 1) {{                // a slice of the keys: its partial result
      const int64_t idx = ((b * N + n) * Tq + qi) * P + part;
      if (l == 0) {{ ws_m[idx] = m; ws_l[idx] = lsum; }}
      #pragma unroll
      for (int j = 0; j < OJ; ++j)
        if (l + {GROUP} * j < HV) ws_acc[idx * HV + l + {GROUP} * j] = acc[j];
    }} else if (qi < Tq) {{"""
    ptr, cptr = f"{t} *", f"const {t} *"
    types = (cptr, cptr, cptr, cptr, "const int32_t *", "const int32_t *", ptr, ptr, ptr, ptr) + ("int64_t",) * 7
    return _Layout(params, types, items, "b * Tq + {}", "b * S + {}", "Tq", store)


def _packed(t: str, causal: bool) -> _Layout:
    """q (T, N, H), k (TK, KH, H), v (TK, KH, Hv), sequence b's queries rows offs[b]:offs[b +
    1], its keys rows koffs[b]:koffs[b + 1] (the same offsets but for cross attention): a work
    item is (query block, head), the blocks counted over all sequences (``blk``, from
    ``varlen_blocks_kernel``), its sequence found by bisection.  Offsets are clamped to
    [0, T] and [0, TK] (bad ones are not checked here: that would wait for the device;
    nothing is read or written out of bounds)."""
    loop_end = "(send < q0 + BQ ? send : q0 + BQ)" if causal else "send"
    params = f"""const {t} *__restrict__ q, const {t} *__restrict__ k, const {t} *__restrict__ v,
    const {t} *__restrict__ scale_p, const int64_t *__restrict__ offs, const int64_t *__restrict__ koffs,
    const int64_t *__restrict__ blk, {t} *__restrict__ out, int64_t B, int64_t T, int64_t TK, int64_t N,
    int64_t KH"""
    items = f"""const int64_t total = blk[B] * N, g = N / KH;
  for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {{
    const int64_t n = w % N, gb = w / N, kh = n / g;
    int64_t lo = 0, hi = B;                 // blk[lo] <= gb < blk[hi]
    while (hi - lo > 1) {{
      const int64_t mid = (lo + hi) / 2;
      if (blk[mid] <= gb) lo = mid; else hi = mid;
    }}
    {_clamped("lo")}
    {_clamped("lo", "koffs", "TK", "kbase", "klen")}
    const int64_t q0 = (gb - blk[lo]) * BQ, qi = q0 + r;
    const int64_t send = klen, qend = len;
    const int64_t kbeg = 0, kend = {loop_end};"""
    ptr, cptr = f"{t} *", f"const {t} *"
    types = (cptr, cptr, cptr, cptr, "const int64_t *", "const int64_t *", "const int64_t *", ptr) + ("int64_t",) * 5
    return _Layout(params, types, items, "base + {}", "kbase + {}", "len", "if (qi < len) {")


def _clamped(b: str, offs: str = "offs", rows: str = "T", base: str = "base", length: str = "len") -> str:
    """C declaring sequence ``b``'s first row ``base`` and its ``length`` from ``offs``,
    within [0, ``rows``] whatever they hold."""
    return (f"const int64_t {base} = {offs}[{b}] < 0 ? 0 : ({offs}[{b}] > {rows} ? {rows} : {offs}[{b}]), "
            f"{length} = ({offs}[{b} + 1] < {base} ? {base} : ({offs}[{b} + 1] > {rows} ? {rows} : "
            f"{offs}[{b} + 1])) - {base};")


@functools.lru_cache(maxsize=None)
def attention_kernel(dtype: str, h: int, hv: int, threads: int, causal: bool, lengths: int,
                     varlen: bool = False) -> HandKernel | None:
    """The kernel for these constants, or None when its tiles do not fit (``key_tile``).
    ``lengths``: 0, 1 (key lengths per batch) or 2 (key and query lengths); ``varlen``: the
    packed sequences' kernel (``library.attention_varlen_name``; no lengths)."""
    t = "float" if dtype == "float32" else "double"
    bq = threads // GROUP
    bk = key_tile(np.dtype(dtype).itemsize, bq, h, hv)
    if bk is None:
        return None
    if varlen and lengths:
        raise ValueError("attention_kernel: the packed (varlen) kernel takes no key or query lengths")
    lay = _packed(t, causal) if varlen else _batched(t, causal, lengths)
    inf = "RJ_INF_F" if dtype == "float32" else "RJ_INF_D"
    exp = "expf" if dtype == "float32" else "exp"
    sj, oj = bk // GROUP, -(-hv // GROUP)
    keep = "kk < kend && kk <= qi" if causal else "kk < kend"
    body = f"""
#define BQ {bq}
#define BK {bk}
#define HD {h}
#define HV {hv}
extern "C" __global__ void __launch_bounds__({threads}, {max(1, 512 // threads)}) NAME(
    {lay.params}) {{
  __shared__ {t} Qs[BQ][HD + 1];
  __shared__ {t} Ks[BK][HD + 1];
  __shared__ {t} Vs[BK][HV];
  __shared__ {t} Ps[BQ][BK];
  const int tid = threadIdx.x, r = tid / {GROUP}, l = tid % {GROUP};
  const {t} scale = scale_p[0];
  {lay.items}
    for (int e = tid; e < BQ * HD; e += {threads}) {{
      const int rr = e / HD, hh = e % HD;
      const int64_t qq = q0 + rr;
      Qs[rr][hh] = qq < {lay.qlim} ? q[(({lay.qrow.format("qq")}) * N + n) * HD + hh] : ({t})0;
    }}
    {t} m = -{inf}, lsum = 0;
    {t} acc[{oj}];
    #pragma unroll
    for (int j = 0; j < {oj}; ++j) acc[j] = 0;
    for (int64_t k0 = kbeg; k0 < kend; k0 += BK) {{
      __syncthreads();
      for (int e = tid; e < BK * HD; e += {threads}) {{
        const int cc = e / HD, hh = e % HD;
        const int64_t kk = k0 + cc;
        Ks[cc][hh] = kk < kend ? k[(({lay.krow.format("kk")}) * KH + kh) * HD + hh] : ({t})0;
      }}
      for (int e = tid; e < BK * HV; e += {threads}) {{
        const int cc = e / HV, hh = e % HV;
        const int64_t kk = k0 + cc;
        Vs[cc][hh] = kk < kend ? v[(({lay.krow.format("kk")}) * KH + kh) * HV + hh] : ({t})0;
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
    {lay.store.replace("OJ", str(oj))}
      const bool live = qi < qend && lsum > 0;
      #pragma unroll
      for (int j = 0; j < {oj}; ++j) {{
        const int c = l + {GROUP} * j;
        if (c < HV) out[(({lay.qrow.format("qi")}) * N + n) * HV + c] = live ? acc[j] / lsum : ({t})0;
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
    return HandKernel(name, body.replace("NAME(", name + "(", 1), lay.param_types)


@functools.lru_cache(maxsize=None)
def varlen_blocks_kernel(bq: int) -> HandKernel:
    """``blk[b]``: the query blocks of ``bq`` rows before sequence ``b`` (B + 1 entries, the
    last the total), from the offsets (clamped as the packed kernel clamps them): one block
    of threads, each summing a run of sequences, then a scan of the runs' sums."""
    body = f"""
extern "C" __global__ void NAME(const int64_t *__restrict__ offs, int64_t *__restrict__ blk, int64_t B,
    int64_t T) {{
  __shared__ int64_t runs[1024];
  const int64_t t = threadIdx.x, nt = blockDim.x, per = (B + nt - 1) / nt;
  const int64_t b0 = t * per < B ? t * per : B, b1 = b0 + per < B ? b0 + per : B;
  int64_t sum = 0;
  for (int64_t b = b0; b < b1; ++b) {{
    {_clamped("b")}
    sum += (len + {bq - 1}) / {bq};
  }}
  runs[t] = sum;
  __syncthreads();
  if (t == 0) {{
    int64_t acc = 0;
    for (int64_t i = 0; i < nt; ++i) {{ const int64_t x = runs[i]; runs[i] = acc; acc += x; }}
    blk[0] = 0;
  }}
  __syncthreads();
  int64_t acc = runs[t];
  for (int64_t b = b0; b < b1; ++b) {{
    {_clamped("b")}
    acc += (len + {bq - 1}) / {bq};
    blk[b + 1] = acc;
  }}
}}
"""
    name = "rj_attn_blocks_" + hashlib.sha256(body.encode()).hexdigest()[:20]
    return HandKernel(name, body.replace("NAME(", name + "(", 1), ("const int64_t *", "int64_t *", "int64_t", "int64_t"))


@functools.lru_cache(maxsize=None)
def combine_kernel(dtype: str, hv: int, queries: bool) -> HandKernel:
    """Merges the key slices' partial results (running max, sum, unnormalized output) of
    ``attention_kernel`` run with P > 1: one thread per output element."""
    t = "float" if dtype == "float32" else "double"
    inf = "RJ_INF_F" if dtype == "float32" else "RJ_INF_D"
    exp = "expf" if dtype == "float32" else "exp"
    q_end = ("const int64_t qend = qlen[b] < 0 ? 0 : (qlen[b] > Tq ? Tq : (int64_t)qlen[b]);" if queries
             else "const int64_t qend = Tq;")
    body = f"""
extern "C" __global__ void NAME(const {t} *__restrict__ ws_m, const {t} *__restrict__ ws_l,
    const {t} *__restrict__ ws_acc, const int32_t *__restrict__ qlen, {t} *__restrict__ out,
    int64_t B, int64_t Tq, int64_t N, int64_t P) {{
  const int64_t total = B * Tq * N * {hv};
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {{
    const int64_t c = e % {hv}, n = (e / {hv}) % N, qi = (e / {hv} / N) % Tq, b = e / {hv} / N / Tq;
    {q_end}
    const int64_t i0 = ((b * N + n) * Tq + qi) * P;
    {t} mx = -{inf};
    for (int64_t p = 0; p < P; ++p) mx = ws_m[i0 + p] > mx ? ws_m[i0 + p] : mx;
    {t} lsum = 0, o = 0;
    if (mx != -{inf}) {{
      for (int64_t p = 0; p < P; ++p) {{
        const {t} mp = ws_m[i0 + p];
        const {t} w = mp == -{inf} ? ({t})0 : {exp}(mp - mx);
        lsum += ws_l[i0 + p] * w;
        o += ws_acc[(i0 + p) * {hv} + c] * w;
      }}
    }}
    out[((b * Tq + qi) * N + n) * {hv} + c] = (qi < qend && lsum > 0) ? o / lsum : ({t})0;
  }}
}}
"""
    name = "rj_attn_combine_" + hashlib.sha256(body.encode()).hexdigest()[:20]
    params = (f"const {t} *",) * 3 + ("const int32_t *", f"{t} *") + ("int64_t",) * 4
    return HandKernel(name, body.replace("NAME(", name + "(", 1), params)


def schedule(device, B: int, T: int, S: int, N: int, bk_of) -> tuple:
    """(threads per block, key slices P): the largest block (8 threads per query row) whose
    blocks cover the GPU's multiprocessors twice; when even the smallest leaves them idle
    (few queries: decode), the keys are split into P slices of whole key tiles, each a
    block, merged by ``combine_kernel`` (flash-decoding)."""
    sms = max(device.max_blocks // 32, 1)
    options = [n for n in (256, 128, 64) if n <= device.threads_per_block] or [device.threads_per_block]
    for n in options:
        if -(-T // (n // GROUP)) * N * B >= 2 * sms:
            return n, 1
    n = options[-1]
    blocks = -(-T // (n // GROUP)) * N * B
    bk = bk_of(n)
    tiles = -(-S // bk) if bk else 1
    return n, max(1, min(-(-2 * sms // blocks), tiles))


def flash_attention(device, q, k, v, scale, out, causal: bool = False, klen=None, qlen=None,
                    parts: int | None = None) -> bool:
    """``out = softmax(q k^T * scale [masks]) v`` on ``device``'s arrays (the layout of
    ``attention_name``); False when the head sizes do not fit the kernel (nothing written).
    ``parts`` overrides the number of key slices (tests)."""
    B, T, N, H = q.shape
    S, K, Hv = k.shape[1], k.shape[2], v.shape[3]
    if out.size == 0:
        return True
    dtype = np.dtype(q.dtype).name
    itemsize = np.dtype(dtype).itemsize
    def bk_of(threads: int) -> int | None:
        return key_tile(itemsize, threads // GROUP, H, Hv)
    threads, P = schedule(device, B, T, S, N, bk_of)
    if parts is not None:
        P = parts
    if S == 0:
        P = 1
    lengths = 2 if qlen is not None else 1 if klen is not None else 0
    kernel = attention_kernel(dtype, H, Hv, threads, causal, lengths)
    if kernel is None:
        return False
    bk = bk_of(threads)
    chunk = -(-S // P // bk) * bk if P > 1 else max(S, 1)
    P = max(1, -(-S // chunk)) if P > 1 else 1
    kl = klen if klen is not None else scale
    ql = qlen if qlen is not None else scale
    total = -(-T // (threads // GROUP)) * N * B * P
    if P == 1:
        fn = device.load([kernel])[kernel.name]
        device.launch(fn, min(total, device.max_blocks), threads, [q, k, v, scale, kl, ql, out, out, out, out],
                      [B, T, S, N, K, 1, chunk])
        return True
    comb = combine_kernel(dtype, Hv, lengths == 2)
    fns = device.load([kernel, comb])
    ws_m, ws_l = device.empty((B * N * T * P,), dtype), device.empty((B * N * T * P,), dtype)
    ws_acc = device.empty((B * N * T * P * Hv,), dtype)
    device.launch(fns[kernel.name], min(total, device.max_blocks), threads,
                  [q, k, v, scale, kl, ql, out, ws_m, ws_l, ws_acc], [B, T, S, N, K, P, chunk])
    elems = B * T * N * Hv
    tpb = device.threads_per_block
    device.launch(fns[comb.name], min(-(-elems // tpb), device.max_blocks), tpb, [ws_m, ws_l, ws_acc, ql, out],
                  [B, T, N, P])
    return True


def flash_attention_varlen(device, q, k, v, scale, offsets, out, causal: bool = False,
                           key_offsets=None) -> bool:
    """``out`` = attention within each packed sequence (the layout of
    ``library.attention_varlen_name``; ``offsets`` int64 on the device; ``key_offsets``:
    the keys' own, for cross attention) on ``device``'s arrays; False when the head sizes
    do not fit the kernel (nothing written).  Two launches: the query blocks counted per
    sequence (``varlen_blocks_kernel``), then the packed kernel over (query block, head),
    one key slice (P = 1)."""
    check_varlen_shapes(q, k, v, offsets, key_offsets)
    T, N, H = q.shape
    TK, K, Hv = k.shape[0], k.shape[1], v.shape[2]
    if out.size == 0:
        return True
    dtype = np.dtype(q.dtype).name
    # the batched kernels' choice, as if the packed rows were one sequence (the blocks are
    # at least that many)
    threads, _ = schedule(device, 1, T, TK, N, lambda n: key_tile(np.dtype(dtype).itemsize, n // GROUP, H, Hv))
    kernel = attention_kernel(dtype, H, Hv, threads, causal, 0, varlen=True)
    if kernel is None:
        return False
    bq, B = threads // GROUP, offsets.shape[0] - 1
    counts = varlen_blocks_kernel(bq)
    fns = device.load([kernel, counts])
    blk = device.empty((B + 1,), "int64")
    device.launch(fns[counts.name], 1, min(device.threads_per_block, 1024), [offsets, blk], [B, T])
    most = (-(-T // bq) + B) * N           # every sequence's last block may be partial
    keys = offsets if key_offsets is None else key_offsets
    device.launch(fns[kernel.name], min(most, device.max_blocks), threads,
                  [q, k, v, scale, offsets, keys, blk, out], [B, T, TK, N, K])
    return True


# the references (the scores formed per head) where the head sizes do not fit the kernels,
# on CuPy's arrays on a GPU and NumPy's on the emulator: one closure per variant
_reference = functools.lru_cache(maxsize=None)(attention_reference)
_varlen_reference = functools.lru_cache(maxsize=None)(attention_varlen_reference)


def _xp(device) -> str:
    return "cupy" if device.name == "cuda" else "numpy"


def _device_impl(causal: bool, lengths: int):
    """The library implementation: ``run(device, q, k, v, scale, [lengths...], out)`` on the
    GPU's or the emulator's arrays (``device_kernel``: the CUDA backend passes its device);
    the reference where the head sizes do not fit the kernel."""
    def run(device, q, k, v, scale, *rest):
        q, k, v = (device.asarray(x) for x in (q, k, v))            # contiguous (no copy when so)
        klen = rest[0] if lengths else None
        qlen = rest[1] if lengths == 2 else None
        if not flash_attention(device, q, k, v, scale, rest[-1], causal, klen, qlen):
            _reference(_xp(device), causal, lengths)(q, k, v, scale, *rest)
    run.device_kernel = True
    return run


# the library implementations (relaxjax.library registers them by these names)
float32 = float64 = _device_impl(False, 0)
float32_causal = float64_causal = _device_impl(True, 0)
float32_lengths = float64_lengths = _device_impl(False, 1)
float32_qlengths = float64_qlengths = _device_impl(False, 2)


def _varlen_impl(causal: bool, cross: bool = False):
    """The packed (varlen) library implementation, a device kernel as ``_device_impl``'s
    (``cross``: the keys' offsets after the queries')."""
    def run(device, q, k, v, scale, offsets, *rest):
        q, k, v, offsets = (device.asarray(x) for x in (q, k, v, offsets))
        key_offsets = device.asarray(rest[0]) if cross else None
        if not flash_attention_varlen(device, q, k, v, scale, offsets, rest[-1], causal, key_offsets):
            _varlen_reference(_xp(device), causal, cross)(q, k, v, scale, offsets, *rest)
    run.device_kernel = True
    return run


float32_varlen = float64_varlen = _varlen_impl(False)
float32_varlen_causal = float64_varlen_causal = _varlen_impl(True)
float32_varlen_cross = float64_varlen_cross = _varlen_impl(False, True)
float32_varlen_cross_causal = float64_varlen_cross_causal = _varlen_impl(True, True)
