"""What a kernel's source says before any typing: its source lines and error messages, which
parameters it writes (its outputs), and where each local scalar is declared.

Python scopes locals to the whole function; the loop-level IR declares them in a block.  A
local is declared in the innermost block holding every use of it, moved out of a block
(and out of the loop that owns it) while some read in that block may see a value from an
earlier iteration or none at all, so that the program keeps Python's meaning.  It is
declared by its first assignment when that assignment comes first in the block, else
zero-initialised just before its first use.
"""
from __future__ import annotations

import ast
import inspect
import os
import textwrap

from ..errors import KernelSyntaxError

_UNSUPPORTED = {ast.While: "while loops", ast.Break: "break", ast.Continue: "continue",
                ast.With: "with blocks", ast.Try: "try blocks", ast.Raise: "raise",
                ast.FunctionDef: "nested functions", ast.AsyncFunctionDef: "nested functions",
                ast.ClassDef: "classes", ast.Lambda: "lambdas", ast.Delete: "del",
                ast.Global: "global", ast.Nonlocal: "nonlocal", ast.Import: "import",
                ast.ImportFrom: "import", ast.ListComp: "list comprehensions",
                ast.GeneratorExp: "generators", ast.DictComp: "comprehensions",
                ast.SetComp: "comprehensions", ast.Yield: "yield", ast.Await: "await",
                ast.NamedExpr: "the walrus operator",
                ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets", ast.JoinedStr: "f-strings",
                ast.Slice: "slices (index every axis with a scalar)", ast.Match: "match"}


class Source:
    """A kernel function's parsed source, with error reporting by source line."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        try:
            text = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError) as e:
            raise KernelSyntaxError(f"kernel {self.name}: its source is not available ({e}); "
                                    f"define kernels in a file") from None
        self.lines = text.splitlines()
        self.file = os.path.basename(inspect.getsourcefile(fn) or "<unknown>")
        self.offset = fn.__code__.co_firstlineno - 1
        mod = ast.parse(text)
        if not mod.body or not isinstance(mod.body[0], ast.FunctionDef):
            raise KernelSyntaxError(f"kernel {self.name}: rj.kernel takes a plain def function")
        self.fdef: ast.FunctionDef = mod.body[0]

    def where(self, node) -> str:
        line = getattr(node, "lineno", None)
        if line is None:
            return f"kernel {self.name} ({self.file})"
        text = self.lines[line - 1].strip() if line <= len(self.lines) else ""
        return f"kernel {self.name} ({self.file}:{line + self.offset}: `{text}`)"

    def error(self, node, msg: str, cls=KernelSyntaxError):
        raise cls(f"{self.where(node)}: {msg}")

    def check_syntax(self) -> None:
        for node in ast.walk(self.fdef):
            if node is self.fdef:
                continue
            for t, what in _UNSUPPORTED.items():
                if isinstance(node, t):
                    self.error(node, f"{what} {'are' if what.endswith('s') else 'is'} not "
                                     f"supported in kernels")
            if isinstance(node, ast.For) and node.orelse:
                self.error(node, "for/else is not supported in kernels")


# ---------------------------------------------------------------------------------------
# Statements: the expressions they hold directly, and their nested blocks
# ---------------------------------------------------------------------------------------

def exprs_of(s) -> list:
    if isinstance(s, ast.For):
        return [s.target, s.iter]
    if isinstance(s, ast.If):
        return [s.test]
    if isinstance(s, ast.Assign):
        return list(s.targets) + [s.value]
    if isinstance(s, ast.AugAssign):
        return [s.target, s.value]
    if isinstance(s, ast.AnnAssign):
        return [s.target] + ([s.value] if s.value is not None else [])
    if isinstance(s, (ast.Expr, ast.Return)):
        return [s.value] if s.value is not None else []
    return []


def blocks_of(s) -> list:
    if isinstance(s, ast.For):
        return [s.body]
    if isinstance(s, ast.If):
        return [s.body, s.orelse]
    return []


def names_in(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _reads(s, name) -> bool:
    """Does statement ``s`` itself (not its nested blocks) read ``name``?"""
    for e in exprs_of(s):
        for n in ast.walk(e):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                return True
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == name:
        return True
    return False


def _assigns(s, name) -> bool:
    if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
                    if not isinstance(s, ast.AnnAssign) or s.value is not None:
                        return True
    return False


def _definite(stmts, name, assigned: bool):
    """(assigned after ``stmts``, every read sees an assignment made before it)."""
    ok = True
    for s in stmts:
        if _reads(s, name) and not assigned:
            ok = False
        if isinstance(s, ast.For):
            _, body_ok = _definite(s.body, name, assigned)
            ok &= body_ok
        elif isinstance(s, ast.If):
            a1, ok1 = _definite(s.body, name, assigned)
            a2, ok2 = _definite(s.orelse, name, assigned)
            ok &= ok1 and ok2
            assigned = a1 and a2
        if _assigns(s, name):
            assigned = True
    return assigned, ok


# ---------------------------------------------------------------------------------------
# Locals: where each is declared
# ---------------------------------------------------------------------------------------

class Scopes:
    """``decl[name] = (id of the statement, "init" | "zero")``: the local is declared by that
    statement (an assignment) or zero-initialised just before it."""

    def __init__(self, fdef: ast.FunctionDef, locals_: set):
        self.paths: dict = {}            # name -> list of block paths of its uses
        self.block_of: dict = {(): fdef.body}
        self.parent: dict = {}           # block path -> path of the enclosing block
        self._walk(fdef.body, ())
        self.decl: dict = {}
        for name in locals_:
            if name in self.paths:
                self.decl[name] = self._place(name)

    def _walk(self, stmts, path) -> None:
        for s in stmts:
            for e in exprs_of(s):
                for n in names_in(e):
                    self.paths.setdefault(n, []).append(path)
            for k, blk in enumerate(blocks_of(s)):
                sub = path + ((id(s), k),)
                self.block_of[sub] = blk
                self.parent[sub] = path
                self._walk(blk, sub)

    def _place(self, name):
        paths = self.paths[name]
        common = paths[0]
        for p in paths[1:]:
            k = 0
            while k < min(len(common), len(p)) and common[k] == p[k]:
                k += 1
            common = common[:k]
        while common and not _definite(self.block_of[common], name, False)[1]:
            common = self.parent[common]
        stmts = self.block_of[common]
        first = next(s for s in stmts if _mentions(s, name))
        direct = (isinstance(first, ast.Assign) and len(first.targets) == 1 and
                  isinstance(first.targets[0], ast.Name) and first.targets[0].id == name and
                  name not in names_in(first.value)) or \
                 (isinstance(first, ast.AnnAssign) and isinstance(first.target, ast.Name) and
                  first.value is not None and name not in names_in(first.value))
        ok = _definite(stmts, name, False)[1]
        return (id(first), "init" if direct and ok else "zero")


def _mentions(s, name) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(s))


def assigned_names(fdef) -> dict:
    """name -> number of assignments to it (plain names only; loop targets apart)."""
    out: dict = {}
    for node in ast.walk(fdef):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    out[n.id] = out.get(n.id, 0) + 1
    return out


def loop_targets(fdef) -> set:
    return {n.id for node in ast.walk(fdef) if isinstance(node, ast.For)
            for n in ast.walk(node.target) if isinstance(n, ast.Name)}


def stored_params(fdef, params: list) -> dict:
    """param name -> first statement that stores into it (``p[...] = ...``)."""
    out: dict = {}
    for node in ast.walk(fdef):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        while any(isinstance(t, ast.Tuple) for t in targets):
            targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        for sub in targets:
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and \
                    sub.value.id in params:
                prev = out.get(sub.value.id)
                if prev is None or node.lineno < prev.lineno:
                    out[sub.value.id] = node
    return out
