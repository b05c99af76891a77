"""Static memory planning over symbolic shapes (backend independent).

:func:`plan_memory` looks at the values a graph function's ``call_tir`` / ``call_library``
bindings produce and shares storage between those whose live ranges do not overlap:

* a value is *planned* when a loop-level program or a library function writes it, it is not a
  function result (nor viewed by one), and its shape only uses the function's input dims (a
  dim a data-dependent op binds while the program runs is not known when storage is sized);
* its live range runs from its binding to its last use; host operations (``reshape`` views,
  ``match_cast``, data-dependent ops) and any other call are taken to alias their operands,
  so a use of their outputs is a use of the operands' storage too;
* storages are assigned greedily in binding order.  A dead storage is reused by a new value
  whose byte size is *provably* (sympy, over the dims' bounds; lower bound 1 by default) no
  larger than the storage, or grows to the new size when that is provably no smaller; the
  outputs of a binding get their storage before the binding's operands are released, so a
  kernel never writes over its own inputs -- except an *update in place*: a program that
  updates an input (``update_slice``, ``scatter``; ``tir.analysis.inplace_input``) whose
  operand dies at the call writes its output into the operand's storage, so a loop of
  updates (``x = x.at[t].set(...)``) allocates nothing per step.

When every storage size has a finite upper bound under ``fn.bounds`` the plan also lays the
storages out in one workspace (64-byte aligned offsets) and ``workspace_bytes`` is its size.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from ..ir import Function, Var, value_names
from ..shapes import DEFAULT_BOUNDS, INF, Dim, ShapeEnv, dim_str, eval_dim, free_symbols, interval, normalize
from ..tir.analysis import inplace_input

ALIGN = 64
PLANNED_KINDS = ("tir", "library")


def byte_size(v: Var) -> Dim:
    """Product of the shape dims times the item size, as an int or an expanded sympy expr."""
    n: Dim = np.dtype(v.type.dtype).itemsize
    for d in v.type.shape:
        n = n * d
    return normalize(sympy.expand(n)) if isinstance(n, sympy.Basic) else n


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(eq=False)
class Storage:
    """One storage token: ``size`` bytes (symbolic), shared by ``values`` in turn."""
    index: int
    size: Dim
    values: list = field(default_factory=list)
    upper: object = INF          # upper bound of ``size`` in bytes (int, or INF)
    offset: int | None = None    # offset in the workspace, when the plan has one


@dataclass(eq=False)
class MemoryPlan:
    fn: Function
    storages: list
    storage_of: dict             # planned Var -> Storage
    live: dict                   # planned Var -> (first binding index, last binding index)
    unplanned: dict              # tir/library output Var -> why it is not planned
    workspace_bytes: int | None
    names: dict                  # Var -> printed name (as in ``print(fn)``)

    @property
    def values(self) -> list:
        return list(self.storage_of)

    @property
    def total_bytes(self) -> Dim:
        """Sum of the storage sizes (symbolic): the intermediates' memory per call."""
        return _sum(s.size for s in self.storages)

    @property
    def values_bytes(self) -> Dim:
        """What the planned values would take with one buffer each (no reuse)."""
        return _sum(byte_size(v) for v in self.storage_of)

    def __str__(self) -> str:
        fn, nm = self.fn, self.names
        bnds = ", ".join(f"{s.name} in [{lo}, {'inf' if hi == INF else hi}]"
                         for s, (lo, hi) in sorted(fn.bounds.items(), key=lambda kv: kv[0].name))
        lines = [f"memory plan of {fn.name}: {len(self.storage_of)} values in "
                 f"{len(self.storages)} storages" + (f" ({bnds})" if bnds else "")]
        for s in self.storages:
            ub = "" if isinstance(s.size, int) else \
                f" (<= {s.upper})" if s.upper != INF else " (unbounded)"
            at = "" if s.offset is None else f" @ {s.offset}"
            vals = ", ".join(f"{nm.get(v, '?')}[{self.live[v][0]}..{self.live[v][1]}]" for v in s.values)
            lines.append(f"  s{s.index}: {dim_str(s.size)} bytes{ub}{at}: {vals}")
        lines.append(f"  total: {dim_str(self.total_bytes)} bytes "
                     f"(one buffer per value: {dim_str(self.values_bytes)})")
        if self.workspace_bytes is not None:
            lines.append(f"  workspace: {self.workspace_bytes} bytes")
        else:
            lines.append("  workspace: none (a storage size has no finite upper bound)")
        if self.unplanned:
            lines.append("  not planned: " + ", ".join(f"{nm.get(v, '?')} ({why})"
                                                      for v, why in self.unplanned.items()))
        return "\n".join(lines)

    __repr__ = __str__


def _sum(terms) -> Dim:
    out: Dim = 0
    for t in terms:
        out = out + t
    return normalize(sympy.expand(out)) if isinstance(out, sympy.Basic) else out


def plan_memory(fn: Function) -> MemoryPlan:
    """Live ranges and storage sharing for ``fn``'s intermediate values (see module doc)."""
    bindings = fn.bindings
    env = ShapeEnv("explicit", fn.bounds)
    input_dims = set(fn.dim_vars)
    results = {r for r in fn.results if isinstance(r, Var)}

    # last use of each value, and whether a result is (a view of) it: host ops and any call
    # that is not tir/library may alias their operands, so walk backwards and fold the
    # outputs' last use and result-ness into the operands
    last: dict = {}
    escapes: set = set(results)
    for i in range(len(bindings) - 1, -1, -1):
        b = bindings[i]
        args = [a for a in b.args if isinstance(a, Var)]
        aliasing = b.kind not in PLANNED_KINDS
        for a in args:
            end = i
            if aliasing:
                for o in b.outvars:
                    end = max(end, last.get(o, i))
                    if o in escapes:
                        escapes.add(a)
            last[a] = max(last.get(a, i), end)

    planned: list = []
    unplanned: dict = {}
    define: dict = {}
    for i, b in enumerate(bindings):
        if b.kind not in PLANNED_KINDS:
            continue
        for v in b.outvars:
            define[v] = i
            if v in escapes:
                unplanned[v] = "function result" if v in results else "a result views it"
            elif not free_symbols_of(v) <= input_dims:
                unplanned[v] = "shape bound at run time"
            else:
                planned.append(v)
    live = {v: (define[v], last.get(v, define[v])) for v in planned}

    sizes = {v: byte_size(v) for v in planned}
    storages: list = []
    storage_of: dict = {}
    free: list = []                  # storages whose values are all dead
    expiring: dict = {}              # binding index -> storages released after it
    planned_set = set(planned)
    for i, b in enumerate(bindings):
        donor = _updated_in_place(b, i, storage_of, live)
        for v in b.outvars:
            if v not in planned_set:
                continue
            if donor is not None:             # the output takes the dying operand's storage
                s = storage_of[donor]
                s.values.append(v)
                storage_of[v] = s
                expiring.setdefault(live[v][1], []).append(s)
                continue
            s = _pick(env, free, sizes[v])
            if s is None:
                s = Storage(len(storages), sizes[v])
                storages.append(s)
            else:
                free.remove(s)
                if s.size != sizes[v] and env.try_prove(">=", s.size, sizes[v]) is not True:
                    s.size = sizes[v]            # grows: provably >= what it held
            s.values.append(v)
            storage_of[v] = s
            expiring.setdefault(live[v][1], []).append(s)
        # operands (and dead outputs) are released only after the outputs got storage
        for s in expiring.pop(i, ()):
            if storage_of[s.values[-1]] is s and live[s.values[-1]][1] == i:
                free.append(s)

    offset = 0
    bounded = True
    for s in storages:
        s.upper = _upper(s.size, fn.bounds)
        if s.upper == INF:
            bounded = False
    workspace = None
    if bounded:
        for s in storages:
            s.offset = offset
            offset += _align(int(s.upper))
        workspace = offset
    return MemoryPlan(fn, storages, storage_of, live, unplanned, workspace, value_names(fn))


def _updated_in_place(b, i: int, storage_of: dict, live: dict):
    """The operand of binding ``i`` whose storage its output may take: the input a program
    updates in place (``inplace_input``), planned, used once by the call and dead after it."""
    if b.kind != "tir" or len(b.outvars) != 1 or len(b.args) != len(b.callee.inputs):
        return None
    k = inplace_input(b.callee)
    if k is None:
        return None
    x = b.args[k]
    if not isinstance(x, Var) or x not in storage_of or live[x][1] != i or \
            sum(a is x for a in b.args) != 1 or \
            storage_of[x].values[-1] is not x:
        return None
    return x


def free_symbols_of(v: Var) -> frozenset:
    out: frozenset = frozenset()
    for d in v.type.shape:
        out |= free_symbols(d)
    return out


def _upper(size: Dim, bounds: dict):
    if isinstance(size, int):
        return size
    hi = interval(size, bounds)[1]
    if hi == INF or hi != hi:
        return INF
    return int(hi) if float(hi).is_integer() else int(hi) + 1


_SAMPLES = (1, 2, 3, 37, 1000)


def _refuted(env: ShapeEnv, a: Dim, b: Dim) -> bool:
    """A counterexample to ``a >= b`` among a few points of the dims' ranges (every dim at
    one value, clamped to its bounds): then no proof is tried.  The proofs are what planning
    a convolution's buffers spends its time on, and most pairs of sizes are unrelated.  (A
    point that breaks a guard can only cost a reuse, never a wrong one.)"""
    syms = free_symbols(a) | free_symbols(b)
    if not syms:
        return False
    for v in _SAMPLES:
        values = {}
        for x in syms:
            lo, hi = env.bounds.get(x, DEFAULT_BOUNDS)
            values[x.name] = int(max(v, lo) if hi == INF else min(max(v, lo), hi))
        try:
            if eval_dim(a, values) < eval_dim(b, values):
                return True
        except (ZeroDivisionError, ValueError):
            continue
    return False


def _pick(env: ShapeEnv, free: list, size: Dim):
    """A dead storage for a value of ``size`` bytes: one of equal size; else the smallest
    that provably holds it; else the largest that can provably grow to it; else None."""
    if not free:
        return None
    for s in free:
        if s.size == size:
            return s
    fits = [s for s in free if not _refuted(env, s.size, size) and
            env.try_prove(">=", s.size, size) is True]
    if fits:
        return min(fits, key=lambda s: (_upper(s.size, env.bounds), s.index))
    grows = [s for s in free if not _refuted(env, size, s.size) and
             env.try_prove("<=", s.size, size) is True]
    if grows:
        return max(grows, key=lambda s: (_upper(s.size, env.bounds), -s.index))
    return None
