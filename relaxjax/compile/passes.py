"""Passes (``IRModule -> IRModule`` with a name) and the pipeline runner.

``RELAXJAX_DUMP_IR=1`` prints the IR after every pass to stderr; any other value is a file
path the IR is appended to.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from ..ir import Function, IRModule, map_regions
from .verify import verify


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[IRModule], IRModule]

    def __call__(self, module: IRModule) -> IRModule:
        """The pass over ``module`` and, first, over every region (loop body, branch) in it,
        innermost first: a region is a module of its own to every pass."""
        return self.run(map_regions(module, self))

    def __repr__(self) -> str:
        return f"Pass({self.name})"


def _dump(stage: str, module: IRModule) -> None:
    target = os.environ.get("RELAXJAX_DUMP_IR")
    if not target or target == "0":
        return
    text = f"# ---- IR after {stage} ----\n{module}\n"
    if target == "1":
        sys.stderr.write(text)
    else:
        with open(target, "a") as f:
            f.write(text)


def run_pipeline(module: IRModule, passes: Sequence[Pass], *, check: bool | None = None,
                 dump_input: bool = True) -> IRModule:
    """Run ``passes`` in order; verify after each when ``check`` (or RELAXJAX_VERIFY=1)."""
    if check is None:
        check = os.environ.get("RELAXJAX_VERIFY", "0") not in ("", "0")
    if dump_input:
        _dump("tracing", module)
    for p in passes:
        module = p(module)
        _dump(p.name, module)
        if check:
            verify(module)
    return module


def rewrite_functions(module: IRModule, rewrite: Callable[[Function, dict], Function]) -> IRModule:
    """``module`` with each graph function (fused primitive groups aside) replaced by
    ``rewrite(fn, programs)``; ``programs`` maps the module's names to their functions, and
    the loop-level programs ``rewrite`` adds to it (see ``new_name``) join the module."""
    fns = dict(module.functions)
    programs = dict(fns)
    for name, f in module.functions.items():
        if isinstance(f, Function) and not f.attrs.get("primitive"):
            fns[name] = rewrite(f, programs)
    for name, p in programs.items():
        if name not in fns:
            fns[name] = p
    return IRModule(fns, module.entry)


def new_name(programs: dict, stem: str) -> str:
    """``stem_<k>`` (with ``_`` appended until free) for a program joining ``programs``."""
    name = f"{stem}_{len(programs)}"
    while name in programs:
        name += "_"
    return name
