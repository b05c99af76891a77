"""``emit_cuda``: a loop-level program as CUDA C kernels, plus how to launch them.

A program's top-level statements become *phases*, each one ``__global__`` function launched
in order (a launch boundary is the only grid-wide barrier).  Each phase is mapped by its
loop kinds, and every mapping uses grid-stride loops, so one launch configuration computed
on the host from the dim values fits any size:

* ``grid``: a nest of ``parallel``/``vectorized`` loops around straight-line code (an
  elementwise or injective program) is flattened; each thread takes elements
  ``g, g + gridDim*blockDim, ...``.
* ``rows``: ``parallel`` loops around a *row body* that the threads of a block can share:
  local scalars every thread keeps alike, independent (``vectorized``) loops split across
  the block, and ``reduction`` loop nests whose accumulators are only combined (``acc =
  acc + e``, max, min, ...): each thread folds its share from the identity, then
  ``rj_block_reduce`` (warp shuffles and shared memory) combines the block's partials with
  the accumulator's initial value.  One block per row: softmax, layer norm, sums.
* ``threads``: rows whose body cannot be shared (argmax's paired accumulators, serial
  loops, or reductions over a strided axis): one thread per row.
* ``single``: a program with no parallel loop whose body cannot be shared: one thread.

Semantics follow the LLVM backend (NumPy's): see ``prelude.PRELUDE``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...tir import (BOOL, INDEX, Assign, Const, For, If, Load, Local, Op, PrimFunc, Seq, Store,
                   Var, from_sympy)
from ...tir.index_checks import check_numbers
from ...tir.visit import walk_expr, walk_stmts
from .loop_analysis import (COMBINE, all_exprs, combined_accumulators, contiguous_split, full_reduction,
                            has_loop, has_store, leading_loops, shareable, trip_count)
from .scalar_ops import CudaCodegenError, c_const, ctype, memtype, render_op

_VECTOR = {"float32": "float4", "int32": "int4", "uint32": "uint4", "float64": "double2",
           "int64": "longlong2", "uint64": "ulonglong2"}
@dataclass
class Phase:
    name: str            # the __global__ function
    mode: str            # "grid" | "rows" | "threads" | "single" | "partials" | "combine"
    items: object        # tir index expression over the dims: elements (grid) or rows
    partial_bytes: int = 0   # two-stage reductions: bytes of partials per block of stage 1


@dataclass
class CudaKernel:
    func: PrimFunc
    source: str          # the __global__ functions (the prelude comes once per module)
    phases: list

    @property
    def dim_vars(self) -> list:
        return self.func.dim_vars


def emit_cuda(f: PrimFunc, name: str | None = None) -> CudaKernel:
    """The CUDA C of one loop-level program.  Kernel parameters: the buffers (inputs
    ``const``), then the dims as ``int64_t`` in ``f.dim_vars`` order."""
    return _Emitter(f, name or f.name).emit()


class _Emitter:
    def __init__(self, f: PrimFunc, name: str):
        self.f, self.name = f, name
        self.buf = {b.name: f"b{k}" for k, b in enumerate(f.params)}
        self.lines: list = []
        self.depth = 1
        self.n = 0
        self.flat = None      # (loop variables, their extents, flat counter) of a grid loop
        self.lanes = None     # buffer name -> vector lane, inside a vectorized grid loop
        self.checks = check_numbers(f)    # indices read from data, checked (rj_chk)

    # -- kernels -----------------------------------------------------------------------
    def emit(self) -> CudaKernel:
        stmts = self.f.body.stmts if isinstance(self.f.body, Seq) else [self.f.body]
        shares_state = any(isinstance(s, (Local, Assign)) for s in stmts)
        groups = [stmts] if shares_state or len(stmts) == 1 else [[s] for s in stmts]
        phases, texts = [], []
        for k, group in enumerate(groups):
            pname = self.name if len(groups) == 1 else f"{self.name}_p{k}"
            for ph, text in self._phase(pname, group):
                phases.append(ph)
                texts.append(text)
        return CudaKernel(self.f, "\n\n".join(texts), phases)

    def _signature(self, pname: str, partials: bool = False) -> str:
        n_in = len(self.f.params) - self.f.n_outputs
        ps = [f"{'const ' if k < n_in else ''}{memtype(b.dtype)} *__restrict__ b{k}"
              for k, b in enumerate(self.f.params)]
        ps += [f"int64_t d_{d}" for d in self.f.dim_vars]
        if partials:
            ps += ["unsigned char *__restrict__ rj_ws", "int64_t rj_nparts"]
        if self.checks:                     # the error record (tir.index_checks)
            ps += ["unsigned long long *__restrict__ rj_err"]
        return f'extern "C" __global__ void {pname}({", ".join(ps)})'

    def _strides(self) -> None:
        for k, b in enumerate(self.f.params):           # row-major strides
            acc = None
            for ax in range(len(b.shape) - 1, -1, -1):
                if acc is not None:
                    self.line(f"const int64_t s{k}_{ax} = {acc};")
                    acc = f"s{k}_{ax} * {self.expr(from_sympy(b.shape[ax]))}"
                else:
                    acc = self.expr(from_sympy(b.shape[ax]))

    def _phase(self, pname: str, stmts: list) -> list:
        body = stmts[0] if len(stmts) == 1 else Seq(stmts)
        loops, inner = leading_loops(body)
        split = None if loops else full_reduction(inner)
        if split is not None:
            return self._two_stage(pname, *split)
        self.lines, self.depth, self.flat = [], 1, None
        self._strides()
        if loops and not has_loop(inner):
            mode = "grid"
            items = self._grid(loops, inner)
        elif shareable(inner) and (not loops or contiguous_split(inner)):
            mode = "rows"
            if loops:
                items = self._flat_loop(loops, "blockIdx.x", "gridDim.x")
            else:
                items = Const(1, INDEX)
                self.line("if (blockIdx.x != 0) return;")
            self.shared(inner)
            if loops:
                self.close()
        elif loops:
            mode = "threads"
            items = self._flat_loop(loops, "(int64_t)blockIdx.x * blockDim.x + threadIdx.x",
                                    "(int64_t)gridDim.x * blockDim.x")
            self.serial(inner)
            self.close()
        else:
            mode, items = "single", Const(1, INDEX)
            self.line("if (blockIdx.x != 0 || threadIdx.x != 0) return;")
            self.serial(inner)
        text = "\n".join([self._signature(pname) + " {"] + self.lines + ["}"])
        return [(Phase(pname, mode, items), text)]

    def _two_stage(self, pname: str, prefix: list, red: For, rest: list) -> list:
        """A full reduction in two launches: every block of the grid folds a share into one
        partial per accumulator (``rj_ws``: 8-byte slots, ``rj_nparts`` per accumulator),
        then one block combines the partials and runs what follows the loop."""
        accs = combined_accumulators(red)
        loops, body = [red], red.body
        while isinstance(body, For) and body.kind == "reduction":
            loops.append(body)
            body = body.body
        # stage 1: the grid folds its share
        self.lines, self.depth = [], 1
        self._strides()
        for s in prefix:
            self.simple(s)
        for name, (opname, dtype) in accs.items():
            self.line(f"v_{name} = {self._identity(opname, dtype)};")
        items = self._flat_loop(loops, "(int64_t)blockIdx.x * blockDim.x + threadIdx.x",
                                "(int64_t)gridDim.x * blockDim.x")
        self.serial(body)
        self.close()
        for j, (name, (opname, dtype)) in enumerate(accs.items()):
            carrier, functor = self._carrier(opname, dtype)
            self.line(f"v_{name} = ({ctype(dtype)})rj_block_reduce(({carrier})v_{name}, "
                      f"({carrier}){self._identity(opname, dtype)}, {functor});")
            self.line(f"if (threadIdx.x == 0) (({ctype(dtype)} *)(rj_ws + {j} * rj_nparts * 8))"
                      f"[blockIdx.x] = v_{name};")
        first = "\n".join([self._signature(f"{pname}_s1", True) + " {"] + self.lines + ["}"])
        # stage 2: one block combines the partials and finishes
        self.lines, self.depth = [], 1
        self._strides()
        self.line("if (blockIdx.x != 0) return;")
        for s in prefix:
            self.simple(s)
        for j, (name, (opname, dtype)) in enumerate(accs.items()):
            ct = ctype(dtype)
            carrier, functor = self._carrier(opname, dtype)
            ident = self._identity(opname, dtype)
            self.line(f"{ct} v_{name}_part = {ident};")
            self.line(f"for (int64_t rj_p = threadIdx.x; rj_p < rj_nparts; rj_p += blockDim.x) "
                      f"v_{name}_part = {self._combine(opname, dtype, f'v_{name}_part', f'(({ct} *)(rj_ws + {j} * rj_nparts * 8))[rj_p]')};")
            red_ = f"({ct})rj_block_reduce(({carrier})v_{name}_part, ({carrier}){ident}, {functor})"
            self.line(f"v_{name} = {self._combine(opname, dtype, f'v_{name}', red_)};")
        for s in rest:
            self.shared(s)
        second = "\n".join([self._signature(f"{pname}_s2", True) + " {"] + self.lines + ["}"])
        return [(Phase(f"{pname}_s1", "partials", items, 8 * len(accs)), first),
                (Phase(f"{pname}_s2", "combine", Const(1, INDEX), 8 * len(accs)), second)]

    @staticmethod
    def _carrier(opname: str, dtype) -> tuple:
        """The type a block reduction shuffles (at least 32 bits) and its combining functor."""
        dtype = np.dtype(dtype)
        carrier = "float" if dtype == np.float16 else \
            "int" if dtype.itemsize < 4 or dtype == BOOL else ctype(dtype)
        return carrier, COMBINE[opname][dtype.kind in "iu"] + "()"

    def _flat_loop(self, loops: list, first: str, step: str):
        """Open a grid-stride loop over the flattened iteration space of ``loops`` and bind
        each loop variable; returns the number of iterations (an index expression)."""
        q, counts, total = self._flat_counts(loops)
        self.line(f"for (int64_t {q} = {first}; {q} < {q}_n; {q} += {step}) {{")
        self.depth += 1
        self._bind_loop_vars(q, q, loops, counts)
        return total

    def _flat_counts(self, loops: list) -> tuple:
        """Declare the iteration count ``<q>_n`` (and each loop's count); returns the
        counter's name, the counts' names and the total as an expression."""
        counts = [trip_count(l) for l in loops]
        total = counts[0]
        for c in counts[1:]:
            total = total * c
        q = self.fresh("q")
        self.line(f"const int64_t {q}_n = {self.expr(total)};")
        names = []
        if len(loops) > 1:      # 64-bit division is slow on GPUs: divide in 32 bits when it fits
            names = [self.fresh("c") for _ in loops]
            for cv, c in zip(names, counts):
                self.line(f"const int64_t {cv} = {self.expr(c)};")
            self.line(f"const bool {q}_32 = {q}_n <= 0x7fffffffLL;")
        return q, names, total

    def _bind_loop_vars(self, q: str, flat: str, loops: list, counts: list) -> None:
        """The loop variables from flat position ``flat`` (``q`` names the counts)."""
        if len(loops) == 1:
            self.line(f"const int64_t v_{loops[0].var.name} = {self.expr(loops[0].start)} + {flat};")
        else:
            r = self.fresh("r")
            self.line(f"int64_t {r} = {flat};")
            for k in range(len(loops) - 1, -1, -1):
                l, c = loops[k], counts[k]
                v = f"v_{l.var.name}"
                if k:
                    self.line(f"const int64_t {v} = {self.expr(l.start)} + ({q}_32 ? (int64_t)((uint32_t){r} % "
                              f"(uint32_t){c}) : {r} % {c});")
                    self.line(f"{r} = {q}_32 ? (int64_t)((uint32_t){r} / (uint32_t){c}) : {r} / {c};")
                else:
                    self.line(f"const int64_t {v} = {self.expr(l.start)} + {r};")
        if all(isinstance(l.start, Const) and l.start.value == 0 for l in loops):
            # a buffer indexed by exactly these loop variables over exactly their extents is
            # addressed by the flat position itself (the division is then dead code)
            self.flat = ([l.var.name for l in loops], [self.expr(l.extent) for l in loops], flat)

    def _grid(self, loops: list, inner) -> object:
        """An elementwise nest over the grid.  When every buffer addressed by the flat
        position is 4 or 8 bytes wide, read only or written once, a branch taken when the
        count divides and the pointers are 16-byte aligned moves them as 16-byte vectors
        (``float4``, ``double2``, ...), each thread computing the vector's lanes."""
        q, counts, total = self._flat_counts(loops)
        vec = self._vector_plan(loops, inner)
        gtid, gstride = "(int64_t)blockIdx.x * blockDim.x + threadIdx.x", "(int64_t)gridDim.x * blockDim.x"
        if vec is not None:
            lanes, roles = vec
            ptrs = " | ".join(f"(uint64_t){self.buf[n]}" for n in roles)
            self.line(f"if ({q}_n % {lanes} == 0 && (({ptrs}) & 15) == 0) {{")
            self.depth += 1
            self.line(f"for (int64_t rj_v = {gtid}; rj_v < {q}_n / {lanes}; rj_v += {gstride}) {{")
            self.depth += 1
            vts = {}
            for name, role in roles.items():
                b = next(p for p in self.f.params if p.name == name)
                vt = _VECTOR[np.dtype(b.dtype).name]
                vts[name] = vt
                if role == "in":
                    self.line(f"const {vt} rj_vec_{self.buf[name]} = reinterpret_cast<const {vt} *>"
                              f"({self.buf[name]})[rj_v];")
                else:
                    self.line(f"{vt} rj_vec_{self.buf[name]};")
            for lane in range(lanes):
                comp = "xyzw"[lane]
                self.line("{")
                self.depth += 1
                self._bind_loop_vars(q, f"rj_v * {lanes} + {lane}", loops, counts)
                self.lanes = {name: f"rj_vec_{self.buf[name]}.{comp}" for name in roles}
                self.serial(inner)
                self.lanes = None
                self.close()
            for name, role in roles.items():
                if role == "out":
                    self.line(f"reinterpret_cast<{vts[name]} *>({self.buf[name]})[rj_v] = rj_vec_{self.buf[name]};")
            self.close()
            self.depth -= 1
            self.line("} else {")
            self.depth += 1
        self.line(f"for (int64_t {q} = {gtid}; {q} < {q}_n; {q} += {gstride}) {{")
        self.depth += 1
        self._bind_loop_vars(q, q, loops, counts)
        self.serial(inner)
        self.close()
        if vec is not None:
            self.close()
        return total

    def _vector_plan(self, loops: list, inner):
        """(lanes, {buffer: "in" | "out"}) when ``_grid`` can move 16-byte vectors; else None."""
        if not all(isinstance(l.start, Const) and l.start.value == 0 for l in loops):
            return None
        names, extents = [l.var.name for l in loops], [self.expr(l.extent) for l in loops]

        def flat(b, index):
            return len(index) == len(names) and all(isinstance(i, Var) for i in index) and \
                [i.name for i in index] == names and [self.expr(from_sympy(d)) for d in b.shape] == extents
        roles, other = {}, set()
        top = inner.stmts if isinstance(inner, Seq) else [inner]
        for st in walk_stmts(inner):
            if isinstance(st, Store):
                if flat(st.buffer, st.index) and st in top and roles.get(st.buffer.name) is None:
                    roles[st.buffer.name] = "out"
                else:
                    other.add(st.buffer.name)
        for e in all_exprs(inner):
            for x in walk_expr(e):
                if isinstance(x, Load):
                    if flat(x.buffer, x.index) and roles.get(x.buffer.name, "in") == "in":
                        roles[x.buffer.name] = "in"
                    else:
                        other.add(x.buffer.name)
        if not roles or set(roles) & other:
            return None
        sizes = {np.dtype(p.dtype).itemsize for p in self.f.params if p.name in roles}
        kinds = {np.dtype(p.dtype).name for p in self.f.params if p.name in roles}
        if len(sizes) != 1 or not kinds <= set(_VECTOR):
            return None
        return 16 // sizes.pop(), roles

    # -- statements ----------------------------------------------------------------------
    def line(self, s: str) -> None:
        self.lines.append("  " * self.depth + s)

    def close(self) -> None:
        self.depth -= 1
        self.line("}")

    def fresh(self, hint: str) -> str:
        self.n += 1
        return f"rj_{hint}{self.n}"

    def serial(self, s) -> None:
        """``s`` run by one thread as written."""
        if isinstance(s, Seq):
            for x in s.stmts:
                self.serial(x)
        elif isinstance(s, For):
            v = f"v_{s.var.name}"
            self.line(f"for (int64_t {v} = {self.expr(s.start)}; {v} < {self.expr(s.extent)}; ++{v}) {{")
            self.depth += 1
            self.serial(s.body)
            self.close()
        elif isinstance(s, If):
            self.line(f"if ({self.expr(s.cond)}) {{")
            self.depth += 1
            self.serial(s.then)
            self.depth -= 1
            if s.else_ is not None:
                self.line("} else {")
                self.depth += 1
                self.serial(s.else_)
                self.depth -= 1
            self.line("}")
        else:
            self.simple(s)

    def simple(self, s) -> None:
        if isinstance(s, Store):
            self.line(f"{self.addr(s.buffer, s.index, s)} = {self.to_mem(self.expr(s.value), s.buffer.dtype)};")
        elif isinstance(s, Local):
            self.line(f"{ctype(s.var.dtype)} v_{s.var.name} = {self.expr(s.init)};")
        elif isinstance(s, Assign):
            self.line(f"v_{s.var.name} = {self.expr(s.value)};")
        else:
            raise CudaCodegenError(f"cannot emit {s!r}")

    def shared(self, s) -> None:
        """``s``, a row body (``_shareable``), run by all threads of a block together."""
        if isinstance(s, Seq):
            for x in s.stmts:
                self.shared(x)
        elif isinstance(s, (Local, Assign)):
            self.simple(s)
        elif isinstance(s, Store) or isinstance(s, If) and has_store(s):
            self.line("if (threadIdx.x == 0) {")
            self.depth += 1
            self.serial(s)
            self.close()
            self.line("__syncthreads();")
        elif isinstance(s, If):
            self.serial(s)
        elif isinstance(s, For) and s.kind in ("parallel", "vectorized"):
            v = f"v_{s.var.name}"
            self.line(f"for (int64_t {v} = {self.expr(s.start)} + threadIdx.x; {v} < {self.expr(s.extent)}; "
                      f"{v} += blockDim.x) {{")
            self.depth += 1
            self.serial(s.body)
            self.close()
            self.line("__syncthreads();")
        elif isinstance(s, For) and s.kind == "reduction":
            self._block_reduction(s)
        else:
            raise CudaCodegenError(f"not a shareable statement: {s!r}")

    def _block_reduction(self, s: For) -> None:
        loops, body = [s], s.body
        while isinstance(body, For) and body.kind == "reduction":
            loops.append(body)
            body = body.body
        accs = combined_accumulators(s)
        for name, (opname, dtype) in accs.items():
            self.line(f"const {ctype(dtype)} v_{name}_init = v_{name}; v_{name} = {self._identity(opname, dtype)};")
        self._flat_loop(loops, "threadIdx.x", "blockDim.x")
        self.serial(body)
        self.close()
        if not accs:
            self.line("__syncthreads();")
        for name, (opname, dtype) in accs.items():
            ct = ctype(dtype)
            carrier, functor = self._carrier(opname, dtype)
            red = (f"rj_block_reduce(({carrier})v_{name}, ({carrier}){self._identity(opname, dtype)}, "
                   f"{functor})")
            self.line(f"v_{name} = {self._combine(opname, dtype, f'v_{name}_init', f'({ct}){red}')};")

    def _identity(self, opname: str, dtype) -> str:
        dtype = np.dtype(dtype)
        if opname in ("add", "or", "xor"):
            return c_const(0, dtype)
        if opname == "mul":
            return c_const(1, dtype)
        if opname == "and":
            return c_const(True if dtype == BOOL else -1, dtype)
        if dtype.kind == "f":
            return c_const(float("-inf") if opname == "max" else float("inf"), dtype)
        if dtype == BOOL:
            return c_const(opname == "min", dtype)
        info = np.iinfo(dtype)
        return c_const(info.min if opname == "max" else info.max, dtype)

    def _combine(self, opname: str, dtype, a: str, b: str) -> str:
        return render_op(Op(opname, (Var("_a", dtype), Var("_b", dtype)), np.dtype(dtype)), [a, b])

    # -- expressions ---------------------------------------------------------------------
    def addr(self, b, index, node=None) -> str:
        k = self.buf[b.name][1:]
        if self.flat and len(index) == len(self.flat[0]) and \
                all(isinstance(i, Var) for i in index) and [i.name for i in index] == self.flat[0] and \
                [self.expr(from_sympy(d)) for d in b.shape] == self.flat[1]:
            if self.lanes and b.name in self.lanes:
                return self.lanes[b.name]
            return f"{self.buf[b.name]}[{self.flat[2]}]"
        terms = []
        for ax, i in enumerate(index):
            e = self.expr(i)
            check = self.checks.get((id(node), ax))
            if check is not None:
                e = f"rj_chk({e}, {self.expr(from_sympy(b.shape[ax]))}, rj_err, {check + 1}ULL)"
            terms.append(e if ax == len(index) - 1 else f"({e}) * s{k}_{ax}")
        return f"{self.buf[b.name]}[{' + '.join(terms) or '0'}]"

    @staticmethod
    def to_mem(v: str, dtype) -> str:
        dtype = np.dtype(dtype)
        if dtype == BOOL:
            return f"(uint8_t)({v})"
        if dtype == np.float16:
            return f"rj_f2h({v})"
        return v

    def expr(self, e) -> str:
        if isinstance(e, Const):
            return c_const(e.value, e.dtype)
        if isinstance(e, Var):
            return f"v_{e.name}" if not self._is_dim(e.name) else f"d_{e.name}"
        if isinstance(e, Load):
            v = self.addr(e.buffer, e.index, e)
            if e.dtype == BOOL:
                return f"({v} != 0)"
            if e.dtype == np.float16:
                return f"rj_h2f({v})"
            return v
        assert isinstance(e, Op), e
        return render_op(e, [self.expr(a) for a in e.args])

    def _is_dim(self, name: str) -> bool:
        return name in self.f.dim_vars
