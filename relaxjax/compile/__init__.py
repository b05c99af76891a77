"""IR passes, the pass pipeline and the verifier."""
from .passes import Pass, run_pipeline, dead_code_elimination  # noqa: F401
from .pipeline import default_pipeline  # noqa: F401
from .verify import verify, VerificationError  # noqa: F401
