"""The math functions every code generator calls from the C math library, shared by the
LLVM and CUDA backends: loop-level op name -> (libm name of the float64 version, number of
arguments, whether glibc's libmvec has vector versions).  The float32 version's name ends
in ``f`` in both libm and CUDA's device library."""
from __future__ import annotations

MATH = {
    "exp": ("exp", 1, True), "exp2": ("exp2", 1, True), "expm1": ("expm1", 1, True),
    "log": ("log", 1, True), "log2": ("log2", 1, True), "log10": ("log10", 1, True),
    "log1p": ("log1p", 1, True), "sin": ("sin", 1, True), "cos": ("cos", 1, True),
    "tan": ("tan", 1, True), "asin": ("asin", 1, True), "acos": ("acos", 1, True),
    "atan": ("atan", 1, True), "sinh": ("sinh", 1, True), "cosh": ("cosh", 1, True),
    "tanh": ("tanh", 1, True), "asinh": ("asinh", 1, True), "acosh": ("acosh", 1, True),
    "atanh": ("atanh", 1, True), "erf": ("erf", 1, True), "atan2": ("atan2", 2, True),
    "pow": ("pow", 2, True),
}


def libm_name(op: str, single: bool) -> str:
    """The C name of ``op``'s float32 (``single``) or float64 version."""
    base = MATH[op][0]
    return base + "f" if single else base
