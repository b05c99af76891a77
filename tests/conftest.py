import atexit
import os
import shutil
import tempfile

# The persistent cache of compiled code goes to a fresh directory for this test session,
# never to the user's ~/.cache/relaxjax (set before relaxjax is imported; subprocesses that
# tests start inherit it).
_CACHE_DIR = tempfile.mkdtemp(prefix="relaxjax-test-cache-")
os.environ["RELAXJAX_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# few examples: the whole suite on a lent GPU within minutes (benchmarks/gpu_session.sh)
settings.register_profile("quick", max_examples=6, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
