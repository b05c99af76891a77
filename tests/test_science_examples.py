"""The scientific examples run (their --small mode) and compile once for every size.

Each script asserts its own checks (agreement with the same algorithm in NumPy float64 and a
physical invariant), so a zero exit status means they held; here we also check the lines it
prints about them.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_example(name: str) -> str:
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name), "--small"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_heat_equation_one_compile_for_every_grid():
    """examples/heat_equation.py: a fori_loop of 5-point stencil steps with boundary
    conditions as .at[] updates, on grids of several (n, m)."""
    out = run_example("heat_equation.py")
    assert "compiles: 1 for 3 grid sizes" in out, out
    assert "compiles after every run: 1 for 4 grid sizes" in out, out
    errors = [float(e) for e in re.findall(r"max \|error\| vs NumPy (\S+?);", out)]
    assert len(errors) == 4 and max(errors) < 1e-9, out
    assert "total heat" in out and "steady state" in out, out


def test_nbody_one_compile_for_every_particle_count():
    """examples/nbody.py: leapfrog in a scan, pairwise forces by broadcasting, several N."""
    out = run_example("nbody.py")
    assert "compiles: 1 for 3 particle counts" in out, out
    assert "compiles after every run: 1 for 4 particle counts" in out, out
    errors = [float(e) for e in re.findall(r"max \|error\| vs NumPy (\S+?);", out)]
    assert len(errors) == 3 and max(errors) < 1e-9, out
    drift = [float(d) for d in re.findall(r"max relative drift (\S+?);", out)]
    assert len(drift) == 3 and max(drift) < 1e-4, out
