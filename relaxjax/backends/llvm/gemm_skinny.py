"""Products of a few rows by a matrix stored transposed: ``C = A @ B.T`` with ``A`` (M, K) of
at most ``SKINNY_M`` rows and ``B`` (N, K) row-major, one path of the generated ``_nt``
products (``gemm.gemm_text``'s entry branches here; ``gemm_module`` puts both in the
variant's module).

A decoder's logits (``h @ wte.T``, the tied embedding) and a torch-style ``Linear``
(``x @ W.T``) at batch 2-32 are such products.  Every entry of C is then a dot product of
two contiguous rows, so this path streams B once, row after row, as a gemv does: a step
takes ``NB`` rows of B and, for each group of ``MB`` rows of A (which stay in L1), keeps the
MB x NB partial sums in vector registers over K, then adds them down to C's MB x NB
entries (a tree of shuffles, ``_row_sums``).  The packed product instead read B through its
transposed panels (a strided gather per k): at 2 rows x 384 @ 384 x 8192 float32, 3.8 GB/s
of B against OpenBLAS's 12 and this path's 44-54 (RESULTS.md, session 15).  Threads split N into ranges of whole steps; rows past the edge
are read again (the last row's pointer, clamped) and not stored, so there is one kernel per
group height (``MB``, 2, 1) and no masks but K's last vector and C's stores.  The entry
(``skinny_text``) takes any M; ``gemm_rule.SKINNY_M`` bounds the rows it is given."""
from __future__ import annotations

from .attention_vec import Fn, Vec
from .gemm import Blocking, _ceil_div, _min, _splat

NB = 4               # rows of B per step
MB = 4               # rows of A per group (MB x NB accumulators, MB + NB operand vectors;
                     # the rows past the last whole group: a group of 2, then of 1)
ARGS = ("M", "N", "K", "A", "lda", "B", "ldb", "C", "ldc", "epi", "epa")
TYPES = ("i64", "i64", "i64", "ptr", "i64", "ptr", "i64", "ptr", "i64", "ptr", "ptr")


def _tile(b: Blocking, name: str, mb: int) -> str:
    """``name(m0, m1, n0, n1, K, A, lda, B, ldb, C, ldc)``: C[m, n] for the ``mb`` rows of A
    from ``m0`` (clamped below ``m1``) and the NB rows of B from ``n0`` (below ``n1``)."""
    fn = Fn(f"define internal void @{name}(i64 %m0, i64 %m1, i64 %n0, i64 %n1, i64 %K, ptr %A, "
            f"i64 %lda, ptr %B, i64 %ldb, ptr %C, i64 %ldc) #1")
    vec = Vec(fn, b)
    ty, V = b.ty, b.lanes

    def rows(start, stop, count, base, ld):     # pointers to rows start.., clamped below stop
        last = fn.value(f"sub nsw i64 {stop}, 1")
        return [fn.at(ty, base, fn.mul(_min(fn, fn.add(start, r), last), ld)) for r in range(count)]
    arows = rows("%m0", "%m1", mb, "%A", "%lda")
    brows = rows("%n0", "%n1", NB, "%B", "%ldb")
    accs = [[fn.slot(vec.vt, "zeroinitializer") for _ in range(NB)] for _ in range(mb)]

    def step(k, mask=None):
        bv = [vec.load(fn.at(ty, p, k), mask) for p in brows]
        for i, p in enumerate(arows):
            av = vec.load(fn.at(ty, p, k), mask)
            for j in range(NB):
                acc = fn.value(f"load {vec.vt}, ptr {accs[i][j]}")
                fn.emit(f"store {vec.vt} {vec.fma(av, bv[j], acc)}, ptr {accs[i][j]}")
    whole = fn.value(f"sub nsw i64 %K, {fn.value(f'srem i64 %K, {V}')}")
    fn.loop("0", whole, V, step)
    tail, sums = fn.label("tail"), fn.label("sums")
    fn.emit(f"br i1 {fn.value(f'icmp slt i64 {whole}, %K')}, label %{tail}, label %{sums}")
    fn.start_block(tail)
    step(whole, vec.lanes_below(fn.value(f"sub nsw i64 %K, {whole}")))
    fn.emit(f"br label %{sums}")
    fn.start_block(sums)
    last = fn.value("sub nsw i64 %n1, %n0")
    store_mask = fn.value(f"icmp slt <{NB} x i64> <{', '.join(f'i64 {j}' for j in range(NB))}>, "
                          f"{_splat(fn, f'<{NB} x i64>', 'i64', last, NB)}")
    for i in range(mb):
        m = fn.add("%m0", i)
        put, skip = fn.label("put"), fn.label("skip")
        fn.emit(f"br i1 {fn.value(f'icmp slt i64 {m}, %m1')}, label %{put}, label %{skip}")
        fn.start_block(put)
        sums = _row_sums(fn, vec, [fn.value(f"load {vec.vt}, ptr {a}") for a in accs[i]])
        p = fn.at(ty, "%C", fn.mul(m, "%ldc"), "%n0")
        fn.emit(f"call void @llvm.masked.store.v{NB}f{b.size * 8}.p0(<{NB} x {ty}> {sums}, ptr {p}, "
                f"i32 {b.size}, <{NB} x i1> {store_mask})")
        fn.emit(f"br label %{skip}")
        fn.start_block(skip)
    fn.emit("ret void")
    return fn.text()


def _row_sums(fn: Fn, vec: Vec, accs: list) -> str:
    """The NB lane sums of the vectors ``accs`` as one NB-vector: halves of pairs added (one
    shuffle and add per level serves two or four sums), then within each quarter, rather
    than a full reduction of each vector."""
    V, vt = vec.V, vec.vt

    def pairs(a, b, width):           # lanes in runs of ``width``: a's runs then b's, summed
        runs = [(s, s + width) for s in range(0, V, 2 * width)]
        lo = [x for s, e in runs for x in range(s, e)] + [V + x for s, e in runs for x in range(s, e)]
        hi = [x + width for x in lo]
        mask = lambda idx: "<" + ", ".join(f"i32 {x}" for x in idx) + ">"
        x = fn.value(f"shufflevector {vt} {a}, {vt} {b}, <{V} x i32> {mask(lo)}")
        y = fn.value(f"shufflevector {vt} {a}, {vt} {b}, <{V} x i32> {mask(hi)}")
        return vec.op("fadd", x, y)
    s01, s23 = pairs(accs[0], accs[1], V // 2), pairs(accs[2], accs[3], V // 2)
    s = pairs(s01, s23, V // 4)        # quarters: accs[0]'s partial sums, accs[1]'s, ...
    g = V // 4
    while g > 1:                       # fold each quarter onto its first lane
        g //= 2
        idx = ", ".join(f"i32 {(x + g) % V}" for x in range(V))
        s = vec.op("fadd", s, fn.value(f"shufflevector {vt} {s}, {vt} poison, <{V} x i32> <{idx}>"))
    first = ", ".join(f"i32 {q * (V // 4)}" for q in range(NB))
    return fn.value(f"shufflevector {vt} {s}, {vt} poison, <{NB} x i32> <{first}>")


def _columns(name: str, tiles: list) -> str:
    """``name(n0, n1, <ARGS>)``: C's columns [n0, n1), NB at a time, each over A's rows in
    groups of each height of ``tiles`` ((rows, tile function), tallest first: 4, 2, 1),
    then the epilogue on the block (rows 0..M, those columns), from cache."""
    fn = Fn(f"define internal void @{name}(i64 %n0, i64 %n1, " +
            ", ".join(f"{t} %{a}" for a, t in zip(ARGS, TYPES)) + ") #0")
    operands = "i64 %K, ptr %A, i64 %lda, ptr %B, i64 %ldb, ptr %C, i64 %ldc"
    starts = ["0"]                      # where each height's groups begin: 0, 4 * (M / 4), ...
    for mb, _ in tiles[:-1]:
        rest = fn.value(f"sub nsw i64 %M, {starts[-1]}")
        starts.append(fn.add(starts[-1], fn.mul(fn.value(f"sdiv i64 {rest}, {mb}"), mb)))

    def per_step(n):
        for k, (mb, tile) in enumerate(tiles):
            stop = starts[k + 1] if k + 1 < len(tiles) else "%M"
            fn.loop(starts[k], stop, mb, lambda m, tile=tile: fn.emit(
                f"call void @{tile}(i64 {m}, i64 %M, i64 {n}, i64 %n1, {operands})"))
    fn.loop("%n0", "%n1", NB, per_step)
    epi, done = fn.label("epi"), fn.label("done")
    fn.emit(f"br i1 {fn.value('icmp ne ptr %epi, null')}, label %{epi}, label %{done}")
    fn.start_block(epi)
    fn.emit("call void %epi(ptr %epa, i64 0, i64 %M, i64 %n0, i64 %n1)")
    fn.emit(f"br label %{done}")
    fn.start_block(done)
    fn.emit("ret void")
    return fn.text()


def _worker(name: str, columns: str) -> str:
    """``name(ctx)``: thread t of T takes its range of whole steps of C's columns."""
    fn = Fn(f"define internal void @{name}(ptr %ctx) #0")
    vals = {a: fn.value(f"load {t}, ptr {fn.at('i64', '%ctx', str(k))}") for k, (a, t) in enumerate(zip(ARGS, TYPES))}
    tid = fn.value("sext i32 " + fn.value("call i32 @omp_get_thread_num()") + " to i64")
    nt = fn.value("sext i32 " + fn.value("call i32 @omp_get_num_threads()") + " to i64")
    steps = _ceil_div(fn, vals["N"], NB)
    per = fn.value(f"sdiv i64 {fn.add(steps, fn.value(f'sub nsw i64 {nt}, 1'))}, {nt}")
    lo = _min(fn, fn.mul(tid, per, NB), vals["N"])
    hi = _min(fn, fn.mul(fn.add(tid, 1), per, NB), vals["N"])
    go, out = fn.label("go"), fn.label("out")
    fn.emit(f"br i1 {fn.value(f'icmp slt i64 {lo}, {hi}')}, label %{go}, label %{out}")
    fn.start_block(go)
    fn.emit(f"call void @{columns}(i64 {lo}, i64 {hi}, " +
            ", ".join(f"{t} {vals[a]}" for a, t in zip(ARGS, TYPES)) + ")")
    fn.emit(f"br label %{out}")
    fn.start_block(out)
    fn.emit("ret void")
    return fn.text()


def skinny_text(b: Blocking, name: str, team_wanted, min_bytes: int) -> str:
    """The functions of this path for product ``name`` (internal): the entry
    ``name.skinny(<ARGS>, i64 now)`` runs the columns on the calling thread, or on the
    OpenMP team where B has at least ``min_bytes`` and ``team_wanted`` (gemm's rule: threads
    asked for, the kernels not kept serial) says so."""
    cols, work = f"{name}.skinny_columns", f"{name}.skinny_omp"
    tiles = [(mb, f"{name}.skinny_tile{mb}") for mb in (MB, 2, 1)]
    parts = [_tile(b, t, mb) for mb, t in tiles] + [_columns(cols, tiles), _worker(work, cols)]
    fn = Fn(f"define internal void @{name}.skinny(" +
            ", ".join(f"{t} %{a}" for a, t in zip(ARGS, TYPES)) + ", i64 %now) #0")
    ctx = fn.value(f"alloca [{len(ARGS)} x i64]")
    for k, (a, t) in enumerate(zip(ARGS, TYPES)):
        fn.emit(f"store {t} %{a}, ptr {fn.at('i64', ctx, str(k))}")
    size = fn.mul("%N", "%K", b.size)
    par, threads = team_wanted(fn, fn.value(f"icmp sge i64 {size}, {min_bytes}"), "%now")
    team, alone, out = fn.label("team"), fn.label("alone"), fn.label("out")
    fn.emit(f"br i1 {par}, label %{team}, label %{alone}")
    fn.start_block(team)
    fn.emit(f"call void @GOMP_parallel(ptr @{work}, ptr {ctx}, i32 {threads}, i32 0)")
    fn.emit(f"br label %{out}")
    fn.start_block(alone)
    fn.emit(f"call void @{work}(ptr {ctx})")
    fn.emit(f"br label %{out}")
    fn.start_block(out)
    fn.emit("ret void")
    parts.append(fn.text())
    return "\n".join(parts)
