"""IR passes, the pass pipeline and the verifier."""
from .dce import dead_code_elimination  # noqa: F401
from .matvec_pairs import matvec_pairs  # noqa: F401
from .passes import Pass, run_pipeline  # noqa: F401
from .pointwise_loops import pointwise_loops  # noqa: F401
from .pipeline import default_pipeline  # noqa: F401
from .split_complex import split_complex  # noqa: F401
from .verify import verify, VerificationError  # noqa: F401
