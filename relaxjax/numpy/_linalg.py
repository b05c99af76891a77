"""matmul, dot, tensordot, outer and einsum, all expressed through the ``matmul`` primitive."""
from __future__ import annotations

import string

from .. import lax
from ..lax.util import broadcast_shapes
from ..shapes import prod as dim_prod
from ._base import arr, dtype_of, env, promote, shape
from ._reductions import sum as rsum
from ._shape_ops import broadcast_to, expand_dims, reshape, squeeze, transpose
from ._ufuncs import multiply


def matmul(a, b):
    """``numpy.matmul`` / ``@``: batched, with NumPy's 1-D rules."""
    a, b = arr(a), arr(b)
    if len(shape(a)) == 0 or len(shape(b)) == 0:
        raise ValueError("matmul: input operand does not have enough dimensions (0-d)")
    a, b = promote(a, b)
    a1, b1 = len(shape(a)) == 1, len(shape(b)) == 1
    if a1:
        a = expand_dims(a, 0)
    if b1:
        b = expand_dims(b, 1)
    out = lax.matmul.bind(a, b)
    if a1 and b1:
        return squeeze(out, (-2, -1))
    if a1:
        return squeeze(out, -2)
    if b1:
        return squeeze(out, -1)
    return out


def tensordot(a, b, axes=2):
    """``numpy.tensordot`` as transpose + reshape + matmul."""
    a, b = arr(a), arr(b)
    na, nb = len(shape(a)), len(shape(b))
    if isinstance(axes, int):
        ax_a, ax_b = list(range(na - axes, na)), list(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, int) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, int) else list(ax_b)
    ax_a = [x % na for x in ax_a]
    ax_b = [x % nb for x in ax_b]
    letters = iter(string.ascii_letters)
    sa = [next(letters) for _ in range(na)]
    sb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in ax_a] + [c for j, c in enumerate(sb) if j not in ax_b]
    return einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", a, b)


def dot(a, b):
    """``numpy.dot``."""
    a, b = arr(a), arr(b)
    na, nb = len(shape(a)), len(shape(b))
    if na == 0 or nb == 0:
        return multiply(a, b)
    if nb <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-2]))


def vdot(a, b):
    from ._shape_ops import ravel
    return dot(ravel(a), ravel(b))


def inner(a, b):
    a, b = arr(a), arr(b)
    if len(shape(a)) == 0 or len(shape(b)) == 0:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a, b):
    from ._shape_ops import ravel
    a, b = ravel(a), ravel(b)
    return multiply(expand_dims(a, 1), expand_dims(b, 0))


def einsum(subscripts: str, *operands):
    """``numpy.einsum`` for contractions (sums of products) that matmul can express.

    Repeated indices within one operand (diagonals, traces) are not supported.
    """
    ops = [arr(x) for x in operands]
    ins, out = _parse(subscripts.replace(" ", ""), ops)
    for s in ins:
        if len(set(s)) != len(s):
            raise ValueError(f"einsum: repeated index in {s!r} (diagonals/traces) is not supported")
    ops = promote(*ops)
    sizes: dict = {}
    for s, x in zip(ins, ops):
        if len(s) != len(shape(x)):
            raise ValueError(f"einsum: operand {s!r} has rank {len(shape(x))}")
    # a dim of size 1 broadcasts against the other operands' size for its index (as in NumPy;
    # in automatic mode a symbolic dim that is 1 here too, behind a guard)
    dims_of: dict = {}
    for s, x in zip(ins, ops):
        for c, d in zip(s, shape(x)):
            dims_of.setdefault(c, []).append(d)
    for c, ds in dims_of.items():
        (sizes[c],) = broadcast_shapes(env(), [(d,) for d in ds], f"einsum index {c!r}")
    wants = [tuple(sizes[c] for c in s) for s in ins]
    ops = [x if tuple(shape(x)) == w else broadcast_to(x, w) for x, w in zip(ops, wants)]
    cur, cs = ops[0], ins[0]
    for k in range(1, len(ops)):
        later = set(out).union(*ins[k + 1:])
        cur, cs = _contract(cur, cs, ops[k], ins[k], later, sizes)
    drop = tuple(i for i, c in enumerate(cs) if c not in out)
    if drop:
        cur = rsum(cur, axis=drop, dtype=dtype_of(cur))   # einsum keeps the dtype
        cs = "".join(c for c in cs if c in out)
    return transpose(cur, [cs.index(c) for c in out])


def _parse(sub: str, ops):
    if "->" in sub:
        lhs, out = sub.split("->")
    else:
        lhs, out = sub, None
    ins = lhs.split(",")
    if len(ins) != len(ops):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(ops)} operands")
    if "..." in sub:
        used = set(sub)
        spare = [c for c in string.ascii_letters if c not in used]
        nell = max(len(shape(x)) - (len(s) - 3) for s, x in zip(ins, ops) if "..." in s)
        ell = "".join(spare[:nell])
        ins = [s.replace("...", ell[nell - (len(shape(x)) - (len(s) - 3)):]) for s, x in zip(ins, ops)]
        if out is not None:
            out = out.replace("...", ell)
        else:
            out = ell
    if out is None or (out == "" and "->" not in sub):
        counts = {}
        for s in ins:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        implicit = "".join(sorted(c for c, n in counts.items() if n == 1))
        out = (out or "") + implicit if "..." in sub else implicit
    return ins, out


def _contract(a, sa: str, b, sb: str, keep: set, sizes: dict):
    """Contract two operands over their shared indices not needed later, through one matmul."""
    # indices only in one operand and not needed later are summed out first
    for which in (0, 1):
        x, sx, other = (a, sa, sb) if which == 0 else (b, sb, sa)
        drop = tuple(i for i, c in enumerate(sx) if c not in other and c not in keep)
        if drop:
            x = rsum(x, axis=drop, dtype=dtype_of(x))
            sx = "".join(c for i, c in enumerate(sx) if i not in drop)
        if which == 0:
            a, sa = x, sx
        else:
            b, sb = x, sx
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    fa = [c for c in sa if c not in sb]
    fb = [c for c in sb if c not in sa]
    at = transpose(a, [sa.index(c) for c in batch + fa + contract])
    bt = transpose(b, [sb.index(c) for c in batch + contract + fb])
    bsh = tuple(sizes[c] for c in batch)
    am = reshape(at, bsh + (dim_prod(sizes[c] for c in fa), dim_prod(sizes[c] for c in contract)))
    bm = reshape(bt, bsh + (dim_prod(sizes[c] for c in contract), dim_prod(sizes[c] for c in fb)))
    r = lax.matmul.bind(am, bm)
    r = reshape(r, bsh + tuple(sizes[c] for c in fa) + tuple(sizes[c] for c in fb))
    return r, "".join(batch + fa + fb)
