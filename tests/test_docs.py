"""The README's code and the quick-start example do what they say."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_python_block_prints_the_ir_it_shows(capsys):
    src = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", src, re.S)[0]
    shown = re.findall(r"prints\n```\n(.*?)```", src, re.S)[0]
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert out == shown * 2


def test_quickstart_compiles_once():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cache: 1 compile, 4 hits, 1 miss for 5 batch sizes" in r.stdout
    assert "ShapeError: argument x: expected rank 2" in r.stdout


def test_fit_example_learns_with_one_compile():
    """examples/fit.py: SGD with rj.value_and_grad on batch sizes that change every epoch."""
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "fit.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr          # (it asserts the loss fell 10x)
    assert "compiles: 1" in r.stdout, r.stdout


def test_oscillator_fit_recovers_its_parameters_with_one_compile():
    """examples/fit_oscillator.py: grad through a scan time loop and a while_loop."""
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "fit_oscillator.py"), "--small"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr          # (it asserts k, c and the while_loop gradient)
    assert "compiles: 1 for" in r.stdout, r.stdout


def test_readme_llvm_block_prints_the_lowered_ir_it_shows(capsys):
    src = (ROOT / "README.md").read_text()
    code, shown = re.findall(r"## The LLVM backend\n\n```python\n(.*?)```\n[^\n]*prints[^\n]*\n```\n(.*?)```",
                             src, re.S)[0]
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out == shown
