"""``emit_llvm``: a loop-level program as textual LLVM IR.

Each ``PrimFunc`` ``k`` becomes three functions:

* ``@k.body(ptr noalias %buf..., i64 %dim..., i64 %lo, i64 %hi)`` — the loops; an outermost
  ``parallel`` loop runs only over ``[lo, hi)``;
* ``@k.omp(ptr %ctx)`` — an OpenMP worker that takes its share of the outer range;
* ``@k(ptr %args)`` — the entry: unpacks an array of i64 slots (buffer addresses, then dims)
  and runs the body serially or through ``GOMP_parallel`` when there is enough work.

NumPy's semantics are kept where C's differ: integer division and modulo floor (and give 0
for a zero divisor), shifts past the bit width give 0 (or -1), max/min propagate NaN,
float-to-int conversions saturate instead of being undefined.
"""
from __future__ import annotations

import numpy as np

from ... import tir
from ...tir import (BOOL, Assign, Const, For, If, Load, Local, Op, PrimFunc, Seq,
                            Store, Var, from_sympy)
from . import mathlib

_TY = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "i8",
       "uint16": "i16", "uint32": "i32", "uint64": "i64", "float16": "half", "float32": "float",
       "float64": "double"}
_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
_FLOAT_RANK = {"half": 0, "float": 1, "double": 2}


def llty(dtype) -> str:
    return _TY[np.dtype(dtype).name]


def memty(dtype) -> str:
    """Type in memory: NumPy stores bool as a byte."""
    return "i8" if np.dtype(dtype) == BOOL else llty(dtype)


def _is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def _signed(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def _fconst(v: float, ty: str) -> str:
    """LLVM spells non-trivial float constants as 64-bit hex; half as its own bits."""
    if ty == "half":
        return "0xH%04X" % int(np.array(v, np.float16).view(np.uint16))
    if ty == "float":
        v = float(np.float32(v))
    return "0x%016X" % int(np.array(v, np.float64).view(np.uint64))


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


class KernelEmitter:
    def __init__(self, f: PrimFunc, sym: str):
        self.f = f
        self.sym = sym
        self.math_used: set = set()
        self.helpers_used: set = set()

    # -- the whole kernel ------------------------------------------------------------
    def emit(self) -> str:
        f = self.f
        parallel = isinstance(f.body, For) and f.body.kind == "parallel"
        # positional LLVM names, so programs that differ only in names share machine code
        self.bufname = {b.name: f"%b{k}" for k, b in enumerate(f.params)}
        bufs = ", ".join(f"ptr noalias %b{k}" for k in range(len(f.params)))
        dims = "".join(f", i64 %d{k}" for k in range(len(f.dim_vars)))
        body = self._body_fn(f"{self.sym}.body", bufs + dims, parallel)
        return "\n\n".join([body, self._omp_fn(), self._entry_fn(parallel)])

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
        return vals

    def _omp_fn(self) -> str:
        fn = _Fn()
        args = fn.val("ptr", "load ptr, ptr %ctx")
        p = fn.val("ptr", "getelementptr i64, ptr %ctx, i64 1")
        n = fn.val("i64", f"load i64, ptr {p}")
        tid = fn.val("i64", "call i32 @omp_get_thread_num()")
        nt = fn.val("i32", "call i32 @omp_get_num_threads()")
        tid64 = fn.val("i64", f"sext i32 {tid} to i64")
        nt64 = fn.val("i64", f"sext i32 {nt} to i64")
        s = fn.val("i64", f"add i64 {n}, {nt64}")
        s = fn.val("i64", f"sub i64 {s}, 1")
        chunk = fn.val("i64", f"sdiv i64 {s}, {nt64}")
        lo = fn.val("i64", f"mul i64 {tid64}, {chunk}")
        hi = fn.val("i64", f"add i64 {lo}, {chunk}")
        hi = fn.val("i64", f"call i64 @llvm.smin.i64(i64 {hi}, i64 {n})")
        vals = self._arg_list(args, fn)
        fn.emit(f"call void @{self.sym}.body({', '.join(vals)}, i64 {lo}, i64 {hi})")
        fn.emit("ret void")
        return "\n".join([f"define internal void @{self.sym}.omp(ptr %ctx) {{\nentry:"] + fn.lines + ["}"])

    def _entry_fn(self, parallel: bool) -> str:
        fn = self.fn = _Fn()
        vals = self._arg_list("%args", fn)
        self.env = {d: v.split()[1] for d, v in zip(self.f.dim_vars, vals[len(self.f.params):])}
        if not parallel:
            fn.emit(f"call void @{self.sym}.body({', '.join(vals)}, i64 0, i64 0)")
            fn.emit("ret void")
        else:
            ext = self._expr(self.f.body.extent)
            work = self._work()
            nthreads = fn.val("i32", "load i32, ptr @rj_num_threads")
            minwork = fn.val("i64", "load i64, ptr @rj_parallel_min_work")
            big = fn.val("i1", f"icmp sge i64 {work}, {minwork}")
            many = fn.val("i1", f"icmp sgt i64 {ext}, 1")
            multi = fn.val("i1", f"icmp ne i32 {nthreads}, 1")
            go = fn.val("i1", f"and i1 {big}, {many}")
            go = fn.val("i1", f"and i1 {go}, {multi}")
            fn.emit(f"br i1 {go}, label %par, label %ser")
            fn.start_block("ser")
            fn.emit(f"call void @{self.sym}.body({', '.join(vals)}, i64 0, i64 {ext})")
            fn.emit("ret void")
            fn.start_block("par")
            ctx = fn.val("ptr", "alloca [2 x i64]")
            fn.emit(f"store ptr %args, ptr {ctx}")
            p = fn.val("ptr", f"getelementptr i64, ptr {ctx}, i64 1")
            fn.emit(f"store i64 {ext}, ptr {p}")
            fn.emit(f"call void @GOMP_parallel(ptr @{self.sym}.omp, ptr {ctx}, i32 {nthreads}, i32 0)")
            fn.emit("ret void")
        return "\n".join([f"define void @{self.sym}(ptr %args) {{\nentry:"] + fn.lines + ["}"])

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
            self._for(s)
        elif isinstance(s, Store):
            v = self._expr(s.value)
            if s.buffer.dtype == BOOL:
                v = fn.val("i8", f"zext i1 {v} to i8")
            ptr = self._addr(s.buffer, s.index)
            fn.emit(f"store {memty(s.buffer.dtype)} {v}, ptr {ptr}")
        elif isinstance(s, Local):
            slot = f"%l.{s.var.name}.{fn.n}"
            fn.n += 1
            fn.entry_allocas.append(f"{slot} = alloca {llty(s.var.dtype)}")
            self.locals[s.var.name] = (slot, llty(s.var.dtype))
            fn.emit(f"store {llty(s.var.dtype)} {self._expr(s.init)}, ptr {slot}")
        elif isinstance(s, Assign):
            slot, ty = self.locals[s.var.name]
            fn.emit(f"store {ty} {self._expr(s.value)}, ptr {slot}")
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

    def _for(self, s: For, lo: str | None = None, hi: str | None = None) -> None:
        fn = self.fn
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
        self._stmt(s.body)
        fn.emit(f"br label %{latch}")
        fn.start_block(latch)
        fn.emit(f"{nxt} = add nsw i64 {i}, 1")
        fn.emit(f"br label %{head}")
        fn.start_block(done)
        if saved is None:
            del self.env[s.var.name]
        else:
            self.env[s.var.name] = saved

    def _addr(self, b, index) -> str:
        fn = self.fn
        lin = None
        for i, st in zip(index, self.strides[b.name]):
            v = self._expr(i)
            if st is not None:
                v = fn.val("i64", f"mul nsw i64 {v}, {st}")
            lin = v if lin is None else fn.val("i64", f"add nsw i64 {lin}, {v}")
        lin = lin or "0"
        return fn.val("ptr", f"getelementptr inbounds {memty(b.dtype)}, ptr {self.bufname[b.name]}, i64 {lin}")

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
        if isinstance(e, Load):
            ptr = self._addr(e.buffer, e.index)
            v = fn.val("", f"load {memty(e.dtype)}, ptr {ptr}")
            if e.dtype == BOOL:
                v = fn.val("i1", f"icmp ne i8 {v}, 0")
            return v
        assert isinstance(e, Op), e
        if e.name == "if_then_else":
            return self._if_then_else(e)
        args = [self._expr(a) for a in e.args]
        return self._op(e, args)

    def _const(self, v, dtype) -> str:
        ty = llty(dtype)
        if dtype == BOOL:
            return "true" if v else "false"
        if _is_float(dtype):
            return _fconst(float(v), ty)
        # LLVM spells integers signed; an unsigned value is written as its bit pattern
        return str(int(np.array(int(v)).astype(dtype).view(f"i{np.dtype(dtype).itemsize}")))

    def _if_then_else(self, e: Op) -> str:
        fn = self.fn
        c = self._expr(e.args[0])
        a, b, end = fn.label("ite_a"), fn.label("ite_b"), fn.label("ite_end")
        fn.emit(f"br i1 {c}, label %{a}, label %{b}")
        fn.start_block(a)
        va = self._expr(e.args[1])
        ba = fn.block
        fn.emit(f"br label %{end}")
        fn.start_block(b)
        vb = self._expr(e.args[2])
        bb = fn.block
        fn.emit(f"br label %{end}")
        fn.start_block(end)
        return fn.val("", f"phi {llty(e.dtype)} [ {va}, %{ba} ], [ {vb}, %{bb} ]")

    def _op(self, e: Op, args: list) -> str:
        fn = self.fn
        name = e.name
        src = e.args[0].dtype
        ty, sty = llty(e.dtype), llty(src)
        flt, sgn = _is_float(src), _signed(src)
        fm = " reassoc" if "reassoc" in e.flags and flt else ""

        def v(instr):
            return fn.val(ty, instr)

        if name == "convert":
            return self._convert(args[0], src, e.dtype)
        if name in ("add", "sub", "mul") and src == BOOL:
            name = {"add": "or", "mul": "and", "sub": "xor"}[name]
        if name in ("add", "sub", "mul"):
            return v(f"{'f' if flt else ''}{name}{fm} {ty} {args[0]}, {args[1]}")
        if name == "div":
            return v(f"fdiv {ty} {args[0]}, {args[1]}")
        if name in ("floor_div", "rem"):
            return self._floor_div_rem(name, args, src)
        if name in ("and", "or", "xor"):
            return v(f"{name} {ty} {args[0]}, {args[1]}")
        if name in ("max", "min"):
            if src == BOOL:
                return v(f"{'or' if name == 'max' else 'and'} i1 {args[0]}, {args[1]}")
            intr = (f"llvm.{name}imum" if flt else f"llvm.{'s' if sgn else 'u'}{name}") + f".{_suffix(sty)}"
            self.helpers_used.add(f"declare {ty} @{intr}({ty}, {ty})")
            return v(f"call{fm} {ty} @{intr}({ty} {args[0]}, {ty} {args[1]})")
        if name in ("eq", "ne", "lt", "le", "gt", "ge"):
            if flt:
                pred = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}[name]
                return v(f"fcmp {pred} {sty} {args[0]}, {args[1]}")
            pred = {"eq": "eq", "ne": "ne"}.get(name) or ("s" if sgn else "u") + name[0] + ("t" if name[1] == "t" else "e")
            return v(f"icmp {pred} {sty} {args[0]}, {args[1]}")
        if name == "select":
            return v(f"select i1 {args[0]}, {ty} {args[1]}, {ty} {args[2]}")
        if name == "neg":
            return v(f"fneg {ty} {args[0]}") if flt else v(f"sub {ty} 0, {args[0]}")
        if name == "not":
            return v(f"xor {ty} {args[0]}, {'true' if src == BOOL else -1}")
        if name == "abs":
            if flt:
                return self._intrinsic("fabs", ty, args)
            if not sgn:
                return args[0]
            self.helpers_used.add(f"declare {ty} @llvm.abs.{ty}({ty}, i1)")
            return v(f"call {ty} @llvm.abs.{ty}({ty} {args[0]}, i1 false)")
        if name == "sign":
            zero, one, m1 = self._const(0, src), self._const(1, src), self._const(-1, src) if sgn or flt else "0"
            gt = fn.val("i1", f"{'fcmp ogt' if flt else ('icmp sgt' if sgn else 'icmp ugt')} {ty} {args[0]}, {zero}")
            lt = fn.val("i1", f"{'fcmp olt' if flt else 'icmp slt'} {ty} {args[0]}, {zero}") if sgn or flt else "false"
            rest = v(f"select i1 {lt}, {ty} {m1}, {ty} {args[0] if flt else zero}")
            return v(f"select i1 {gt}, {ty} {one}, {ty} {rest}")
        if name in ("floor", "ceil", "trunc", "round"):
            if not flt:
                return args[0]
            return self._intrinsic({"round": "roundeven"}.get(name, name), ty, args)
        if name == "sqrt":
            return self._intrinsic("sqrt", ty, args)
        if name == "reciprocal":
            if flt:
                return v(f"fdiv {ty} {self._const(1, src)}, {args[0]}")
            return self._floor_div_rem("trunc_div", [self._const(1, src), args[0]], src)
        if name == "is_nan":
            return v(f"fcmp uno {sty} {args[0]}, {args[0]}") if flt else "false"
        if name in ("is_inf", "is_finite"):
            if not flt:
                return "false" if name == "is_inf" else "true"
            a = self._intrinsic("fabs", sty, args)
            inf = _fconst(float("inf"), sty)
            return v(f"fcmp {'oeq' if name == 'is_inf' else 'olt'} {sty} {a}, {inf}")
        if name in ("shift_left", "shift_right"):
            bits = _BITS[ty]
            inr = fn.val("i1", f"icmp ult {ty} {args[1]}, {bits}")
            if name == "shift_left":
                sh = v(f"shl {ty} {args[0]}, {args[1]}")
                return v(f"select i1 {inr}, {ty} {sh}, {ty} 0")
            sh = v(f"{'ashr' if sgn else 'lshr'} {ty} {args[0]}, {args[1]}")
            if sgn:
                neg = fn.val("i1", f"icmp slt {ty} {args[0]}, 0")
                out = v(f"select i1 {neg}, {ty} -1, {ty} 0")
            else:
                out = "0"
            return v(f"select i1 {inr}, {ty} {sh}, {ty} {out}")
        if name == "pow" and not flt:
            self.helpers_used.add(("ipow", ty))
            return v(f"call {ty} @rj.ipow.{ty}({ty} {args[0]}, {ty} {args[1]})")
        if name in mathlib.MATH:
            return self._math(name, ty, args)
        raise NotImplementedError(f"the LLVM backend has no lowering for {name!r} on {src}")

    def _intrinsic(self, name, ty, args) -> str:
        self.helpers_used.add(f"declare {ty} @llvm.{name}.{_suffix(ty)}({', '.join([ty] * len(args))})")
        return self.fn.val(ty, f"call {ty} @llvm.{name}.{_suffix(ty)}({', '.join(f'{ty} {a}' for a in args)})")

    def _math(self, name, ty, args) -> str:
        fn = self.fn
        work = ty if ty != "half" else "float"        # half math runs in float, then rounds
        if ty == "half":
            args = [fn.val("float", f"fpext half {a} to float") for a in args]
        self.math_used.add((name, work))
        sym = mathlib.libm_name(name, work)
        r = fn.val(work, f"call {work} @{sym}({', '.join(f'{work} {a}' for a in args)})")
        if ty == "half":
            r = fn.val("half", f"fptrunc float {r} to half")
        return r

    def _convert(self, x: str, src, dst) -> str:
        fn = self.fn
        s, d = llty(src), llty(dst)
        if src == dst:
            return x
        if dst == BOOL:
            return fn.val("i1", f"fcmp une {s} {x}, 0.0") if _is_float(src) else \
                fn.val("i1", f"icmp ne {s} {x}, 0")
        if _is_float(src) and _is_float(dst):
            if s == d:
                return x
            op = "fpext" if _FLOAT_RANK[d] > _FLOAT_RANK[s] else "fptrunc"
            return fn.val(d, f"{op} {s} {x} to {d}")
        if _is_float(dst):
            op = "sitofp" if _signed(src) else "uitofp"
            return fn.val(d, f"{op} {s} {x} to {d}")
        if _is_float(src):
            # NumPy (C on x86) converts through a wide integer and wraps: -1.0 -> uint8 255.
            # Saturating conversions keep out-of-range values defined (C leaves them undefined).
            intr = f"llvm.fptosi.sat.i64.{_suffix(s)}"
            self.helpers_used.add(f"declare i64 @{intr}({s})")
            wide = fn.val("i64", f"call i64 @{intr}({s} {x})")
            if np.dtype(dst) == np.dtype("uint64"):
                intr_u = f"llvm.fptoui.sat.i64.{_suffix(s)}"
                self.helpers_used.add(f"declare i64 @{intr_u}({s})")
                u = fn.val("i64", f"call i64 @{intr_u}({s} {x})")
                big = fn.val("i1", f"fcmp oge {s} {x}, {_fconst(2.0 ** 63, s)}")
                wide = fn.val("i64", f"select i1 {big}, i64 {u}, i64 {wide}")
            return wide if d == "i64" else fn.val(d, f"trunc i64 {wide} to {d}")
        bs, bd = _BITS[s], _BITS[d]
        if bs == bd:
            return x
        if bd < bs:
            return fn.val(d, f"trunc {s} {x} to {d}")
        return fn.val(d, f"{'sext' if _signed(src) else 'zext'} {s} {x} to {d}")

    def _floor_div_rem(self, name, args, dtype) -> str:
        """NumPy's floor division and modulo (and C's truncating division for reciprocal)."""
        fn = self.fn
        ty = llty(dtype)
        a, b = args
        if _is_float(dtype):
            self.helpers_used.add((name, ty))
            return fn.val(ty, f"call {ty} @rj.{name}.{ty}({ty} {a}, {ty} {b})")
        if dtype == BOOL:
            raise NotImplementedError(f"{name} on bool")
        zero = fn.val("i1", f"icmp eq {ty} {b}, 0")
        if not _signed(dtype):
            safe = fn.val(ty, f"select i1 {zero}, {ty} 1, {ty} {b}")
            r = fn.val(ty, f"{'urem' if name == 'rem' else 'udiv'} {ty} {a}, {safe}")
            return fn.val(ty, f"select i1 {zero}, {ty} 0, {ty} {r}")
        # a divisor of -1 would overflow on INT_MIN: divide by 1 and negate (wrapping) instead
        m1 = fn.val("i1", f"icmp eq {ty} {b}, -1")
        bad = fn.val("i1", f"or i1 {zero}, {m1}")
        safe = fn.val(ty, f"select i1 {bad}, {ty} 1, {ty} {b}")
        q = fn.val(ty, f"sdiv {ty} {a}, {safe}")
        r = fn.val(ty, f"srem {ty} {a}, {safe}")
        if name == "trunc_div":
            q = fn.val(ty, f"select i1 {m1}, {ty} {fn.val(ty, f'sub {ty} 0, {a}')}, {ty} {q}")
            return fn.val(ty, f"select i1 {zero}, {ty} 0, {ty} {q}")
        rnz = fn.val("i1", f"icmp ne {ty} {r}, 0")
        rneg = fn.val("i1", f"icmp slt {ty} {r}, 0")
        bneg = fn.val("i1", f"icmp slt {ty} {b}, 0")
        diff = fn.val("i1", f"xor i1 {rneg}, {bneg}")
        adj = fn.val("i1", f"and i1 {rnz}, {diff}")
        if name == "rem":
            r2 = fn.val(ty, f"add {ty} {r}, {safe}")
            r = fn.val(ty, f"select i1 {adj}, {ty} {r2}, {ty} {r}")
            return fn.val(ty, f"select i1 {bad}, {ty} 0, {ty} {r}")
        q2 = fn.val(ty, f"sub {ty} {q}, 1")
        q = fn.val(ty, f"select i1 {adj}, {ty} {q2}, {ty} {q}")
        q = fn.val(ty, f"select i1 {m1}, {ty} {fn.val(ty, f'sub {ty} 0, {a}')}, {ty} {q}")
        return fn.val(ty, f"select i1 {zero}, {ty} 0, {ty} {q}")


def _suffix(ty: str) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}.get(ty, ty)


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
    z, one, half = (_fconst(0.0, ty), _fconst(1.0, ty), _fconst(0.5, ty))
    fl = _suffix(ty)
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
