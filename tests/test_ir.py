"""The IR: printing, the verifier, passes and RELAXJAX_DUMP_IR."""
import numpy as np
import pytest

import relaxjax as rj
import relaxjax.numpy as rnp
from relaxjax.compile import VerificationError, dead_code_elimination, default_pipeline, run_pipeline, verify
from relaxjax.ir import Binding, Function, IRModule, TensorType, Var
from relaxjax import lax

S = rj.ShapeDtypeStruct
n, k = rj.dims("n k")


def test_symbolic_shape_rules_in_printed_ir():
    ir = str(rj.make_ir(lambda x, y: (x.reshape(-1), x[1:x.shape[0] - 1], rnp.concatenate([x, y])))(
        S((n, 4), "float32"), S((k, 4), "float32")))
    assert "f32[n * 4] = reshape(x, new_sizes=(n * 4,))" in ir
    assert "f32[max(0, n - 2), 4] = slice(x" in ir          # n may be 1: NumPy gives 0 rows
    p = rj.dim("p", min=2)
    ir2 = str(rj.make_ir(lambda x: x[1:x.shape[0] - 1])(S((p, 4), "float32")))
    assert "f32[p - 2, 4] = slice(x, start=(1, 0), size=(p - 2, 4)" in ir2
    assert "f32[k + n, 4] = concatenate(x, y, axis=0)" in ir


def test_source_locations_are_recorded():
    mod = rj.make_ir(lambda x: x + 1.0)(np.ones(3, np.float32))
    (b,) = mod.main.bindings
    assert b.source.startswith("test_ir.py:")


def test_verifier_rejects_use_before_definition():
    t = TensorType((3,), np.dtype("float32"))
    x, y, z = Var(t), Var(t), Var(t)
    fn = Function("f", [x], ["x"], [Binding([z], lax.add, [x, y])], [z])
    with pytest.raises(VerificationError, match="before it is defined"):
        verify(IRModule({"f": fn}, "f"))


def test_verifier_rejects_inconsistent_struct_info():
    x = Var(TensorType((3,), np.dtype("float32")))
    bad = Var(TensorType((4,), np.dtype("float32")))
    fn = Function("f", [x], ["x"], [Binding([bad], lax.exp, [x])], [bad])
    with pytest.raises(VerificationError, match="disagrees"):
        verify(IRModule({"f": fn}, "f"))
    # without the rules (a fresh trace, whose types the rules just gave) only the structure
    # is checked: this one is well formed
    verify(IRModule({"f": fn}, "f"), rules=False)
    y, z = Var(bad.type), Var(bad.type)
    broken = Function("f", [x], ["x"], [Binding([z], lax.exp, [y])], [z])
    with pytest.raises(VerificationError, match="before it is defined"):
        verify(IRModule({"f": broken}, "f"), rules=False)


def test_verifier_rejects_unbound_dims():
    from relaxjax.shapes import symbol
    x = Var(TensorType((3,), np.dtype("float32")))
    y = Var(TensorType((symbol("q"),), np.dtype("float32")))
    fn = Function("f", [x], ["x"], [Binding([y], lax.broadcast_to, [x], {"shape": (symbol("q"),)})], [y])
    with pytest.raises(VerificationError):
        verify(IRModule({"f": fn}, "f"))


def test_unbound_dim_from_a_closure_is_a_clear_error():
    q = rj.dim("q")
    with pytest.raises(Exception, match="q"):
        rj.jit(lambda x: x + rnp.zeros((q,), "float32"))(np.ones(3, np.float32))


def test_dead_code_elimination_keeps_assertions_and_dims():
    def f(x):
        unused = rnp.exp(x)                       # dropped
        y = x[x > 0]
        return rnp.zeros((y.shape[0],), "float32")   # needs nz0, so boolean_mask stays
    mod = rj.make_ir(f)(np.ones(4, np.float32))
    out = dead_code_elimination(mod)
    names = [b.callee.name for b in out.main.bindings]
    assert "exp" not in names and "boolean_mask" in names
    verify(out)
    x = np.array([1, -1, 2], np.float32)
    assert rj.jit(f)(x).shape == (2,)


def test_dump_ir_after_each_pass(tmp_path, monkeypatch):
    path = tmp_path / "ir.txt"
    monkeypatch.setenv("RELAXJAX_DUMP_IR", str(path))
    rj.jit(lambda x: rnp.tanh(x) * 2.0)(np.ones(3, np.float32))
    text = path.read_text()
    assert "IR after tracing" in text and "IR after DeadCodeElimination" in text
    assert "tanh(x)" in text


def test_custom_pipeline_and_verification_after_each_pass():
    calls = []

    def spy(mod):
        calls.append(len(mod.main.bindings))
        return mod
    from relaxjax.compile import Pass
    f = rj.jit(lambda x: x + 1.0, pipeline=[Pass("Spy", spy)] + default_pipeline())
    assert f(np.ones(3, np.float32)).tolist() == [2, 2, 2]
    assert calls == [1]
    mod = rj.make_ir(lambda x: rnp.exp(x) + 1.0)(np.ones(3, np.float32))
    run_pipeline(mod, default_pipeline(), check=True)
