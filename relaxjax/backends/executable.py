"""``Executable``: what every backend's compiled module shares.

An executable is called as ``exe(dims, arrays) -> list of results`` (``dims``: dim name ->
int, bound from the arguments; ``arrays``: the parameters' values).  It prints its program
at the stages it has (``as_text``) and, for backends that plan memory, reports the plan
(``memory_stats``).  Backends that run loop-level programs take a module the driver has
fully lowered (``lowered=True``); none runs passes itself.  A backend may also store whole
executables in the persistent cache (``cache_key``/``from_cache`` on its compile function,
``to_cache`` on the executable: see ``jit_cache.build_cached``); the LLVM backend does, the
others simply do not implement them.
"""
from __future__ import annotations

from typing import Callable

from ..compile.legalize import check_lowered
from ..compile.memplan import MemoryPlan, plan_memory
from ..ir import Function, IRModule
from ..shapes import dim_str, eval_dim
from ..tir import PrimFunc


class Executable:
    backend = "?"             # the registry name, for messages

    def __init__(self, module: IRModule, *, lowered: bool = True, plan: bool = True):
        if lowered:
            check_lowered(module, self.backend)
        self.module = module
        self.fn: Function = module.main
        self.memory_plan: MemoryPlan | None = plan_memory(self.fn) if plan else None

    @classmethod
    def restored(cls, module: IRModule, memory_plan: MemoryPlan | None):
        """An executable of this class, not initialised, holding ``module`` and its memory
        plan as the process that stored it checked and planned them (the backend restores
        the rest)."""
        exe = cls.__new__(cls)
        exe.module = module
        exe.fn = module.main
        exe.memory_plan = memory_plan
        return exe

    # -- inspection ------------------------------------------------------------------------
    def text_stages(self) -> dict[str, Callable[[], str]]:
        """Stage name -> its text; backends add theirs (``llvm``, ``cuda``, ...)."""
        stages = {
            "optimized": lambda: "\n\n".join(str(f) for f in self.module.functions.values()
                                             if isinstance(f, Function)),
            "loops": lambda: "\n\n".join(str(f) for f in self.module.functions.values()
                                         if isinstance(f, PrimFunc)),
        }
        if self.memory_plan is not None:
            stages["memory"] = lambda: str(self.memory_plan)
        return stages

    def as_text(self, stage: str) -> str:
        stages = self.text_stages()
        if stage not in stages:
            raise ValueError(f"unknown stage {stage!r} for the {self.backend} backend; one of: "
                             f"{', '.join(stages)}")
        return stages[stage]()

    def memory_stats(self, dims: dict | None = None) -> dict:
        """The memory plan: intermediates, the storages they share and their total bytes (a
        symbolic expression as text, or an int given ``dims``, a dict dim name -> value)."""
        plan = self.memory_plan
        if plan is None:
            raise NotImplementedError(f"the {self.backend} backend plans no memory: it has no "
                                      f"memory_stats(); use backend='llvm'")
        out = {"intermediate_values": len(plan.storage_of),
               "intermediate_storages": len(plan.storages),
               "intermediate_bytes": dim_str(plan.total_bytes),
               "intermediate_bytes_without_reuse": dim_str(plan.values_bytes)}
        if dims is not None:
            D = {str(k): int(v) for k, v in dims.items()}
            out["intermediate_bytes"] = eval_dim(plan.total_bytes, D)
            out["intermediate_bytes_without_reuse"] = eval_dim(plan.values_bytes, D)
        return out
