"""``emit_llvm``: a loop-level program as textual LLVM IR.

Each ``PrimFunc`` ``k`` becomes three functions:

* ``@k.body(ptr noalias %buf..., i64 %dim..., i64 %lo, i64 %hi)`` — the loops; an outermost
  ``parallel`` loop runs only over ``[lo, hi)``;
* ``@k.omp(ptr %ctx)`` — an OpenMP worker that takes its share of the outer range;
* ``@k(ptr %args)`` — the entry: unpacks an array of i64 slots (buffer addresses, then dims)
  and runs the body serially or through ``GOMP_parallel`` when there is enough work.

Scalar ops are rendered from the table in ``scalar_ops`` (NumPy's semantics where C's
differ); statements, loops, loads and stores here.
"""
from __future__ import annotations

import copy

import numpy as np

from ...tir import BOOL, Assign, Const, For, If, Load, Local, Op, PrimFunc, Seq, Store, Var, from_sympy
from ...compile.mask_bounds import update_region
from ...tir.analysis import growing_input, inplace_input
from ...tir.index_checks import check_numbers
from .irtypes import fconst, is_float, llty, memty, suffix
from .scalar_ops import render_op


class _Fn:
    """SSA value and block naming for one LLVM function."""

    def __init__(self):
        self.lines: list[str] = []
        self.entry_allocas: list[str] = []
        self.n = 0
        self.block = "entry"

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def start_block(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def val(self, ty: str, instr: str) -> str:
        t = self.tmp()
        self.emit(f"{t} = {instr}")
        return t

    def if_(self, cond: str, then) -> None:
        """``if (cond) then()``; ``then`` emits into the branch (and may open blocks)."""
        yes, done = self.label("then"), self.label("endif")
        self.emit(f"br i1 {cond}, label %{yes}, label %{done}")
        self.start_block(yes)
        then()
        self.emit(f"br label %{done}")
        self.start_block(done)


# A worker of the OpenMP team that starts this many cycles (~0.3 ms) after the fork means
# another process holds the cores: the join waits for it, at ten times a kernel's cost when
# the machine is busy.  Kernels then stay on the calling thread for ``SERIAL_CYCLES`` (~50 ms)
# before they try the team again.
LATE_CYCLES = 1_000_000
SERIAL_CYCLES = 150_000_000


class KernelEmitter:
    # id(node) -> (node, value) for the statement being emitted: a node shared in the
    # statement's expression (FuseTIR shares a value read several times) is emitted once.
    # Only values emitted outside any lazy branch are kept, as only those dominate the
    # rest of the statement; None outside statements (host code between blocks).
    _shared: dict | None = None
    _lazy = 0
    may_alias: dict = {}        # input buffer name -> the output it may share memory with
    region = None               # (input, output) LLVM names of an in-place update's region body
    _clamp = None               # (inner loop, its first and end column) of a tile's body

    def __init__(self, f: PrimFunc, sym: str, tiles: bool = False):
        self.f = f
        self.sym = sym
        # also emit ``sym.tile(args, r0, r1, c0, c1)``: the program on rows [r0, r1) of its
        # outer loop and columns [c0, c1) of its inner one (a product's epilogue run on each
        # finished tile; ``epilogue.tile_fusable`` says which programs may)
        self.tiles = tiles
        self.math_used: set = set()
        self.helpers_used: set = set()
        # (id(access), axis) -> check number of indices read from data; when there are
        # any, the entry takes the error record's address after the dims (tir.index_checks)
        self.checks = check_numbers(f)
        self.locals: dict = {}
        self.nonneg_vars: set = set(f.dim_vars)          # sizes are never negative
        self._nonneg_memo: dict = {}

    # -- the whole kernel ------------------------------------------------------------
    def emit(self) -> str:
        f = self.f
        parallel = isinstance(f.body, For) and f.body.kind == "parallel"
        # positional LLVM names, so programs that differ only in names share machine code
        self.bufname = {b.name: f"%b{k}" for k, b in enumerate(f.params)}
        # an input the program may update in place shares the output's memory then: neither
        # is noalias, and a loop that only copies it into the output is skipped when the two
        # are one (scatter's first phase: x.at[i].set(v) in a loop costs O(1), not O(n))
        k = inplace_input(f)
        if k is None:                # or a concatenation onto an input whose block has room
            k = (growing_input(f) or (None,))[0]
        self.may_alias = {} if k is None else {f.inputs[k].name: f.outputs[0].name}
        shared = set(self.may_alias) | set(self.may_alias.values())
        bufs = ", ".join(f"ptr {'' if b.name in shared else 'noalias '}%b{k}" for k, b in enumerate(f.params))
        dims = "".join(f", i64 %d{k}" for k in range(len(f.dim_vars)))
        err = ", ptr %err" if self.checks else ""
        body = self._body_fn(f"{self.sym}.body", bufs + dims + err, parallel)
        parts = [body, self._omp_fn()]
        # an update run in place (its input and output one buffer) stores only the elements
        # it changes: the narrowed loops of ``update_region``, called instead of the body
        self.region = None
        if self.may_alias and not f.zero_outputs:
            (src, dst), = self.may_alias.items()
            named = {b.name: b for b in f.params}
            region = update_region(f, named[src], named[dst])
            if region is not None:
                self.region = (self.bufname[src], self.bufname[dst])
                whole, self.f = f, copy.copy(f)
                self.f.body = region
                parts.append(self._body_fn(f"{self.sym}.inplace", bufs + dims + err, False))
                self.f = whole
        if self.tiles:
            inner = f.body.body.stmts[0] if isinstance(f.body.body, Seq) else f.body.body
            self._clamp = (inner, "%c0", "%c1")
            parts.append(self._body_fn(f"{self.sym}.tilebody", bufs + dims + err + ", i64 %c0, i64 %c1", True))
            self._clamp = None
            parts.append(self._tile_fn())
        return "\n\n".join(parts + [self._entry_fn(parallel)])

    def _tile_fn(self) -> str:
        fn = self.fn = _Fn()
        vals = self._arg_list("%args", fn)
        fn.emit(f"call void @{self.sym}.tilebody({', '.join(vals)}, i64 %c0, i64 %c1, i64 %r0, i64 %r1)")
        fn.emit("ret void")
        return "\n".join([f"define internal void @{self.sym}.tile(ptr %args, i64 %r0, i64 %r1, i64 %c0, "
                          f"i64 %c1) {{\nentry:"] + fn.lines + ["}"])

    def _body_fn(self, name, params, parallel) -> str:
        fn = self.fn = _Fn()
        self.env: dict = {d: f"%d{k}" for k, d in enumerate(self.f.dim_vars)}
        self.locals: dict = {}
        self.strides: dict = {}
        for b in self.f.params:
            self.strides[b.name] = self._strides(b)
        if parallel:
            loop = self.f.body
            self._for(loop, lo="%lo", hi="%hi")
        else:
            self._stmt(self.f.body)
        fn.emit("ret void")
        head = f"define internal void @{name}({params}, i64 %lo, i64 %hi) #1 {{\nentry:"
        return "\n".join([head] + ["  " + a for a in fn.entry_allocas] + fn.lines + ["}"])

    def _strides(self, b) -> list:
        out, acc = [], None
        for d in reversed(b.shape):
            out.append(acc)
            e = self._expr(from_sympy(d))
            acc = e if acc is None else self.fn.val("i64", f"mul i64 {acc}, {e}")
        return list(reversed(out))

    def _arg_list(self, args_ptr: str, fn: _Fn) -> list:
        """Load buffer pointers and dims from the i64 slot array."""
        vals = []
        for k, b in enumerate(self.f.params):
            p = fn.val("ptr", f"getelementptr i64, ptr {args_ptr}, i64 {k}")
            vals.append("ptr " + fn.val("ptr", f"load ptr, ptr {p}"))
        for k, d in enumerate(self.f.dim_vars):
            p = fn.val("ptr", f"getelementptr i64, ptr {args_ptr}, i64 {len(self.f.params) + k}")
            vals.append("i64 " + fn.val("i64", f"load i64, ptr {p}"))
        if self.checks:
            p = fn.val("ptr", f"getelementptr i64, ptr {args_ptr}, i64 {len(self.f.params) + len(self.f.dim_vars)}")
            vals.append("ptr " + fn.val("ptr", f"load ptr, ptr {p}"))
        return vals

    def _omp_fn(self) -> str:
        """Each thread of the team takes chunks of the parallel loop from a shared counter
        (about four per thread), so a thread the OS has not yet scheduled leaves its share
        to the others; a worker that starts more than ``LATE_CYCLES`` after the fork marks
        the machine busy (``ctx[4]``)."""
        fn = _Fn()
        args = fn.val("ptr", "load ptr, ptr %ctx")
        n = fn.val("i64", f"load i64, ptr {fn.val('ptr', 'getelementptr i64, ptr %ctx, i64 1')}")
        start = fn.val("i64", f"load i64, ptr {fn.val('ptr', 'getelementptr i64, ptr %ctx, i64 2')}")
        counter = fn.val("ptr", "getelementptr i64, ptr %ctx, i64 3")
        late_flag = fn.val("ptr", "getelementptr i64, ptr %ctx, i64 4")
        tid = fn.val("i32", "call i32 @omp_get_thread_num()")
        nt = fn.val("i32", "call i32 @omp_get_num_threads()")
        now = fn.val("i64", "call i64 @llvm.readcyclecounter()")
        waited = fn.val("i64", f"sub i64 {now}, {start}")
        late = fn.val("i1", f"icmp ugt i64 {waited}, {LATE_CYCLES}")
        worker = fn.val("i1", f"icmp ne i32 {tid}, 0")
        mark = fn.val("i1", f"and i1 {late}, {worker}")
        fn.emit(f"br i1 {mark}, label %late, label %work")
        fn.start_block("late")
        fn.emit(f"store atomic i64 1, ptr {late_flag} monotonic, align 8")
        fn.emit("br label %work")
        fn.start_block("work")
        nt64 = fn.val("i64", f"sext i32 {nt} to i64")
        pieces = fn.val("i64", f"mul i64 {nt64}, 4")
        s = fn.val("i64", f"add i64 {n}, {pieces}")
        s = fn.val("i64", f"sub i64 {s}, 1")
        chunk = fn.val("i64", f"sdiv i64 {s}, {pieces}")
        chunk = fn.val("i64", f"call i64 @llvm.smax.i64(i64 {chunk}, i64 1)")
        vals = self._arg_list(args, fn)
        fn.emit("br label %next")
        fn.start_block("next")
        lo = fn.val("i64", f"atomicrmw add ptr {counter}, i64 {chunk} monotonic")
        more = fn.val("i1", f"icmp slt i64 {lo}, {n}")
        fn.emit(f"br i1 {more}, label %chunk, label %done")
        fn.start_block("chunk")
        hi = fn.val("i64", f"add i64 {lo}, {chunk}")
        hi = fn.val("i64", f"call i64 @llvm.smin.i64(i64 {hi}, i64 {n})")
        fn.emit(f"call void @{self.sym}.body({', '.join(vals)}, i64 {lo}, i64 {hi})")
        fn.emit("br label %next")
        fn.start_block("done")
        fn.emit("ret void")
        return "\n".join([f"define internal void @{self.sym}.omp(ptr %ctx) {{\nentry:"] + fn.lines + ["}"])

    def _entry_fn(self, parallel: bool) -> str:
        fn = self.fn = _Fn()
        vals = self._arg_list("%args", fn)
        self.env = {d: v.split()[1] for d, v in zip(self.f.dim_vars, vals[len(self.f.params):])
                    if v.startswith("i64")}
        if self.f.zero_outputs:
            self._zero_outputs(vals)
        if self.region is not None:
            src, dst = (vals[int(b[2:])].split()[1] for b in self.region)
            same, other = fn.label("inplace"), fn.label("copying")
            fn.emit(f"br i1 {fn.val('i1', f'icmp eq ptr {src}, {dst}')}, label %{same}, label %{other}")
            fn.start_block(same)
            fn.emit(f"call void @{self.sym}.inplace({', '.join(vals)}, i64 0, i64 0)")
            fn.emit("ret void")
            fn.start_block(other)
        if not parallel:
            fn.emit(f"call void @{self.sym}.body({', '.join(vals)}, i64 0, i64 0)")
            fn.emit("ret void")
        else:
            ext = self._entry_extent(vals)
            work = self._work()
            nthreads = fn.val("i32", "load i32, ptr @rj_num_threads")
            minwork = fn.val("i64", "load i64, ptr @rj_parallel_min_work")
            big = fn.val("i1", f"icmp sge i64 {work}, {minwork}")
            many = fn.val("i1", f"icmp sgt i64 {ext}, 1")
            multi = fn.val("i1", f"icmp ne i32 {nthreads}, 1")
            # a team whose worker started late (another process holds the cores) waits for
            # it at the join; for a while after, kernels stay on the calling thread
            now = fn.val("i64", "call i64 @llvm.readcyclecounter()")
            until = fn.val("i64", "load atomic i64, ptr @rj_serial_until monotonic, align 8")
            calm = fn.val("i1", f"icmp uge i64 {now}, {until}")
            go = fn.val("i1", f"and i1 {big}, {many}")
            go = fn.val("i1", f"and i1 {go}, {multi}")
            go = fn.val("i1", f"and i1 {go}, {calm}")
            fn.emit(f"br i1 {go}, label %par, label %ser")
            fn.start_block("ser")
            fn.emit(f"call void @{self.sym}.body({', '.join(vals)}, i64 0, i64 {ext})")
            fn.emit("ret void")
            fn.start_block("par")
            ctx = fn.val("ptr", "alloca [5 x i64]")
            fn.emit(f"store ptr %args, ptr {ctx}")
            for k, v in ((1, ext), (2, now), (3, "0"), (4, "0")):
                fn.emit(f"store i64 {v}, ptr {fn.val('ptr', f'getelementptr i64, ptr {ctx}, i64 {k}')}")
            fn.emit(f"call void @GOMP_parallel(ptr @{self.sym}.omp, ptr {ctx}, i32 {nthreads}, i32 0)")
            late = fn.val("i64", f"load i64, ptr {fn.val('ptr', f'getelementptr i64, ptr {ctx}, i64 4')}")
            busy = fn.val("i1", f"icmp ne i64 {late}, 0")
            fn.emit(f"br i1 {busy}, label %busy, label %joined")
            fn.start_block("busy")
            t = fn.val("i64", "call i64 @llvm.readcyclecounter()")
            t = fn.val("i64", f"add i64 {t}, {SERIAL_CYCLES}")
            fn.emit(f"store atomic i64 {t}, ptr @rj_serial_until monotonic, align 8")
            fn.emit("ret void")
            fn.start_block("joined")
            fn.emit("ret void")
        return "\n".join([f"define void @{self.sym}(ptr %args) {{\nentry:"] + fn.lines + ["}"])

    def _entry_extent(self, vals: list) -> str:
        """The parallel loop's extent, evaluated in the entry, where the buffers are the
        pointers ``vals`` loaded from the argument array (a trip count read from data,
        ``range(n[0])``, reads one of them; a bad index there is reported as in the body)."""
        fn = self.fn
        saved = self.bufname, self.strides, self.locals, self._shared
        self.bufname = {b.name: v.split()[1] for b, v in zip(self.f.params, vals)}
        self.strides = {b.name: self._strides(b) for b in self.f.params}
        self.locals, self._shared = {}, None
        if self.checks:
            fn.emit(f"%err = getelementptr i8, {vals[-1]}, i64 0")
        try:
            return self._expr(self.f.body.extent)
        finally:
            self.bufname, self.strides, self.locals, self._shared = saved

    def _zero_outputs(self, vals: list) -> None:
        """memset the outputs to 0 before the loops (``PrimFunc.zero_outputs``)."""
        fn, f = self.fn, self.f
        self.helpers_used.add("declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
        for k in range(len(f.params) - f.n_outputs, len(f.params)):
            b = f.params[k]
            size = str(np.dtype(b.dtype).itemsize)
            for d in b.shape:
                size = fn.val("i64", f"mul i64 {size}, {self._expr(from_sympy(d))}")
            fn.emit(f"call void @llvm.memset.p0.i64({vals[k]}, i8 0, i64 {size}, i1 false)")

    def _work(self) -> str:
        """Elements touched, a proxy for the run time that decides whether threads pay off."""
        total = "0"
        for b in self.f.params:
            size = "1"
            for d in b.shape:
                size = self.fn.val("i64", f"mul i64 {size}, {self._expr(from_sympy(d))}")
            total = self.fn.val("i64", f"add i64 {total}, {size}")
        return total

    # -- statements ----------------------------------------------------------------------
    def _stmt(self, s) -> None:
        fn = self.fn
        if isinstance(s, Seq):
            for x in s.stmts:
                self._stmt(x)
        elif isinstance(s, For):
            src = self._copy_source(s)
            if src is None:
                self._for(s)
                return
            dst = self.may_alias[src.name]
            copy, done = fn.label("copy"), fn.label("copied")
            apart = fn.val("i1", f"icmp ne ptr {self.bufname[src.name]}, {self.bufname[dst]}")
            fn.emit(f"br i1 {apart}, label %{copy}, label %{done}")
            fn.start_block(copy)
            self._for(s)
            fn.emit(f"br label %{done}")
            fn.start_block(done)
        elif isinstance(s, Store):
            self._shared = {}
            v = self._expr(s.value)
            if s.buffer.dtype == BOOL:
                v = fn.val("i8", f"zext i1 {v} to i8")
            ptr = self._addr(s.buffer, s.index, s)
            self._shared = None
            fn.emit(f"store {memty(s.buffer.dtype)} {v}, ptr {ptr}")
        elif isinstance(s, Local):
            slot = f"%l.{s.var.name}.{fn.n}"
            fn.n += 1
            fn.entry_allocas.append(f"{slot} = alloca {llty(s.var.dtype)}")
            self.locals[s.var.name] = (slot, llty(s.var.dtype))
            self._shared = {}
            fn.emit(f"store {llty(s.var.dtype)} {self._expr(s.init)}, ptr {slot}")
            self._shared = None
        elif isinstance(s, Assign):
            slot, ty = self.locals[s.var.name]
            self._shared = {}
            fn.emit(f"store {ty} {self._expr(s.value)}, ptr {slot}")
            self._shared = None
        elif isinstance(s, If):
            c = self._expr(s.cond)
            then, els, end = fn.label("then"), fn.label("else"), fn.label("endif")
            fn.emit(f"br i1 {c}, label %{then}, label %{els if s.else_ is not None else end}")
            fn.start_block(then)
            self._stmt(s.then)
            fn.emit(f"br label %{end}")
            if s.else_ is not None:
                fn.start_block(els)
                self._stmt(s.else_)
                fn.emit(f"br label %{end}")
            fn.start_block(end)
        else:
            raise TypeError(f"cannot emit {s!r}")

    def _copy_source(self, s: For):
        """The input buffer a loop nest only copies, element for element at the same index,
        into the output it may share memory with (``may_alias``); else None."""
        while isinstance(s, For):
            s = s.body
        if not (isinstance(s, Store) and isinstance(s.value, Load)):
            return None
        src = s.value.buffer
        if self.may_alias.get(src.name) != s.buffer.name or src.dtype != s.buffer.dtype or \
                len(s.index) != len(s.value.index) or \
                [str(d) for d in src.shape] != [str(d) for d in s.buffer.shape]:
            return None
        same = all((isinstance(a, Var) and isinstance(b, Var) and a.name == b.name) or
                   (isinstance(a, Const) and isinstance(b, Const) and a.value == b.value)
                   for a, b in zip(s.index, s.value.index))
        return src if same else None

    def _for(self, s: For, lo: str | None = None, hi: str | None = None) -> None:
        fn = self.fn
        if self._clamp is not None and s is self._clamp[0]:
            lo, hi = self._clamp[1:]
        start = self._expr(s.start)
        ext = self._expr(s.extent)
        if lo is not None:
            start = fn.val("i64", f"call i64 @llvm.smax.i64(i64 {start}, i64 {lo})")
            ext = fn.val("i64", f"call i64 @llvm.smin.i64(i64 {ext}, i64 {hi})")
        pre = fn.block
        head, body, latch, done = fn.label("for"), fn.label("body"), fn.label("latch"), fn.label("done")
        fn.emit(f"br label %{head}")
        fn.start_block(head)
        i = f"%{s.var.name}.{fn.n}"
        fn.n += 1
        nxt = fn.tmp()
        fn.emit(f"{i} = phi i64 [ {start}, %{pre} ], [ {nxt}, %{latch} ]")
        c = fn.val("i1", f"icmp slt i64 {i}, {ext}")
        fn.emit(f"br i1 {c}, label %{body}, label %{done}")
        fn.start_block(body)
        saved = self.env.get(s.var.name)
        self.env[s.var.name] = i
        counts_up = self._nonneg(s.start)
        if counts_up:
            self.nonneg_vars.add(s.var.name)
        self._stmt(s.body)
        fn.emit(f"br label %{latch}")
        fn.start_block(latch)
        fn.emit(f"{nxt} = add nsw i64 {i}, 1")
        fn.emit(f"br label %{head}")
        fn.start_block(done)
        if counts_up:
            self.nonneg_vars.discard(s.var.name)
        if saved is None:
            del self.env[s.var.name]
        else:
            self.env[s.var.name] = saved

    def _addr(self, b, index, node=None) -> str:
        fn = self.fn
        lin = None
        for ax, (i, st) in enumerate(zip(index, self.strides[b.name])):
            v = self._expr(i)
            k = self.checks.get((id(node), ax))
            if k is not None:
                self._check_index(v, self._expr(from_sympy(b.shape[ax])), k)
            if st is not None:
                v = fn.val("i64", f"mul nsw i64 {v}, {st}")
            lin = v if lin is None else fn.val("i64", f"add nsw i64 {lin}, {v}")
        lin = lin or "0"
        return fn.val("ptr", f"getelementptr inbounds {memty(b.dtype)}, ptr {self.bufname[b.name]}, i64 {lin}")

    def _check_index(self, v: str, n: str, k: int) -> None:
        """``v`` in [0, n), else the first failing access fills the error record and the
        body returns (the other chunks of a parallel loop finish; the caller raises)."""
        fn = self.fn
        bad = fn.val("i1", f"icmp uge i64 {v}, {n}")
        oob, ok, leave = fn.label("oob"), fn.label("inb"), fn.label("oobret")
        fn.emit(f"br i1 {bad}, label %{oob}, label %{ok}")
        fn.start_block(oob)
        won = fn.val("{ i64, i1 }", f"cmpxchg ptr %err, i64 0, i64 {k + 1} monotonic monotonic")
        won = fn.val("i1", f"extractvalue {{ i64, i1 }} {won}, 1")
        rec = fn.label("oobrec")
        fn.emit(f"br i1 {won}, label %{rec}, label %{leave}")
        fn.start_block(rec)
        fn.emit(f"store i64 {v}, ptr {fn.val('ptr', 'getelementptr i64, ptr %err, i64 1')}")
        fn.emit(f"store i64 {n}, ptr {fn.val('ptr', 'getelementptr i64, ptr %err, i64 2')}")
        fn.emit(f"br label %{leave}")
        fn.start_block(leave)
        fn.emit("ret void")
        fn.start_block(ok)

    # -- expressions ---------------------------------------------------------------------
    def _expr(self, e) -> str:
        fn = self.fn
        if isinstance(e, Const):
            return self._const(e.value, e.dtype)
        if isinstance(e, Var):
            if e.name in self.locals:
                slot, ty = self.locals[e.name]
                return fn.val(ty, f"load {ty}, ptr {slot}")
            return self.env[e.name]
        shared = self._shared
        if shared is not None:
            hit = shared.get(id(e))
            if hit is not None and hit[0] is e:
                return hit[1]
        if isinstance(e, Load):
            ptr = self._addr(e.buffer, e.index, e)
            v = fn.val("", f"load {memty(e.dtype)}, ptr {ptr}")
            if e.dtype == BOOL:
                v = fn.val("i1", f"icmp ne i8 {v}, 0")
        else:
            assert isinstance(e, Op), e
            if e.name == "if_then_else":
                v = self._if_then_else(e)
            else:
                v = self._op(e, [self._expr(a) for a in e.args])
        if shared is not None and not self._lazy:
            shared[id(e)] = (e, v)
        return v

    def _const(self, v, dtype) -> str:
        ty = llty(dtype)
        if dtype == BOOL:
            return "true" if v else "false"
        if is_float(dtype):
            return fconst(float(v), ty)
        # LLVM spells integers signed; an unsigned value is written as its bit pattern
        return str(int(np.array(int(v)).astype(dtype).view(f"i{np.dtype(dtype).itemsize}")))

    def _if_then_else(self, e: Op) -> str:
        fn = self.fn
        c = self._expr(e.args[0])
        a, b, end = fn.label("ite_a"), fn.label("ite_b"), fn.label("ite_end")
        fn.emit(f"br i1 {c}, label %{a}, label %{b}")
        self._lazy += 1                  # values emitted in a branch dominate only its rest
        fn.start_block(a)
        va = self._expr(e.args[1])
        ba = fn.block
        fn.emit(f"br label %{end}")
        fn.start_block(b)
        vb = self._expr(e.args[2])
        bb = fn.block
        self._lazy -= 1
        fn.emit(f"br label %{end}")
        fn.start_block(end)
        return fn.val("", f"phi {llty(e.dtype)} [ {va}, %{ba} ], [ {vb}, %{bb} ]")

    def _op(self, e: Op, args: list) -> str:
        return render_op(self, e, args)

    def operands_nonneg(self, e: Op) -> bool:
        """Every operand of ``e`` is >= 0 (the renderers of / and % emit unsigned division
        then, a fifth of NumPy's floor semantics for signed values)."""
        return all(self._nonneg(a) for a in e.args)

    def _nonneg(self, e) -> bool:
        """``e`` is >= 0: built from non-negative constants, dims and loop counters that
        start at >= 0, by + * // % min (max: either operand)."""
        if isinstance(e, Const):
            return not is_float(e.dtype) and int(e.value) >= 0
        if isinstance(e, Var):
            return e.name in self.nonneg_vars and e.name not in self.locals
        if isinstance(e, Op):
            hit = self._nonneg_memo.get(id(e))
            if hit is not None and hit[0] is e:
                return hit[1]
            if e.name in ("add", "mul", "floor_div", "rem", "min"):
                r = all(self._nonneg(a) for a in e.args)
            elif e.name == "max":
                r = any(self._nonneg(a) for a in e.args)
            else:
                r = False
            self._nonneg_memo[id(e)] = (e, r)
            return r
        return False


# ---------------------------------------------------------------------------------------
# Helper functions emitted once per module
# ---------------------------------------------------------------------------------------

def helper_source(h) -> str:
    if isinstance(h, str):
        return h
    kind, ty = h
    if kind == "ipow":
        # NumPy's integer power: square-and-multiply, wrapping; a negative exponent gives 0
        # here (NumPy raises; that check happens before the kernel runs in eager mode only).
        return f"""define internal {ty} @rj.ipow.{ty}({ty} %a, {ty} %b) alwaysinline {{
entry:
  br label %loop
loop:
  %r = phi {ty} [ 1, %entry ], [ %r2, %next ]
  %x = phi {ty} [ %a, %entry ], [ %x2, %next ]
  %e = phi {ty} [ %b, %entry ], [ %e2, %next ]
  %more = icmp sgt {ty} %e, 0
  br i1 %more, label %step, label %out
step:
  %bit = and {ty} %e, 1
  %odd = icmp ne {ty} %bit, 0
  %rm = mul {ty} %r, %x
  %r2 = select i1 %odd, {ty} %rm, {ty} %r
  %x2 = mul {ty} %x, %x
  %e2 = ashr {ty} %e, 1
  br label %next
next:
  br label %loop
out:
  ret {ty} %r
}}"""
    # float floor division and modulo, as NumPy's npy_divmod
    z, one, half = (fconst(0.0, ty), fconst(1.0, ty), fconst(0.5, ty))
    fl = suffix(ty)
    if kind == "floor_div":
        return f"""define internal {ty} @rj.floor_div.{ty}({ty} %a, {ty} %b) alwaysinline {{
entry:
  %bz = fcmp oeq {ty} %b, {z}
  br i1 %bz, label %byzero, label %go
byzero:
  %q0 = fdiv {ty} %a, %b
  ret {ty} %q0
go:
  %mod = frem {ty} %a, %b
  %am = fsub {ty} %a, %mod
  %div = fdiv {ty} %am, %b
  %mnz = fcmp une {ty} %mod, {z}
  %bneg = fcmp olt {ty} %b, {z}
  %mneg = fcmp olt {ty} %mod, {z}
  %diff = xor i1 %bneg, %mneg
  %adj = and i1 %mnz, %diff
  %div1 = fsub {ty} %div, {one}
  %d = select i1 %adj, {ty} %div1, {ty} %div
  %dnz = fcmp une {ty} %d, {z}
  %fd = call {ty} @llvm.floor.{fl}({ty} %d)
  %fr = fsub {ty} %d, %fd
  %up = fcmp ogt {ty} %fr, {half}
  %fd1 = fadd {ty} %fd, {one}
  %fdr = select i1 %up, {ty} %fd1, {ty} %fd
  %q = fdiv {ty} %a, %b
  %sz = call {ty} @llvm.copysign.{fl}({ty} {z}, {ty} %q)
  %res = select i1 %dnz, {ty} %fdr, {ty} %sz
  ret {ty} %res
}}
declare {ty} @llvm.floor.{fl}({ty})
declare {ty} @llvm.copysign.{fl}({ty}, {ty})"""
    if kind == "rem":
        return f"""define internal {ty} @rj.rem.{ty}({ty} %a, {ty} %b) alwaysinline {{
entry:
  %mod = frem {ty} %a, %b
  %bz = fcmp oeq {ty} %b, {z}
  br i1 %bz, label %byzero, label %go
byzero:
  ret {ty} %mod
go:
  %mnz = fcmp une {ty} %mod, {z}
  %bneg = fcmp olt {ty} %b, {z}
  %mneg = fcmp olt {ty} %mod, {z}
  %diff = xor i1 %bneg, %mneg
  %adj = and i1 %mnz, %diff
  %m2 = fadd {ty} %mod, %b
  %m = select i1 %adj, {ty} %m2, {ty} %mod
  %sz = call {ty} @llvm.copysign.{fl}({ty} {z}, {ty} %b)
  %res = select i1 %mnz, {ty} %m, {ty} %sz
  ret {ty} %res
}}
declare {ty} @llvm.copysign.{fl}({ty}, {ty})"""
    raise KeyError(h)
