"""Minimizing a failure beyond what hypothesis shrinks (:func:`minimize`), and writing it as
a stand-alone script (:func:`reproducer`)."""
from __future__ import annotations

import textwrap
import time

import numpy as np

from ...shapes import symbol
from .check import Failure, check_program, difference_kind, low_precision, tolerance_for
from .program import Op, Program, same_shape, used_dims


def _rebuild(prog: Program, outputs: list, subst: dict | None = None) -> tuple:
    """``prog`` computing only ``outputs`` (value ids), with value ``a`` replaced by
    ``subst[a]``; dead ops, unused inputs and unused dims are dropped."""
    subst = subst or {}
    k = len(prog.inputs)

    def res(v):
        while v in subst:
            v = subst[v]
        return v
    need, stack = set(), [res(o) for o in outputs]
    while stack:
        v = stack.pop()
        if v in need:
            continue
        need.add(v)
        if v >= k:
            stack += [res(a) for a in prog.ops[v - k].args]
    keep_in = [i for i in range(k) if i in need]
    keep_ops = [v for v in range(k, k + len(prog.ops)) if v in need]
    new_id = {v: n for n, v in enumerate(keep_in + keep_ops)}
    ops = [Op(prog.ops[v - k].kind, tuple(new_id[res(a)] for a in prog.ops[v - k].args),
              prog.ops[v - k].template, prog.ops[v - k].shape, prog.ops[v - k].dtype) for v in keep_ops]
    inputs = [prog.inputs[i] for i in keep_in]
    dims = used_dims(prog.dims, inputs)
    outs = []
    for o in outputs:
        if new_id[res(o)] not in outs:
            outs.append(new_id[res(o)])
    return Program(dims, inputs, ops, outs, prog.max_side), keep_in


def _kind_of(f: Failure) -> tuple:
    c = f.__cause__
    if type(c) is AssertionError:
        return (f.backend, f.mode, "differs", difference_kind(c))
    return (f.backend, f.mode, type(c).__name__)


def _try(prog, inputs, dims, backend, mode):
    try:
        check_program(prog, [(tuple(inputs), dims)], [backend], (mode,))
    except Failure as f:
        return f
    except Exception:           # the candidate itself is broken (e.g. NumPy rejects it)
        return None
    return None


def minimize(f: Failure, budget_s: float = 120.0) -> Failure:
    """A smaller program and smaller inputs failing the same way (same target, same kind
    of failure), by greedy steps while ``budget_s`` lasts."""
    t0 = time.time()
    kind = _kind_of(f)
    best = f

    def attempt(prog, keep_in, inputs=None, dims=None):
        nonlocal best
        if time.time() - t0 > budget_s:
            return False
        ins = [best.inputs[i] for i in keep_in] if inputs is None else inputs
        g = _try(prog, ins, dims if dims is not None else best.dims, best.backend, best.mode)
        if g is not None and _kind_of(g) == kind:
            best = g
            return True
        return False

    changed = True
    while changed and time.time() - t0 < budget_s:
        changed = False
        prog = best.program
        k = len(prog.inputs)
        # one output at a time
        if len(prog.outputs) > 1:
            for o in prog.outputs:
                cand, keep = _rebuild(prog, [o])
                if attempt(cand, keep):
                    changed = True
                    break
            if changed:
                continue
        # bypass an op: use one of its arguments (same shape and dtype) or an earlier value
        for v in reversed(range(k, k + len(prog.ops))):
            op = prog.ops[v - k]
            for a in op.args:
                src = prog.ops[a - k] if a >= k else None
                shp = src.shape if src else prog.inputs[a][0]
                dt = src.dtype if src else prog.inputs[a][1]
                if dt == op.dtype and same_shape(shp, op.shape):
                    cand, keep = _rebuild(prog, prog.outputs, {v: a})
                    if attempt(cand, keep):
                        changed = True
                        break
            if changed:
                break
        if changed:
            continue
        # the output itself earlier: an output's argument as the output
        for o in prog.outputs:
            if o >= k:
                for a in prog.ops[o - k].args:
                    cand, keep = _rebuild(prog, [a if x == o else x for x in prog.outputs])
                    if attempt(cand, keep):
                        changed = True
                        break
            if changed:
                break
        if changed:
            continue
        # smaller dims (arrays cut to the new shapes)
        for name, lo, hi in prog.dims:
            cur = best.dims.get(name)
            if cur is None:
                continue
            for v in sorted({lo, max(lo, 1), lo + 1, cur // 2, cur - 1}):
                if not (max(lo, 1) <= v < cur):
                    continue
                dims = dict(best.dims, **{name: v})
                vals = {symbol(n): x for n, x in dims.items()}
                ins, ok = [], True
                for (shp, _), a in zip(prog.inputs, best.inputs):
                    new = tuple(d if isinstance(d, int) else int(d.xreplace(vals)) for d in shp)
                    if any(x < 1 or x > y for x, y in zip(new, a.shape)):
                        ok = False
                        break
                    ins.append(np.array(a[tuple(slice(0, x) for x in new)], copy=True))
                if ok and attempt(prog, list(range(len(prog.inputs))), ins, dims):
                    changed = True
                    break
            if changed:
                break
        if changed:
            continue
        # rounder input values
        for i, a in enumerate(best.inputs):
            if a.dtype.kind == "f" and not np.array_equal(a, np.round(a)):
                ins = list(best.inputs)
                ins[i] = np.round(a).astype(a.dtype)
                if attempt(prog, list(range(len(prog.inputs))), ins):
                    changed = True
                    break
    return best


def reproducer(f: Failure) -> str:
    """A stand-alone Python script reproducing a failure (exits 1 while it still fails)."""
    arrays = []
    for k, a in enumerate(f.inputs):
        arrays.append(f"    x{k} = np.array({a.tolist()!r}, dtype={str(a.dtype)!r}).reshape({a.shape!r})")
    first = str(f).split("\n")[0]
    return "\n".join([
        f'"""relaxjax fuzz reproducer: {f.backend} backend, {f.mode} mode.',
        "",
        textwrap.indent(first, ""),
        '"""',
        "import sys",
        "",
        "import numpy as np",
        "",
        "import relaxjax as rj",
        "import relaxjax.numpy as rnp",
        "from relaxjax.testing import assert_tree_close",
        "",
        f.program.signature_source(),
        f"DIMS = {f.dims!r}",
        "",
        "",
        f.program.body(),
        "",
        "",
        "def main():",
        *arrays,
        f"    args = ({''.join(f'x{k}, ' for k in range(len(f.inputs)))})",
        "    with np.errstate(all='ignore'):",
        "        want = program(np, *args)",
        f"    f = rj.jit(lambda *xs: program(rnp, *xs), backend={f.backend!r}"
        + (", shapes=SIGNATURE)" if f.mode == "explicit" else ")"),
        "    got = f(*args)",
        "    for g, w in zip(got, want):",
        "        if np.asarray(w).dtype.kind == 'f':",
        f"            tol = {tolerance_for(f.program, 'float64')!r}" + ("  # float32 values in the program" if
                                                                       low_precision(f.program) else ""),
        "        else:",
        "            tol = {}",
        "        assert_tree_close(np.asarray(g), np.asarray(w), **tol)",
        "    print('ok: the program agrees with NumPy')",
        "",
        "",
        "if __name__ == '__main__':",
        "    main()",
        "",
    ])
