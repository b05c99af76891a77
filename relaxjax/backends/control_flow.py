"""Running structured control flow (``fori_loop``, ``while_loop``, ``scan``, ``cond``): the
one driver every backend shares.

A control-flow binding holds its regions (loop body, condition, branches) as modules; the
backend compiles each into an executable of its own kind (``make_executable``), and
:class:`ControlFlowRunner` drives them: it reads trip counts, predicates and branch indices
on the host, passes the carries from one iteration to the next, slices a scan's inputs and
stacks its outputs.  The region executables are called like any entry,
``exe(dims, arrays)``, with the caller's dims (a region's shapes use the caller's symbols).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..ir import Binding, IRModule, Literal, Var, regions
from ..shapes import eval_dim, is_symbolic


def literal_value(a: Literal, D: dict) -> np.ndarray:
    """A literal operand's value (a symbolic dim evaluated with the call's dims)."""
    if is_symbolic(a.value):
        return np.asarray(eval_dim(a.value, D), a.type.dtype)
    return np.asarray(a.value, a.type.dtype)


class ControlFlowRunner:
    """Runs one control-flow binding; ``make_executable(region)`` compiles its regions."""

    def __init__(self, b: Binding, make_executable: Callable[[IRModule], Any]):
        self.binding = b
        self.name = b.callee.name
        self.params = b.params
        self.executables = {id(r): make_executable(r) for r in regions(b)}

    def region_executables(self) -> list:
        return list(self.executables.values())

    def __call__(self, D: dict, value: Callable[[Var], Any], empty: Callable) -> list:
        """The binding's results.  ``value(var)`` reads an operand; ``empty(shape, dtype)``
        allocates (a scan's stacked outputs) on the backend's device."""
        return self.run(D, [value(a) if isinstance(a, Var) else literal_value(a, D)
                            for a in self.binding.args], empty)

    def run(self, D: dict, args: list, empty: Callable) -> list:
        """The binding's results from its operands' values."""
        return getattr(self, "_" + self.name)(D, args, empty)

    def _exe(self, region: IRModule):
        return self.executables[id(region)]

    def _fori_loop(self, D: dict, args: list, empty) -> list:
        p = self.params
        n = p["n_carry"]
        lo, hi = int(args[0]), int(args[1])
        carry, consts = list(args[2:2 + n]), list(args[2 + n:])
        body = self._exe(p["body"])
        itype = p["body"].main.params[0].type.dtype
        for i in range(lo, hi):
            carry = body(dict(D), [np.asarray(i, itype)] + carry + consts)
        return carry

    def _while_loop(self, D: dict, args: list, empty) -> list:
        p = self.params
        n, nc = p["n_carry"], p["n_cond_consts"]
        carry, cconsts, bconsts = list(args[:n]), list(args[n:n + nc]), list(args[n + nc:])
        cond, body = self._exe(p["cond"]), self._exe(p["body"])
        while bool(cond(dict(D), carry + cconsts)[0]):
            carry = body(dict(D), carry + bconsts)
        return carry

    def _scan(self, D: dict, args: list, empty) -> list:
        p = self.params
        nc, nx = p["n_carry"], p["n_xs"]
        carry, xs, consts = list(args[:nc]), args[nc:nc + nx], list(args[nc + nx:])
        body = self._exe(p["body"])
        length = eval_dim(p["length"], D) if is_symbolic(p["length"]) else int(p["length"])
        ys = [empty(tuple(eval_dim(d, D) for d in v.type.shape), v.type.dtype)
              for v in self.binding.outvars[nc:]]
        order = range(length - 1, -1, -1) if p["reverse"] else range(length)
        for t in order:
            outs = body(dict(D), [x[t, ...] for x in xs] + carry + consts)   # views, 0-d too
            carry = outs[:nc]
            for y, out in zip(ys, outs[nc:]):
                y[t] = out
        return carry + ys

    def _cond(self, D: dict, args: list, empty) -> list:
        p = self.params
        branches = p["branches"]
        k = min(max(int(args[0]), 0), len(branches) - 1)
        ops = list(args[1:1 + p["n_operands"]])
        lo, hi = p["capture_spans"][k]
        caps = list(args[1 + p["n_operands"]:])[lo:hi]
        return list(self._exe(branches[k])(dict(D), ops + caps))
