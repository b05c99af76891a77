"""A generated matrix product for the LLVM backend: cache-blocked, packed, register-blocked
for the host's vector width, threaded with OpenMP, one function for every shape.

The structure is the one BLIS and every CPU tensor compiler use (Goto & van de Geijn,
"Anatomy of high-performance matrix multiplication", 2008; BLIS's five loops around a
micro-kernel):

    for jc in 0..N step NC:                       # a column block of B and C
      for pc in 0..K step KC:                     # a slice of the contraction
        pack B[pc:pc+KC, jc:jc+NC] into panels NR columns wide, k-major (zero-padded)
        for ic in 0..M step MC:                   # a row block of A and C
          pack A[ic:ic+MC, pc:pc+KC] into panels MR rows tall, k-major (zero-padded)
          for each (MR x NR) tile of C in the block:
            micro-kernel: MR x NR accumulators in vector registers, one rank-1 update per
            k (NR / V vector loads of B, MR broadcasts of A, MR * NR / V FMAs), then the
            tile is stored (written on the first slice, added to on the later ones)

Packing zero-pads the panels, so the micro-kernel always computes a whole tile; the tile's
store is masked to the rows and columns C has (edge tiles: masks, not other kernels), but
for the default tile's last row tile, which a kernel computing 4 or 8 rows of the panel
runs where it holds no more (``EDGE_HEIGHTS``: 64 rows in 12-row tiles cost as much as 72).  M,
N, K and the leading dimensions are run-time integers, so one function serves every shape;
the operands may be given transposed (``ta``/``tb``: CBLAS's transpose flags, read while
packing).  Threads split C into bands of whole micro-tiles, by rows or (when C has more
column panels than row panels) by columns, each packing its own panels into buffers it
keeps from call to call.  A band of a few rows reads B in place instead of packing it.

Each variant is its own shared library (``gemm_module.module_text``), built once per machine into
the persistent cache; segments call it through a runtime pointer (:func:`pointer_symbol`)
when ``gemm_rule.use_generated`` says the call's shape class runs faster here than in BLAS.

:func:`gemm_text` gives the module text of one product function (by element type and
transposes); :func:`gemm_symbol` its name.  Its ABI is CBLAS's row-major gemm with
alpha = 1 and beta = 0, over a batch of products with fixed strides between them (a
batched product, ``einsum("bhqd,bhkd->bhqk")`` or a ``vmap``'s, is one call, its threads
splitting the products' tiles, instead of a loop of calls):  ``void f(i64 batch, i64 sa,
i64 sb, i64 sc, i64 M, i64 N, i64 K, ptr A, i64 lda, ptr B, i64 ldb, ptr C, i64 ldc,
ptr epi, ptr epa)``, product t reading ``A + t * sa`` and ``B + t * sb`` and writing ``C + t *
sc``.  ``epi`` (or null): the *epilogue*, ``epi(epa, r0, r1, c0, c1)``, called on each block
of C, rows [r0, r1) by columns [c0, c1), as soon as the block is final (after its last
contraction slice, while it is in cache: a row block of MC rows by a column block), for a
product of a batch of one: the kernel that follows the product (a bias, an activation;
``epilogue.py``) reads C once, from cache.
"""
from __future__ import annotations

from dataclasses import dataclass

from .codegen import LATE_CYCLES, SERIAL_CYCLES, _Fn as codegen_Fn
from .gemm_rule import SKINNY_M


@dataclass(frozen=True)
class Blocking:
    """The register and cache blocking of one element type on one vector width."""
    ty: str          # LLVM element type
    size: int        # bytes per element
    lanes: int       # vector lanes (V)
    mr: int          # micro-tile rows (broadcasts of A per k)
    nv: int          # micro-tile columns in vectors (NR = nv * lanes)
    kc: int          # contraction slice (B's micro-panel, KC x NR, stays in L1)
    mc: int          # row block (A's packed block, MC x KC, stays in L2)
    nc: int          # column block (B's packed block, KC x NC, in L3)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes


def blocking(dtype_char: str, vector_bits: int, mr: int | None = None) -> Blocking:
    """Blocking for float32 ("s") or float64 ("d") on ``vector_bits``-wide registers (512:
    32 registers, 24 accumulators of 12 rows x 2 vectors; 256: 16 registers, 12
    accumulators of 6 x 2).  ``mr``: a shorter micro-tile (``row_tiles``) holding as many
    accumulators in more vectors per row (8 x 3, 4 x 6, 2 x 12 on 512 bits)."""
    size = 4 if dtype_char == "s" else 8
    ty = "float" if dtype_char == "s" else "double"
    lanes = vector_bits // (8 * size)
    accumulators = 24 if vector_bits >= 512 else 12
    mr = mr or (12 if vector_bits >= 512 else 6)
    kc = 256 if dtype_char == "s" else 192
    mc = mr * (96 // mr * (2 if vector_bits >= 512 else 1))
    return Blocking(ty, size, lanes, mr, accumulators // mr, kc, mc, 4096 if dtype_char == "s" else 2048)


def row_tiles(vector_bits: int) -> tuple:
    """The micro-tile heights of one vector width, tallest (the default) first: a product
    of a few rows runs the one of least cost, padded rows plus ``TILE_PASS_ROWS`` per tile
    down its rows (``gemm_text``'s entry) — with 12-row tiles, two rows would spend five
    sixths of the multiply-adds on padding; with 2-row tiles, five rows would read B three
    times."""
    return (12, 8, 4, 2) if vector_bits >= 512 else (6, 4, 2)


def gemm_symbol(dtype_char: str, ta: bool, tb: bool) -> str:
    return f"rj_gemm_{dtype_char}_{'t' if ta else 'n'}{'t' if tb else 'n'}"


def pointer_symbol(variant: str) -> str:
    """The runtime global holding the address of product ``variant`` (set when it loads)."""
    return variant + "_ptr"


VARIANTS = tuple(gemm_symbol(d, ta, tb) for d in "sd" for ta in (False, True) for tb in (False, True))


class _Fn(codegen_Fn):
    """A function's lines from its header on, on the kernel generator's SSA and label
    naming, with one-operand values (``value``) and counted loops."""

    def __init__(self, header: str):
        super().__init__()
        self.lines += [header + " {", "entry:"]

    def value(self, instr: str) -> str:
        return self.val("", instr)

    def loop(self, start: str, stop: str, step: int | str, body) -> None:
        """``for (i = start; i < stop; i += step) body(i)``; ``body`` emits into the loop
        and may open blocks of its own (it returns with the block it ends in open)."""
        head, bodyl, latch, done = (self.label(h) for h in ("head", "body", "latch", "done"))
        pre = self.label("pre")
        self.emit(f"br label %{pre}")
        self.start_block(pre)
        self.emit(f"br label %{head}")
        self.start_block(head)
        i, nxt = self.tmp(), self.tmp()
        self.emit(f"{i} = phi i64 [ {start}, %{pre} ], [ {nxt}, %{latch} ]")
        go = self.value(f"icmp slt i64 {i}, {stop}")
        self.emit(f"br i1 {go}, label %{bodyl}, label %{done}")
        self.start_block(bodyl)
        body(i)
        self.emit(f"br label %{latch}")
        self.start_block(latch)
        self.emit(f"{nxt} = add nsw i64 {i}, {step}")
        self.emit(f"br label %{head}")
        self.start_block(done)

    def text(self) -> str:
        return "\n".join(self.lines + ["}", ""])


def _min(fn: _Fn, a: str, b: str) -> str:
    return fn.value(f"call i64 @llvm.smin.i64(i64 {a}, i64 {b})")


def _ceil_div(fn: _Fn, a: str, c: int) -> str:
    return fn.value(f"sdiv i64 {fn.value(f'add nsw i64 {a}, {c - 1}')}, {c}")


def _splat(fn: _Fn, vt: str, ety: str, x: str, lanes: int) -> str:
    ins = fn.value(f"insertelement {vt} poison, {ety} {x}, i64 0")
    return fn.value(f"shufflevector {vt} {ins}, {vt} poison, <{lanes} x i32> zeroinitializer")


def _masked_load(fn: _Fn, ty: str, size: int, V: int, p: str, mask: str) -> str:
    """``V`` values at ``p`` where ``mask`` is set, zeros elsewhere (nothing read there)."""
    return fn.value(f"call <{V} x {ty}> @llvm.masked.load.v{V}f{size * 8}.p0(ptr {p}, i32 {size}, "
                  f"<{V} x i1> {mask}, <{V} x {ty}> zeroinitializer)")


def _masked_store(fn: _Fn, ty: str, size: int, V: int, x: str, p: str, mask: str) -> None:
    fn.emit(f"call void @llvm.masked.store.v{V}f{size * 8}.p0(<{V} x {ty}> {x}, ptr {p}, i32 {size}, "
            f"<{V} x i1> {mask})")


def _column_masks(fn: _Fn, V: int, nv: int, cols: str) -> list:
    """Per vector of ``nv`` making a row, the mask of its lanes below column ``cols``."""
    colsv = _splat(fn, f"<{V} x i64>", "i64", cols, V)
    masks = []
    for j in range(nv):
        lanes = ", ".join(f"i64 {j * V + x}" for x in range(V))
        masks.append(fn.value(f"icmp slt <{V} x i64> <{lanes}>, {colsv}"))
    return masks


# how many k ahead the micro-kernel prefetches B's values (RESULTS.md, session 10: 8 x 512
# @ 512 x 2048 float32 from 82 to 105-111 GFLOP/s, 16 rows from 104-116 to 120-169)
PREFETCH_ROWS = 8


def _micro_kernel(b: Blocking, name: str, a_layout: str = "packed", add: bool | None = None,
                  height: int | None = None) -> str:
    """``name(kc, ap, bp, bstride, c, ldc, rows, cols, add[, astride])``: the MR x NR tile
    of A times ``bp`` (NR values per k, ``bstride`` apart: a packed panel, or B's rows as
    given) over ``kc >= 1`` steps, stored to the first ``rows`` rows and ``cols`` columns
    of ``c`` (row stride ``ldc``), added to what is there when ``add``.  B's loads are
    masked to ``cols``, so an unpacked B is never read past its rows' ends (a packed
    panel's padding is zeros either way).

    ``a_layout`` says where A's element (i, k) is: ``"packed"``, at ``ap[k * MR + i]`` (a
    packed panel); ``"rows"``, at ``ap[i * astride + k]`` (A's rows as given);
    ``"columns"``, at ``ap[k * astride + i]`` (A's transpose as given).  An unpacked A's
    rows from ``rows`` on are read as row ``rows - 1`` (never past the operand's end).
    ``add`` given: the tile is always added (True) or always written (False), whatever the
    ``add`` argument says.  ``height``: an edge tile's kernel, computing only its first
    ``height`` rows (``rows <= height``) of a panel packed ``MR`` rows tall."""
    ty, V, MR, NV = b.ty, b.lanes, b.mr, b.nv
    R = height or MR
    vt = f"<{V} x {ty}>"
    bits = b.size * 8
    extra = "" if a_layout == "packed" else ", i64 %astride"
    fn = _Fn(f"define internal void @{name}(i64 %kc, ptr noalias %ap, ptr noalias %bp, i64 %bstride, "
             f"ptr noalias %c, i64 %ldc, i64 %rows, i64 %cols, i1 %add{extra}) #1")
    masks = _column_masks(fn, V, NV, "%cols")
    if a_layout != "packed":          # row i's offset, clamped to the rows there are
        last = fn.value("sub nsw i64 %rows, 1")
        a_rows = [fn.value(f"call i64 @llvm.smin.i64(i64 {i}, i64 {last})") for i in range(R)]
        if a_layout == "rows":
            a_rows = [fn.value(f"mul nsw i64 {r}, %astride") for r in a_rows]
    loop, store = "kloop", "store"
    fn.emit(f"br label %{loop}")
    fn.start_block(loop)
    accs = [[f"%acc.{i}.{j}" for j in range(NV)] for i in range(R)]
    nexts = [[f"%nacc.{i}.{j}" for j in range(NV)] for i in range(R)]
    fn.emit(f"%k = phi i64 [ 0, %entry ], [ %k1, %{loop} ]")
    for i in range(R):
        for j in range(NV):
            fn.emit(f"{accs[i][j]} = phi {vt} [ zeroinitializer, %entry ], [ {nexts[i][j]}, %{loop} ]")
    boff = fn.value("mul nsw i64 %k, %bstride")
    brow = fn.value(f"getelementptr inbounds {ty}, ptr %bp, i64 {boff}")
    bvec = []
    for j in range(NV):
        p = fn.value(f"getelementptr inbounds {ty}, ptr {brow}, i64 {j * V}")
        bvec.append(_masked_load(fn, ty, b.size, V, p, masks[j]))
    if a_layout == "packed":
        # B's row PREFETCH_ROWS ahead: B given in place is read down its rows, a page apart
        # for wide matrices, which the hardware prefetchers (within a page) do not follow
        ahead = fn.value(f"mul nsw i64 %bstride, {PREFETCH_ROWS}")
        ahead = fn.value(f"getelementptr {ty}, ptr {brow}, i64 {ahead}")
        for j in range(NV):
            p = fn.value(f"getelementptr {ty}, ptr {ahead}, i64 {j * V}")
            fn.emit(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 3, i32 1)")
    kstep = {"packed": str(MR), "rows": "1", "columns": "%astride"}[a_layout]
    aoff = fn.value(f"mul nsw i64 %k, {kstep}")
    abase = fn.value(f"getelementptr inbounds {ty}, ptr %ap, i64 {aoff}")
    for i in range(R):
        p = fn.value(f"getelementptr inbounds {ty}, ptr {abase}, i64 {i if a_layout == 'packed' else a_rows[i]}")
        splat = _splat(fn, vt, ty, fn.value(f"load {ty}, ptr {p}"), V)
        for j in range(NV):
            fn.emit(f"{nexts[i][j]} = call {vt} @llvm.fma.v{V}f{bits}({vt} {splat}, {vt} {bvec[j]}, "
                    f"{vt} {accs[i][j]})")
    fn.emit("%k1 = add nsw i64 %k, 1")
    more = fn.value("icmp slt i64 %k1, %kc")
    fn.emit(f"br i1 {more}, label %{loop}, label %{store}")
    fn.start_block(store)
    for i in range(R):
        row, nxt = fn.label("row"), fn.label("next")
        go = fn.value(f"icmp slt i64 {i}, %rows")
        fn.emit(f"br i1 {go}, label %{row}, label %done")
        fn.start_block(row)
        roff = fn.value(f"mul nsw i64 {i}, %ldc")
        rp = fn.value(f"getelementptr inbounds {ty}, ptr %c, i64 {roff}")
        for j in range(NV):
            p = fn.value(f"getelementptr inbounds {ty}, ptr {rp}, i64 {j * V}")
            val = nexts[i][j]
            if add is not False:
                summed = fn.value(f"fadd {vt} {val}, {_masked_load(fn, ty, b.size, V, p, masks[j])}")
                val = summed if add else fn.value(f"select i1 %add, {vt} {summed}, {vt} {val}")
            _masked_store(fn, ty, b.size, V, val, p, masks[j])
        fn.emit(f"br label %{nxt}")
        fn.start_block(nxt)
    fn.emit("br label %done")
    fn.start_block("done")
    fn.emit("ret void")
    return fn.text()


def _pack(b: Blocking, name: str, panel: int, contiguous_panel: bool) -> str:
    """``name(src, ld, r0, nr, c0, nk, dst)``: the ``nr`` rows (of C's side: A's rows for
    ``panel = MR``, B's columns for ``panel = NR``) starting at ``r0``, over the ``nk``
    contraction indices starting at ``c0``, packed into panels ``panel`` wide, k-major,
    zero-padded to whole panels.  ``contiguous_panel``: element (r, k) is at
    ``src[k * ld + r]`` (B as given, A transposed): a panel's values for one k are
    contiguous, copied as (masked) vectors; else at ``src[r * ld + k]`` (A as given, B
    transposed): each row is read along k, its values stored ``panel`` apart."""
    ty, V = b.ty, b.lanes
    vt = f"<{V} x {ty}>"
    fn = _Fn(f"define internal void @{name}(ptr noalias %src, i64 %ld, i64 %r0, i64 %nr, i64 %c0, "
             f"i64 %nk, ptr noalias %dst) #0")
    npanels = _ceil_div(fn, "%nr", panel)

    def per_panel(p):
        base = fn.value(f"mul nsw i64 {p}, {panel}")
        pdst = fn.value(f"getelementptr inbounds {ty}, ptr %dst, i64 {fn.value(f'mul nsw i64 {base}, %nk')}")
        left = fn.value(f"sub nsw i64 %nr, {base}")
        first = fn.value(f"add nsw i64 %r0, {base}")
        if contiguous_panel:               # dst[k * panel + r] = src[(c0 + k) * ld + first + r]
            nvec = -(-panel // V)              # vectors per k (the last one partial, masked)
            masks = _column_masks(fn, V, nvec, _min(fn, left, str(panel)))

            def per_k(k):
                at = fn.value(f"mul nsw i64 {fn.value(f'add nsw i64 {k}, %c0')}, %ld")
                at = fn.value(f"add nsw i64 {at}, {first}")
                row = fn.value(f"getelementptr inbounds {ty}, ptr %src, i64 {at}")
                out = fn.value(f"getelementptr inbounds {ty}, ptr {pdst}, i64 {fn.value(f'mul nsw i64 {k}, {panel}')}")
                for j in range(nvec):
                    src = fn.value(f"getelementptr inbounds {ty}, ptr {row}, i64 {j * V}")
                    x = _masked_load(fn, ty, b.size, V, src, masks[j])
                    dst = fn.value(f"getelementptr inbounds {ty}, ptr {out}, i64 {j * V}")
                    if (j + 1) * V <= panel:
                        fn.emit(f"store {vt} {x}, ptr {dst}, align {b.size}")
                    else:                      # only the panel's lanes: the next k's follow
                        keep = ", ".join("i1 true" if j * V + lane < panel else "i1 false" for lane in range(V))
                        _masked_store(fn, ty, b.size, V, x, dst, f"<{keep}>")
            fn.loop("0", "%nk", 1, per_k)
            return
        rows = _min(fn, left, str(panel))

        def per_row(r):                    # dst[k * panel + r] = src[(first + r) * ld + c0 + k]
            at = fn.value(f"mul nsw i64 {fn.value(f'add nsw i64 {first}, {r}')}, %ld")
            row = fn.value(f"getelementptr inbounds {ty}, ptr %src, i64 {fn.value(f'add nsw i64 {at}, %c0')}")
            out = fn.value(f"getelementptr inbounds {ty}, ptr {pdst}, i64 {r}")

            def per_k(k):
                x = fn.value(f"load {ty}, ptr {fn.value(f'getelementptr inbounds {ty}, ptr {row}, i64 {k}')}")
                d = fn.value(f"mul nsw i64 {k}, {panel}")
                fn.emit(f"store {ty} {x}, ptr {fn.value(f'getelementptr inbounds {ty}, ptr {out}, i64 {d}')}")
            fn.loop("0", "%nk", 1, per_k)

        def pad_row(r):                    # the rows past the source's end: zeros
            out = fn.value(f"getelementptr inbounds {ty}, ptr {pdst}, i64 {r}")

            def per_k(k):
                d = fn.value(f"mul nsw i64 {k}, {panel}")
                fn.emit(f"store {ty} 0.0, ptr {fn.value(f'getelementptr inbounds {ty}, ptr {out}, i64 {d}')}")
            fn.loop("0", "%nk", 1, per_k)
        fn.loop("0", rows, 1, per_row)
        fn.loop(rows, str(panel), 1, pad_row)
    fn.loop("0", npanels, 1, per_panel)
    fn.emit("ret void")
    return fn.text()


# B as given (not transposed) is read in place, unpacked, by a band of C this many rows tall
# or less: packing it costs a load and a store per element, more than the few micro-tiles
# that read each element save
PACK_B_MIN_ROWS = 48


# A is packed when C's band has more columns than this; a narrower band reads A in place
# (each row panel of A serves only the band's few column tiles, fewer than packing costs:
# a scalar load and store per element).  Measured on one thread (RESULTS.md, session 11):
# in place, 64^3 from 71 to 95 GFLOP/s, 128 x 64 @ 64 x 128 94 -> 114, 64 x 1024 @ 1024 x 64
# 78 -> 112, 256^3 118 -> 132; but 16 x 512 @ 512 x 2048 94 -> 76 (the packed-A kernel
# prefetches B, which a short band reads in place)
PACK_A_MIN_COLS = 512


def _block(b: Blocking, name: str, ukernels: tuple, pack_a: str, pack_b: str, ta: bool, tb: bool,
           edges: tuple = ()) -> str:
    """``name(m0, m1, n0, n1, K, A, lda, B, ldb, C, ldc, abuf, bbuf)``: C's rectangle
    ``[m0, m1) x [n0, n1)`` through the five loops (K >= 1).  ``ukernels``: the
    micro-kernel on a packed A, and the one reading A in place (its rows, or its columns
    when ``ta``); ``edges``: (height, the two kernels computing that many rows), shortest
    first, for the last row tile where it has no more rows."""
    ty = b.ty
    packed_kernel, inplace_kernel = ukernels
    fn = _Fn(f"define internal void @{name}(i64 %m0, i64 %m1, i64 %n0, i64 %n1, i64 %K, ptr %A, i64 %lda, "
             f"ptr %B, i64 %ldb, ptr %C, i64 %ldc, ptr %abuf, ptr %bbuf, ptr %epi, ptr %epa) #0")
    has_epi = fn.value("icmp ne ptr %epi, null")
    if tb:
        packb = "true"
    else:
        packb = fn.value(f"icmp sgt i64 {fn.value('sub nsw i64 %m1, %m0')}, {PACK_B_MIN_ROWS}")
    bstride = fn.value(f"select i1 {packb}, i64 {b.nr}, i64 %ldb")
    packa = fn.value(f"icmp sgt i64 {fn.value('sub nsw i64 %n1, %n0')}, {PACK_A_MIN_COLS}")

    def jc_loop(jc):
        nleft = fn.value(f"sub nsw i64 %n1, {jc}")
        nc = _min(fn, nleft, str(b.nc))

        def pc_loop(pc):
            kleft = fn.value(f"sub nsw i64 %K, {pc}")
            kc = _min(fn, kleft, str(b.kc))
            add = fn.value(f"icmp sgt i64 {pc}, 0")
            # the last contraction slice finishes each tile: the epilogue runs on it then
            end = fn.value(f"add nsw i64 {pc}, {kc}")
            finish = fn.value(f"and i1 {has_epi}, {fn.value(f'icmp sge i64 {end}, %K')}")
            packing, packed = fn.label("packb"), fn.label("packedb")
            fn.emit(f"br i1 {packb}, label %{packing}, label %{packed}")
            fn.start_block(packing)
            fn.emit(f"call void @{pack_b}(ptr %B, i64 %ldb, i64 {jc}, i64 {nc}, i64 {pc}, i64 {kc}, ptr %bbuf)")
            fn.emit(f"br label %{packed}")
            fn.start_block(packed)
            # B in place: row pc, column jc of B
            at = fn.value(f"mul nsw i64 {pc}, %ldb")
            at = fn.value(f"add nsw i64 {at}, {jc}")
            bhere = fn.value(f"getelementptr inbounds {ty}, ptr %B, i64 {at}")

            def ic_loop(ic):
                mleft = fn.value(f"sub nsw i64 %m1, {ic}")
                mc = _min(fn, mleft, str(b.mc))
                packing_a, packed_a = fn.label("packa"), fn.label("packeda")
                fn.emit(f"br i1 {packa}, label %{packing_a}, label %{packed_a}")
                fn.start_block(packing_a)
                fn.emit(f"call void @{pack_a}(ptr %A, i64 %lda, i64 {ic}, i64 {mc}, i64 {pc}, i64 {kc}, ptr %abuf)")
                fn.emit(f"br label %{packed_a}")
                fn.start_block(packed_a)

                def jr_loop(jr):
                    cols = _min(fn, fn.value(f"sub nsw i64 {nc}, {jr}"), str(b.nr))
                    boff = fn.value(f"mul nsw i64 {jr}, {kc}")
                    bpacked = fn.value(f"getelementptr inbounds {ty}, ptr %bbuf, i64 {boff}")
                    bgiven = fn.value(f"getelementptr inbounds {ty}, ptr {bhere}, i64 {jr}")
                    bp = fn.value(f"select i1 {packb}, ptr {bpacked}, ptr {bgiven}")
                    col = fn.value(f"add nsw i64 {jc}, {jr}")

                    def ir_loop(ir):
                        rows = _min(fn, fn.value(f"sub nsw i64 {mc}, {ir}"), str(b.mr))
                        row = fn.value(f"add nsw i64 {ic}, {ir}")
                        coff = fn.value(f"mul nsw i64 {row}, %ldc")
                        coff = fn.value(f"add nsw i64 {coff}, {col}")
                        cp = fn.value(f"getelementptr inbounds {ty}, ptr %C, i64 {coff}")
                        tile = f"i64 {kc}, ptr %ap, ptr {bp}, i64 {bstride}, ptr {cp}, i64 %ldc, i64 {rows}, i64 {cols}, i1 {add}"
                        kp, ki = f"@{packed_kernel}", f"@{inplace_kernel}"
                        for height, pe, ie in reversed(edges):     # the shortest that holds the rows
                            short = fn.value(f"icmp sle i64 {rows}, {height}")
                            kp = fn.value(f"select i1 {short}, ptr @{pe}, ptr {kp}")
                            ki = fn.value(f"select i1 {short}, ptr @{ie}, ptr {ki}")
                        packed, inplace, stored = fn.label("apacked"), fn.label("ainplace"), fn.label("tiled")
                        fn.emit(f"br i1 {packa}, label %{packed}, label %{inplace}")
                        fn.start_block(packed)
                        ap = fn.value(f"getelementptr inbounds {ty}, ptr %abuf, i64 {fn.value(f'mul nsw i64 {ir}, {kc}')}")
                        fn.emit(f"call void {kp}({tile.replace('%ap', ap)})")
                        fn.emit(f"br label %{stored}")
                        fn.start_block(inplace)
                        # A's element (row, pc + k): A[row * lda + pc + k], or A[(pc + k) * lda + row] when ta
                        first, k0 = (pc, row) if ta else (row, pc)
                        at = fn.value(f"add nsw i64 {fn.value(f'mul nsw i64 {first}, %lda')}, {k0}")
                        ap = fn.value(f"getelementptr inbounds {ty}, ptr %A, i64 {at}")
                        fn.emit(f"call void {ki}({tile.replace('%ap', ap)}, i64 %lda)")
                        fn.emit(f"br label %{stored}")
                        fn.start_block(stored)
                    fn.loop("0", mc, b.mr, ir_loop)
                fn.loop("0", nc, b.nr, jr_loop)
                # the block's rows are final after the last slice: the epilogue runs on them,
                # whole rows of the column block (long vector loops), from L2
                epi, done = fn.label("epi"), fn.label("blockdone")
                fn.emit(f"br i1 {finish}, label %{epi}, label %{done}")
                fn.start_block(epi)
                fn.emit(f"call void %epi(ptr %epa, i64 {ic}, i64 {fn.value(f'add nsw i64 {ic}, {mc}')}, "
                        f"i64 {jc}, i64 {fn.value(f'add nsw i64 {jc}, {nc}')})")
                fn.emit(f"br label %{done}")
                fn.start_block(done)
            fn.loop("%m0", "%m1", b.mc, ic_loop)
        fn.loop("0", "%K", b.kc, pc_loop)
    fn.loop("%n0", "%n1", b.nc, jc_loop)
    fn.emit("ret void")
    return fn.text()


def _buffers(name: str) -> str:
    """Each thread's packing buffers, kept from call to call and grown when too small (an
    allocation per call of a megabyte costs page faults on every call): two thread-local
    ``{ptr, i64 bytes}`` records and ``name.buffer(record, bytes)`` giving one at least
    ``bytes`` long, 64-byte aligned."""
    return f"""@{name}.abuf = internal thread_local global {{ ptr, i64 }} zeroinitializer
@{name}.bbuf = internal thread_local global {{ ptr, i64 }} zeroinitializer

define internal ptr @{name}.buffer(ptr %rec, i64 %bytes) #0 {{
entry:
  %have = getelementptr inbounds {{ ptr, i64 }}, ptr %rec, i64 0, i32 1
  %size = load i64, ptr %have
  %p = load ptr, ptr %rec
  %ok = icmp sge i64 %size, %bytes
  br i1 %ok, label %done, label %grow
grow:
  call void @free(ptr %p)
  %q = call ptr @aligned_alloc(i64 64, i64 %bytes)
  store ptr %q, ptr %rec
  store i64 %bytes, ptr %have
  br label %done
done:
  %r = phi ptr [ %p, %entry ], [ %q, %grow ]
  ret ptr %r
}}
"""


# products with fewer multiply-adds than this run on the calling thread (a fork and join of
# the OpenMP team costs about what 2**21 multiply-adds do on one core)
PARALLEL_MIN_FLOPS = 1 << 21


# the product function's arguments (the worker reads them from its context, in this order):
# ``batch`` products, the t-th of A + t * sa, B + t * sb into C + t * sc (strides in
# elements; 0: one operand shared by every product)
_ARGS = ("batch", "sa", "sb", "sc", "M", "N", "K", "A", "lda", "B", "ldb", "C", "ldc", "epi", "epa")
_TYPES = ("i64", "i64", "i64", "i64", "i64", "i64", "i64", "ptr", "i64", "ptr", "i64", "ptr", "i64", "ptr", "ptr")

# the default micro-tile's last row tile, where it holds no more rows than one of these, runs
# a kernel computing only those rows of the panel (its padding rows are zeros otherwise
# multiplied in full: 64 rows in 12-row tiles cost as much as 72)
EDGE_HEIGHTS = {12: (4, 8)}

# products of fewer rows than this may run a shorter micro-tile than the default
# (``row_tiles``); taller ones keep the tile the measured rule was made with
SHORT_TILE_ROWS = 48
# what one more tile down C's rows costs, in rows of multiply-adds (one more pass over B's
# panels), measured on 256 x 1280 float32 products of 2-47 rows (AVX-512, 2 threads): 32 rows
# run 8 % faster in four 8-row tiles than in three 12-row ones (so below 4), 5 rows 2-3x
# faster in one 8-row tile than in three 2-row ones (so above 1)
TILE_PASS_ROWS = 2


def _worker(b: Blocking, name: str, work: str, blk: str) -> str:
    """``work(ctx)``, run by each thread of the team (or alone): the products' micro-tile
    bands (rows of C, or columns when C has more column panels than row panels), numbered
    product by product, split into one contiguous range per thread; thread t of T computes
    its range's band of each product it meets through ``blk``.  Many small products go
    whole to the threads; one large product is split between them."""
    args, types = _ARGS, _TYPES
    fn = _Fn(f"define internal void @{work}(ptr %ctx) #0")
    vals = {}
    for k, (a, t) in enumerate(zip(args, types)):
        p = fn.value(f"getelementptr inbounds i64, ptr %ctx, i64 {k}")
        vals[a] = fn.value(f"load {t}, ptr {p}")
    tid = fn.value("sext i32 " + fn.value("call i32 @omp_get_thread_num()") + " to i64")
    nt = fn.value("sext i32 " + fn.value("call i32 @omp_get_num_threads()") + " to i64")
    # a worker starting long after the fork means the cores are taken (the kernels' rule,
    # codegen.LATE_CYCLES): it says so, and products and kernels stay serial a while
    forked = fn.value(f"load i64, ptr {fn.value(f'getelementptr inbounds i64, ptr %ctx, i64 {len(args)}')}")
    waited = fn.value(f"sub i64 {fn.value('call i64 @llvm.readcyclecounter()')}, {forked}")
    late = fn.value(f"and i1 {fn.value(f'icmp ugt i64 {waited}, {LATE_CYCLES}')}, {fn.value(f'icmp ne i64 {tid}, 0')}")
    fn.emit(f"br i1 {late}, label %late, label %work")
    fn.start_block("late")
    flag = fn.value(f"getelementptr inbounds i64, ptr %ctx, i64 {len(args) + 1}")
    fn.emit(f"store atomic i64 1, ptr {flag} monotonic, align 8")
    fn.emit("br label %work")
    fn.start_block("work")
    M, N = vals["M"], vals["N"]
    tiles_m = _ceil_div(fn, M, b.mr)
    tiles_n = _ceil_div(fn, N, b.nr)
    by_rows = fn.value(f"icmp sge i64 {tiles_m}, {tiles_n}")
    tiles = fn.value(f"select i1 {by_rows}, i64 {tiles_m}, i64 {tiles_n}")
    tile = fn.value(f"select i1 {by_rows}, i64 {b.mr}, i64 {b.nr}")
    extent = fn.value(f"select i1 {by_rows}, i64 {M}, i64 {N}")
    total = fn.value(f"mul nsw i64 {tiles}, {vals['batch']}")
    per = fn.value(f"sub nsw i64 {nt}, 1")
    per = fn.value(f"sdiv i64 {fn.value(f'add nsw i64 {total}, {per}')}, {nt}")
    lo = _min(fn, fn.value(f"mul nsw i64 {tid}, {per}"), total)
    hi = _min(fn, fn.value(f"add nsw i64 {lo}, {per}"), total)
    some = fn.value(f"icmp slt i64 {lo}, {hi}")
    fn.emit(f"br i1 {some}, label %go, label %out")
    fn.start_block("go")
    # packing buffers: A's MC x KC block, B's KC x min(NC, N) block, 64-byte aligned
    ncols = _min(fn, N, str(b.nc))
    ncols = fn.value(f"mul nsw i64 {_ceil_div(fn, ncols, b.nr)}, {b.nr}")
    bbytes = fn.value(f"mul nsw i64 {ncols}, {b.kc * b.size}")
    abuf = fn.value(f"call ptr @{name}.buffer(ptr @{name}.abuf, i64 {b.mc * b.kc * b.size})")
    bbuf = fn.value(f"call ptr @{name}.buffer(ptr @{name}.bbuf, i64 {bbytes})")
    first = fn.value(f"sdiv i64 {lo}, {tiles}")
    last = fn.value(f"sdiv i64 {fn.value(f'sub nsw i64 {hi}, 1')}, {tiles}")
    stop = fn.value(f"add nsw i64 {last}, 1")

    def per_product(t):
        # this thread's tiles of product t: [lo, hi) less the products before t
        base = fn.value(f"mul nsw i64 {t}, {tiles}")
        t0 = fn.value(f"call i64 @llvm.smax.i64(i64 {fn.value(f'sub nsw i64 {lo}, {base}')}, i64 0)")
        t1 = _min(fn, fn.value(f"sub nsw i64 {hi}, {base}"), tiles)
        b0 = fn.value(f"mul nsw i64 {t0}, {tile}")
        b1 = _min(fn, fn.value(f"mul nsw i64 {t1}, {tile}"), extent)
        m0 = fn.value(f"select i1 {by_rows}, i64 {b0}, i64 0")
        m1 = fn.value(f"select i1 {by_rows}, i64 {b1}, i64 {M}")
        n0 = fn.value(f"select i1 {by_rows}, i64 0, i64 {b0}")
        n1 = fn.value(f"select i1 {by_rows}, i64 {N}, i64 {b1}")
        ptrs = []
        for p, s in (("A", "sa"), ("B", "sb"), ("C", "sc")):
            off = fn.value(f"mul nsw i64 {t}, {vals[s]}")
            ptrs.append(fn.value(f"getelementptr inbounds {b.ty}, ptr {vals[p]}, i64 {off}"))
        fn.emit(f"call void @{blk}(i64 {m0}, i64 {m1}, i64 {n0}, i64 {n1}, i64 {vals['K']}, ptr {ptrs[0]}, "
                f"i64 {vals['lda']}, ptr {ptrs[1]}, i64 {vals['ldb']}, ptr {ptrs[2]}, i64 {vals['ldc']}, "
                f"ptr {abuf}, ptr {bbuf}, ptr {vals['epi']}, ptr {vals['epa']})")
    fn.loop(first, stop, 1, per_product)
    fn.emit("br label %out")
    fn.start_block("out")
    fn.emit("ret void")
    return fn.text()


def gemm_text(dtype_char: str, ta: bool, tb: bool, vector_bits: int) -> str:
    """The LLVM text of the product function ``gemm_symbol(dtype_char, ta, tb)`` and its
    helpers (internal), for ``vector_bits``-wide vector registers: one set of micro-kernel,
    packing, loops and worker per micro-tile height (``row_tiles``).  The text names the
    runtime globals (``@rj_num_threads``) and libgomp's and libc's functions, which the
    module that holds it declares (``DECLARATIONS``)."""
    name = gemm_symbol(dtype_char, ta, tb)
    args, types = _ARGS, _TYPES
    parts, workers = [], []
    for mr in row_tiles(vector_bits):
        b = blocking(dtype_char, vector_bits, mr)
        tag = "" if not workers else f".r{mr}"
        uk, uka, pa, pb, blk, work = (f"{name}.{s}{tag}" for s in
                                      ("ukernel", "ukernel_a", "pack_a", "pack_b", "block", "omp"))
        a_layout = "columns" if ta else "rows"
        parts += [_micro_kernel(b, uk), _micro_kernel(b, uka, a_layout)]
        edges = []
        for height in EDGE_HEIGHTS.get(mr, ()):
            pe, ie = f"{uk}.e{height}", f"{uka}.e{height}"
            parts += [_micro_kernel(b, pe, height=height), _micro_kernel(b, ie, a_layout, height=height)]
            edges.append((height, pe, ie))
        parts += [_pack(b, pa, b.mr, contiguous_panel=ta), _pack(b, pb, b.nr, contiguous_panel=not tb),
                  _block(b, blk, (uk, uka), pa, pb, ta, tb, tuple(edges)), _worker(b, name, work, blk)]
        workers.append((mr, work))
    parts.append(_buffers(name))

    # the entry: C = 0 when K == 0; else the worker on one thread or the team
    fn = _Fn(f"define void @{name}(" + ", ".join(f"{t} %{a}" for a, t in zip(args, types)) + ")")
    mn = fn.value("mul nsw i64 %M, %N")
    mn = fn.value(f"mul nsw i64 {mn}, %batch")
    empty = fn.value(f"icmp sle i64 {mn}, 0")
    fn.emit("br i1 " + empty + ", label %out, label %nonempty")
    fn.start_block("nonempty")
    nok = fn.value("icmp sle i64 %K, 0")
    fn.emit(f"br i1 {nok}, label %zero, label %product")
    fn.start_block("zero")

    def zero_product(t):
        c = fn.value(f"getelementptr inbounds {b.ty}, ptr %C, i64 {fn.value(f'mul nsw i64 {t}, %sc')}")

        def zero_row(i):
            row = fn.value(f"getelementptr inbounds {b.ty}, ptr {c}, i64 {fn.value(f'mul nsw i64 {i}, %ldc')}")
            fn.emit(f"call void @llvm.memset.p0.i64(ptr {row}, i8 0, i64 {fn.value(f'mul nsw i64 %N, {b.size}')}, i1 false)")
        fn.loop("0", "%M", 1, zero_row)
    fn.loop("0", "%batch", 1, zero_product)
    zero_epi, zeroed = fn.label("zeroepi"), fn.label("zeroed")
    fn.emit(f"br i1 {fn.value('icmp ne ptr %epi, null')}, label %{zero_epi}, label %{zeroed}")
    fn.start_block(zero_epi)
    fn.emit("call void %epi(ptr %epa, i64 0, i64 %M, i64 0, i64 %N)")
    fn.emit(f"br label %{zeroed}")
    fn.start_block(zeroed)
    fn.emit("br label %out")
    fn.start_block("product")
    now = fn.value("call i64 @llvm.readcyclecounter()")
    if tb and not ta:
        # a few rows by B transposed: dot products of rows, B streamed once, by the
        # function ``name.skinny`` (gemm_skinny) that the variant's module holds too
        few = fn.value(f"and i1 {fn.value('icmp eq i64 %batch, 1')}, {fn.value(f'icmp sle i64 %M, {SKINNY_M}')}")
        fn.emit(f"br i1 {few}, label %skinny, label %packed")
        fn.start_block("skinny")
        fn.emit(f"call void @{name}.skinny(i64 %M, i64 %N, i64 %K, ptr %A, i64 %lda, ptr %B, i64 %ldb, "
                f"ptr %C, i64 %ldc, ptr %epi, ptr %epa, i64 {now})")
        fn.emit("br label %out")
        fn.start_block("packed")
    # the arguments, the fork's cycle count and the late flag
    ctx = fn.value(f"alloca [{len(args) + 2} x i64]")
    for k, (a, t) in enumerate(zip(args, types)):
        fn.emit(f"store {t} %{a}, ptr {fn.value(f'getelementptr inbounds i64, ptr {ctx}, i64 {k}')}")
    fn.emit(f"store i64 {now}, ptr {fn.value(f'getelementptr inbounds i64, ptr {ctx}, i64 {len(args)}')}")
    flag = fn.value(f"getelementptr inbounds i64, ptr {ctx}, i64 {len(args) + 1}")
    fn.emit(f"store i64 0, ptr {flag}")
    flops = fn.value(f"mul nsw i64 {mn}, %K")
    big = fn.value(f"icmp sge i64 {flops}, {PARALLEL_MIN_FLOPS}")
    par, threads = team_wanted(fn, big, now)
    # products of a few rows: the worker of the micro-tile of least cost, TILE_PASS_ROWS
    # padded rows per tile down C's rows (each tile row streams all of B's panels: 5 rows in
    # 2-row tiles read B three times, 2-3x slower than one 8-row tile) plus the rows
    # computed; the default tile's otherwise
    (_, work), best = workers[0], None
    work = "@" + work
    short = fn.value(f"icmp slt i64 %M, {SHORT_TILE_ROWS}")
    for mr, other in workers:
        cost = fn.value(f"mul nsw i64 {_ceil_div(fn, '%M', mr)}, {mr + TILE_PASS_ROWS}")
        if best is not None:
            better = fn.value(f"and i1 {short}, {fn.value(f'icmp slt i64 {cost}, {best}')}")
            work = fn.value(f"select i1 {better}, ptr @{other}, ptr {work}")
            cost = fn.value(f"select i1 {better}, i64 {cost}, i64 {best}")
        best = cost
    fn.emit(f"br i1 {par}, label %team, label %alone")
    fn.start_block("team")
    fn.emit(f"call void @GOMP_parallel(ptr {work}, ptr {ctx}, i32 {threads}, i32 0)")
    was_late = fn.value(f"icmp ne i64 {fn.value(f'load atomic i64, ptr {flag} monotonic, align 8')}, 0")
    fn.emit(f"br i1 {was_late}, label %busy, label %out")
    fn.start_block("busy")
    later = fn.value(f"add i64 {fn.value('call i64 @llvm.readcyclecounter()')}, {SERIAL_CYCLES}")
    fn.emit(f"store atomic i64 {later}, ptr @rj_serial_until monotonic, align 8")
    fn.emit("br label %out")
    fn.start_block("alone")
    fn.emit(f"call void {work}(ptr {ctx})")
    fn.emit("br label %out")
    fn.start_block("out")
    fn.emit("ret void")
    parts.append(fn.text())
    return "\n".join(parts)


def team_wanted(fn: _Fn, big: str, now: str) -> tuple[str, str]:
    """(i1: fork the OpenMP team, its thread count): the work is ``big`` enough, the
    runtime asks for more than one thread and the kernels are not being kept serial
    (``@rj_serial_until``, past the cycle count ``now``)."""
    threads = fn.value("load i32, ptr @rj_num_threads")
    many = fn.value(f"icmp ne i32 {threads}, 1")
    until = fn.value("load atomic i64, ptr @rj_serial_until monotonic, align 8")
    free = fn.value(f"icmp uge i64 {now}, {until}")
    return fn.value(f"and i1 {fn.value(f'and i1 {big}, {many}')}, {free}"), threads


# what a module holding gemm functions declares once (besides the runtime globals)
DECLARATIONS = frozenset({
    "declare i64 @llvm.smin.i64(i64, i64)", "declare i64 @llvm.smax.i64(i64, i64)",
    "declare i32 @omp_get_thread_num()",
    "declare i32 @omp_get_num_threads()", "declare void @GOMP_parallel(ptr, ptr, i32, i32)",
    "declare ptr @aligned_alloc(i64, i64)", "declare void @free(ptr)", "declare i64 @llvm.readcyclecounter()",
    "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)", "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
    *(f"declare <{v} x {t}> @llvm.fma.v{v}f{bits}(<{v} x {t}>, <{v} x {t}>, <{v} x {t}>)"
      for t, bits in (("float", 32), ("double", 64)) for v in (4, 8, 16)),
    *(f"declare <{v} x {t}> @llvm.masked.load.v{v}f{bits}.p0(ptr, i32, <{v} x i1>, <{v} x {t}>)"
      for t, bits in (("float", 32), ("double", 64)) for v in (4, 8, 16)),
    *(f"declare void @llvm.masked.store.v{v}f{bits}.p0(<{v} x {t}>, ptr, i32, <{v} x i1>)"
      for t, bits in (("float", 32), ("double", 64)) for v in (4, 8, 16)),
})


# #1, the micro-kernel: optimised once, on its own (inlined, LLVM would optimise it again in
# every copy its caller's loop unswitching makes); #0, the loops around it and the
# packing: optimised for size (their vector code is written out; unswitching and
# unrolling them only make the module slower to compile)
ATTRIBUTES = "attributes #0 = { nounwind optsize }\nattributes #1 = { nounwind noinline }"
