"""examples/llm_decode.py (its --small mode): a GPT-style decoder's prefill and KV-cache decode
steps, two cache styles (grown by concatenate, or preallocated and written at a traced
position), each compiled once for every batch size and cache length.

The script asserts its own checks (logits against the same model in NumPy float64
recomputing the whole sequence, the two cache styles against each other, one compile per
function in explicit mode), so a zero exit status means they held; here we also check the
lines it prints about them.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_llm_decode_one_compile_per_function_for_every_length():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "llm_decode.py"), "--small"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    # explicit signatures: one compile per function, for batch 1 and 8, prompt lengths 3 and
    # 16, cache lengths 0..47
    for name in ("prefill", "prefill_prealloc", "decode_concat", "decode_prealloc"):
        assert re.search(rf"^explicit {name}: compiles 1 \(\d+ hits\)$", out, re.M), out
    assert "explicit decode_concat after decoding from an empty cache (t = 0, 1, 2): compiles 1" in out, out
    # automatic mode is reported (its counts are what they are; see the example's docstring)
    for name in ("prefill", "prefill_prealloc", "decode_concat", "decode_prealloc"):
        assert re.search(rf"^automatic {name}: compiles \d+", out, re.M), out
    # correctness against NumPy float64, both styles, at both batch sizes
    errors = re.findall(r"max relative error concat (\S+), prealloc (\S+); concat vs prealloc "
                        r"over all \d+ logits (\S+),", out)
    assert len(errors) == 2, out
    assert max(float(e) for row in errors for e in row) < 1e-4, out
    # timings printed for both styles at both batch sizes
    assert len(re.findall(r"^  (concat  |prealloc): first token .* tokens/s", out, re.M)) == 4, out
