"""The package's structure, checked: imports flow one way through the layers README.md draws
(trace -> graph IR -> passes -> loop IR -> backend -> runtime), with no import circles, and
every primitive has a lowering on every backend.

The import graph is read from the source with ``ast``: imports inside functions count as
much as module-level ones, and importing ``a.b.c`` from outside package ``a.b`` runs (so
depends on) ``a/b/__init__.py`` too."""
from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import relaxjax  # noqa: F401  (registers every primitive and backend)

PACKAGE_DIR = pathlib.Path(relaxjax.__file__).parent

# Layers, bottom to top: a module may import modules of its own layer or of layers below.
# Keys are module names or package prefixes; the longest matching key decides.
LAYERS = [
    ("plain data", ["relaxjax._version", "relaxjax.errors", "relaxjax.dtypes", "relaxjax.dimpoly",
                    "relaxjax.shapes",
                    "relaxjax.structs", "relaxjax.ir", "relaxjax.tir", "relaxjax.library",
                    "relaxjax.cache", "relaxjax.op_table"]),
    ("tracing", ["relaxjax.core"]),
    ("primitives", ["relaxjax.lax"]),
    ("front ends", ["relaxjax.numpy", "relaxjax.nn", "relaxjax.frontend", "relaxjax.pykernel"]),
    ("passes", ["relaxjax.compile"]),
    ("backends", ["relaxjax.backends"]),
    ("driver and tools", ["relaxjax", "relaxjax.jit", "relaxjax.ad", "relaxjax.jit_args", "relaxjax.jit_trace",
                          "relaxjax.jit_cache", "relaxjax.signature", "relaxjax.testing",
                          "relaxjax.__main__"]),
]
_LEVEL = {prefix: (level, name) for level, (name, prefixes) in enumerate(LAYERS) for prefix in prefixes}


def layer_of(module: str) -> tuple[int, str]:
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        key = ".".join(parts[:k])
        if key in _LEVEL:
            return _LEVEL[key]
    raise KeyError(module)


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imported(module: str, path: pathlib.Path, node) -> list[str]:
    """The relaxjax modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")
            if path.name != "__init__.py":
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            pkg = ".".join(base + ([node.module] if node.module else []))
        else:
            pkg = node.module or ""
        names = [f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in MODULES else pkg for a in node.names]
    out = []
    for n in names:
        while n not in MODULES and "." in n:
            n = n.rsplit(".", 1)[0]
        if n in MODULES and n.startswith("relaxjax"):
            out.append(n)
    return out


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(module, path, node):
                # a.b.c also runs the __init__ of every package above it, except the ones
                # the importer is inside of (they are running already) and relaxjax itself
                parts = target.split(".")
                for k in range(2, len(parts) + 1):
                    dep = ".".join(parts[:k])
                    inside = module == dep or module.startswith(dep + ".")
                    if dep in MODULES and dep != module and (dep == target or not inside):
                        graph[module].add(dep)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    out = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


GRAPH = import_graph()


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if not _has_layer(m)]
    assert not unplaced, f"modules missing from LAYERS (say where they sit): {unplaced}"


def _has_layer(m: str) -> bool:
    try:
        layer_of(m)
    except KeyError:
        return False
    return True


def test_imports_flow_down_the_layers():
    upward = []
    for module, deps in sorted(GRAPH.items()):
        level, name = layer_of(module)
        for dep in sorted(deps):
            dep_level, dep_name = layer_of(dep)
            if dep_level > level:
                upward.append(f"{module} ({name}) imports {dep} ({dep_name})")
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


def test_no_import_circles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_catch_what_they_are_for():
    # the checker itself: an upward edge and a circle are found in a made-up graph
    made_up = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycles(made_up) == [["a", "b", "c"]]
    assert layer_of("relaxjax.compile.fuse")[0] > layer_of("relaxjax.tir.nodes")[0]
    assert layer_of("relaxjax.backends.llvm.codegen")[0] > layer_of("relaxjax.compile")[0]
    # relative imports inside functions are resolved
    assert "relaxjax.lax.tir_interp" in GRAPH["relaxjax.pykernel.call"]


@pytest.mark.parametrize("backend", ["llvm", "cuda-emulated"])
def test_backends_are_handed_lowered_modules(backend):
    """No backend runs passes: one handed an unlowered module says so; the driver lowers
    what a user's pipeline leaves before it hands the module over."""
    from relaxjax.backends import get_backend
    from relaxjax.compile.simplify import canonicalize

    def f(x):
        return relaxjax.numpy.tanh(x * 2.0) + 1.0
    module = relaxjax.make_ir(f)(relaxjax.ShapeDtypeStruct(("n",), "float32"))
    with pytest.raises(ValueError, match="Legalize"):
        get_backend(backend)(module)
    g = relaxjax.jit(f, pipeline=[canonicalize], backend=backend)
    for n in (1, 7, 1000):
        x = np.linspace(-3, 3, n, dtype=np.float32)
        np.testing.assert_allclose(g(x), np.tanh(x.astype(np.float64) * 2) + 1, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Every primitive has a lowering on every backend
# ---------------------------------------------------------------------------------------

def _primitives():
    from relaxjax.core import PRIMITIVES
    return sorted(PRIMITIVES.values(), key=lambda p: p.name)


def _accepted_dtype(p):
    """A dtype the elementwise primitive takes, with its operand dtypes."""
    for d in map(np.dtype, ("float32", "int32", "bool")):
        args = [d] * (2 if p.name not in _UNARY else 1)
        if p.name == "select":
            args = [np.dtype(bool), d, d]
        types = [relaxjax.TensorType((), a) for a in args]
        params = {"dtype": np.dtype("float64")} if p.name == "convert" else {}
        try:       # a dtype both the primitive's rules and its NumPy reference take
            out = p.dtype_rule(*types, **params)
            with np.errstate(all="ignore"):
                p.impl(*[np.ones(1, a) for a in args], **params)
        except TypeError:
            continue
        return args, np.dtype(out), params
    raise AssertionError(f"{p.name} takes none of float32, int32, bool")


def _arity(p) -> int:
    import inspect
    return len([q for q in inspect.signature(p.impl).parameters.values()
                if q.kind == q.POSITIONAL_OR_KEYWORD])


_UNARY = {p.name for p in _primitives() if p.kind == "elementwise" and _arity(p) == 1}


@pytest.mark.parametrize("prim", _primitives(), ids=lambda p: p.name)
def test_every_primitive_has_a_lowering(prim):
    from relaxjax.compile.lowering import BLAS, LIBRARY_CALLS, lowering_kind
    from relaxjax.library import lookup
    if prim.kind == "complex":
        # only ever on complex values (real, imag, complex): SplitComplex rewrites each into
        # real operations before anything is lowered
        assert prim.complex_rule is not None
        return
    how = lowering_kind(prim.name, prim.kind)
    assert how is not None, f"{prim.name}: Legalize has no lowering for it"
    if how == "host":
        # the runtimes execute views and shape checks themselves, data-dependent ops
        # through the primitive's reference implementation, control flow through the one
        # driver of its regions (backends/control_flow.py)
        assert prim.name in ("reshape", "match_cast") or prim.kind in ("data_dependent", "control")
    if how == "matmul":
        for name in BLAS.values():
            impl = lookup(name)
            assert impl.cpu is not None and impl.numpy is not None and impl.cuda is not None
    if how == "library":
        impl = lookup(LIBRARY_CALLS[prim.name])
        assert impl.cpu is not None and impl.numpy is not None and impl.cuda is not None


@pytest.mark.parametrize("prim", [p for p in _primitives() if p.kind == "elementwise"],
                         ids=lambda p: p.name)
def test_every_elementwise_primitive_renders_on_every_backend(prim):
    """Each backend's scalar-op table turns the primitive's loop-level Op into code, and the
    reference interpreter has its reference implementation."""
    from relaxjax import tir
    from relaxjax.backends.cuda import scalar_ops as cuda_ops
    from relaxjax.backends.llvm import scalar_ops as llvm_ops
    from relaxjax.backends.llvm.codegen import KernelEmitter, _Fn
    from relaxjax.lax.elementwise import scalar_reference
    assert prim.name in llvm_ops.SCALAR_OPS and prim.name in cuda_ops.SCALAR_OPS
    arg_dtypes, out_dtype, _ = _accepted_dtype(prim)
    e = tir.Op(prim.name, tuple(tir.Var(f"x{k}", d) for k, d in enumerate(arg_dtypes)), out_dtype)
    assert scalar_reference(prim.name) is not None
    cuda = cuda_ops.render_op(e, [f"x{k}" for k in range(len(arg_dtypes))])
    assert isinstance(cuda, str) and cuda
    em = KernelEmitter(tir.PrimFunc("k", [], 0, [], tir.Seq([])), "k")
    em.fn = _Fn()
    llvm = llvm_ops.render_op(em, e, [f"%x{k}" for k in range(len(arg_dtypes))])
    assert isinstance(llvm, str) and llvm


def test_an_op_missing_from_a_table_is_reported():
    from relaxjax import tir
    from relaxjax.backends.cuda import scalar_ops as cuda_ops
    from relaxjax.compile.lowering import lowering_kind
    assert lowering_kind("no_such_op", "opaque") is None
    with pytest.raises(NotImplementedError, match="no lowering for 'no_such_op'"):
        cuda_ops.render_op(tir.Op("no_such_op", (tir.Var("x", np.dtype("float32")),),
                                  np.dtype("float32")), ["x"])
