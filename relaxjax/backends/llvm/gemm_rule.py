"""Which matrix products run the generated product (``gemm.py``) rather than BLAS: a rule by
shape class, measured, evaluated at run time on the product's dims (``use_generated``: LLVM
code in the segment) and at compile time on what is known of them (``may_use_generated``:
whether a call site needs the branch and the generated product at all)."""
from __future__ import annotations


# Which products run the generated code rather than BLAS, by shape class, as measured by
# benchmarks/gemm.py on AVX-512 hosts (2 threads; RESULTS.md, sessions 8 and 10):
# - fewer than 2**19 multiply-adds (64**3 and less): BLAS, whose call costs less;
# - shallow (K <= 64) with more than a micro-tile's columns (N > 64): generated, float32
#   and float64 (attention's q @ k.T: 1.1-2.2x BLAS);
# - short (2 <= M <= 48 rows) with N > 64: generated (a decode-sized batch: with the short
#   micro-tiles and B prefetched, float32 1.5-3.4x OpenBLAS, float64 1.1-3x) where B is
#   within 8 MiB; past that, B streams from memory, and float32 products of up to 16 rows
#   stay generated (8 x 8192 @ 8192 x 8192: 49 against 30 GFLOP/s), the rest are BLAS's
#   (32 rows of float32, float64: OpenBLAS 1.2-1.4x).  Up to 48 rows (session 12, on the
#   products of W4 and the decoder, 512 x 2048, 2048 x 512, 384 x 1152, 1536 x 384): 36-40
#   rows 1.25-1.55x, 48 rows 1.06-1.45x (float64 at 2048 x 512 even); at 56 float64's
#   512 x 2048 loses 7 %, at 64 float32's 5-10 %: BLAS's from 49 rows on;
# - a batch of products in one call (``batch`` >= 2, from 16**3 to 2**26 multiply-adds
#   each, more than one row): generated, its threads over the products' tiles where a loop
#   of BLAS calls forks per product or runs each on one core (float32, 2 threads: 128 x
#   64 @ 64 x 128 1.8x, 64**3 1.3x, 128**3 1.8x, 4 x 256 @ 256 x 256 1.8x, 32**3 1.1x;
#   8**3 0.8x and 512**3 1.0x stay with the loop);
# - the rest (large and square, narrow N): BLAS (the generated code runs at 0.85-1.0x).
# Hosts without AVX-512 use BLAS throughout (the 256-bit code is correct but unmeasured
# on such a host; on this one it runs at 0.75-0.85x).
# - a few rows (2 <= M <= SKINNY_M) by B stored transposed (``A @ B.T``, no batch):
#   generated, its path streaming B once (gemm_skinny; session 15: 2 rows x 384 @ 384 x 8192
#   4.2x OpenBLAS, 8 rows 3.1x, 16 rows 2.2x; against the packed product, 24 rows 1.4-1.8x,
#   32 rows 1.1-1.5x, 48 rows 0.8-1.04x); one row stays with BLAS's gemv, as fast, and a
#   process that decodes one sequence then never compiles the generated product;
MIN_GENERATED_MACS = 1 << 19
SKINNY_M = 32
SKINNY_MIN_MACS = 1 << 12
BATCHED_MIN_MACS = 1 << 12
BATCHED_MAX_MACS = 1 << 26
SHALLOW_K = 64
SHORT_M = 48
SHORT_MAX_B_BYTES = 8 << 20
STREAM_M = 16
NARROW_N = 64


def may_use_generated(dtype_char: str, vector_bits: int, M: int | None, N: int | None,
                      K: int | None, batched: bool = False, nt: bool = False) -> bool:
    """Whether some product of shape ``(M, K) @ (K, N)`` (``batched``: some batch of
    them; ``nt``: B stored transposed, A not) runs the generated code (see above); None: a
    size known only at run time.  A call site that never can does not emit the branch, nor
    make its executable load the generated product."""
    if nt and vector_bits >= 512 and (M is None or 2 <= M <= SKINNY_M) and \
            (None in (M, N, K) or M * N * K >= SKINNY_MIN_MACS):
        return True
    if batched and vector_bits >= 512 and M != 1 and \
            (None in (M, N, K) or BATCHED_MIN_MACS <= M * N * K < BATCHED_MAX_MACS):
        return True
    if vector_bits < 512 or (N is not None and N <= NARROW_N) or M == 1:
        return False
    if None in (M, N, K):
        return True
    size = 4 if dtype_char == "s" else 8
    short = M <= SHORT_M and (K * N * size <= SHORT_MAX_B_BYTES or (dtype_char == "s" and M <= STREAM_M))
    return M * N * K >= MIN_GENERATED_MACS and (K <= SHALLOW_K or short)


def use_generated(val, dtype_char: str, vector_bits: int, M: str, N: str, K: str,
                  batch: str | None = None, nt: bool = False) -> str:
    """The i1 (``val(instr)`` emits an instruction and gives its value) saying whether a
    product of run-time shape ``(M, K) @ (K, N)`` (``batch``: that many of them, in one
    call; ``nt``: B stored transposed, A not) runs the generated code (see above)."""
    if vector_bits < 512:
        return "false"
    macs = val(f"mul i64 {val(f'mul i64 {M}, {N}')}, {K}")
    if nt and batch is None:
        rows = val(f"and i1 {val(f'icmp sle i64 {M}, {SKINNY_M}')}, {val(f'icmp sge i64 {M}, 2')}")
        few = val(f"and i1 {rows}, {val(f'icmp sge i64 {macs}, {SKINNY_MIN_MACS}')}")
        return val(f"or i1 {few}, {use_generated(val, dtype_char, vector_bits, M, N, K)}")
    if batch is not None:
        batched = val(f"and i1 {val(f'icmp sge i64 {batch}, 2')}, {val(f'icmp sgt i64 {M}, 1')}")
        sized = val(f"and i1 {val(f'icmp sge i64 {macs}, {BATCHED_MIN_MACS}')}, "
                    f"{val(f'icmp slt i64 {macs}, {BATCHED_MAX_MACS}')}")
        one = use_generated(val, dtype_char, vector_bits, M, N, K)
        return val(f"or i1 {val(f'and i1 {batched}, {sized}')}, {one}")
    big = val(f"icmp sge i64 {macs}, {MIN_GENERATED_MACS}")
    wide = val(f"icmp sgt i64 {N}, {NARROW_N}")
    shallow = val(f"icmp sle i64 {K}, {SHALLOW_K}")
    size = 4 if dtype_char == "s" else 8
    fits = val(f"icmp sle i64 {val(f'mul i64 {K}, {N}')}, {SHORT_MAX_B_BYTES // size}")
    if dtype_char == "s":
        fits = val(f"or i1 {fits}, {val(f'icmp sle i64 {M}, {STREAM_M}')}")
    short = val(f"and i1 {val(f'icmp sle i64 {M}, {SHORT_M}')}, {fits}")
    shape = val(f"or i1 {shallow}, {short}")
    rows = val(f"icmp sgt i64 {M}, 1")          # one row: BLAS's gemv
    return val(f"and i1 {val(f'and i1 {big}, {wide}')}, {val(f'and i1 {shape}, {rows}')}")
