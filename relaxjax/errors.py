"""Public exceptions for shape and tracing problems."""
from __future__ import annotations


class ShapeError(ValueError):
    """A shape does not satisfy what an operation or a signature requires."""


class InconclusiveDimensionError(ShapeError):
    """A relation between symbolic dimensions cannot be decided at trace time.

    Raised instead of guessing: the message names the operation, the two
    expressions and how to make the relation decidable.
    """


class TracerConversionError(TypeError):
    """A traced array was used where a concrete value is needed (e.g. ``if x[0] > 0``)."""


class KernelSyntaxError(SyntaxError):
    """A kernel (``rj.kernel``) uses Python the kernel language does not cover; the message
    names the kernel, the file and line, and the construct."""
