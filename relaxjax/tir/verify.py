"""The loop-level program verifier: scoping, buffer ranks, stores to inputs, loop kinds,
operand dtypes."""
from __future__ import annotations

from .nodes import (BOOL, INDEX, LOOP_KINDS, Assign, Const, For, If, Load, Local, Op, PrimFunc, Seq,
                    Store, Var)
from .visit import walk_expr


class TIRError(Exception):
    pass


def verify_primfunc(f: PrimFunc) -> None:
    """Check scoping (every variable defined before use), that loads and stores index
    buffers of the program with the right rank, that inputs are never stored to, loop kinds,
    and operand dtypes of stores and assignments."""
    buffers = {id(b) for b in f.params}
    inputs = {id(b) for b in f.inputs}
    scope = set(f.dim_vars)

    def fail(msg):
        raise TIRError(f"{f.name}: {msg}")

    def check_expr(e):
        for x in walk_expr(e):
            if isinstance(x, Var):
                if x.name not in scope:
                    fail(f"variable {x.name} is used outside its scope")
            elif isinstance(x, Load):
                check_access(x.buffer, x.index)
            elif not isinstance(x, (Const, Op)):
                fail(f"not an expression: {x!r}")

    def check_access(b, index):
        """The buffer and the indices' rank and dtype (the indices' nodes are checked as
        part of the expression or statement holding the access)."""
        if id(b) not in buffers:
            fail(f"buffer {b.name} is not a parameter")
        if len(index) != len(b.shape):
            fail(f"{b.name} has rank {len(b.shape)}, indexed with {len(index)} indices")
        for i in index:
            if i.dtype != INDEX:
                fail(f"index {i} into {b.name} has dtype {i.dtype}, not int64")

    def walk(s, local_scope):
        nonlocal scope
        if isinstance(s, Seq):
            saved = set(scope)
            for x in s.stmts:
                walk(x, local_scope)
            scope = saved
        elif isinstance(s, For):
            if s.kind not in LOOP_KINDS:
                fail(f"loop {s.var.name} has unknown kind {s.kind!r}")
            check_expr(s.extent)
            check_expr(s.start)
            if s.var.name in scope:
                fail(f"loop variable {s.var.name} shadows another variable")
            scope.add(s.var.name)
            walk(s.body, local_scope)
            scope.discard(s.var.name)
        elif isinstance(s, Store):
            if id(s.buffer) in inputs:
                fail(f"store to input buffer {s.buffer.name}")
            check_access(s.buffer, s.index)
            for e in (*s.index, s.value):
                check_expr(e)
            if s.value.dtype != s.buffer.dtype:
                fail(f"store of {s.value.dtype} into {s.buffer.name} of {s.buffer.dtype}")
        elif isinstance(s, Local):
            check_expr(s.init)
            if s.init.dtype != s.var.dtype:
                fail(f"local {s.var.name}: {s.var.dtype} initialised with {s.init.dtype}")
            scope.add(s.var.name)
            local_scope[s.var.name] = s.var.dtype
        elif isinstance(s, Assign):
            if s.var.name not in scope or s.var.name not in local_scope:
                fail(f"assignment to undeclared local {s.var.name}")
            check_expr(s.value)
            if s.value.dtype != local_scope[s.var.name]:
                fail(f"assignment of {s.value.dtype} to local {s.var.name} of {local_scope[s.var.name]}")
        elif isinstance(s, If):
            check_expr(s.cond)
            if s.cond.dtype != BOOL:
                fail(f"if condition {s.cond} is not bool")
            walk(s.then, local_scope)
            if s.else_ is not None:
                walk(s.else_, local_scope)
        else:
            fail(f"not a statement: {s!r}")

    walk(f.body, {})
