"""Hypothesis profiles: `dev` by default; `ci` (make test on CI) via `--hypothesis-profile ci`."""

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=50)
settings.register_profile(
    "ci",
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# The Hypothesis pytest plugin applies --hypothesis-profile after this file is imported.
settings.load_profile("dev")
