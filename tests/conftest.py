"""Test-suite settings shared by every test module."""

import os

import pytest
from hypothesis import settings

from tfgshare.sim.profiles import load_profiles

# CI runs the property tests on fixed examples, so a green run is reproducible; a
# developer's run (no CI variable) draws new examples each time and keeps failures.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# One model in three sizes: small and busy, medium, large and light (6000 MB does not
# fit half of an 8 GB GPU, so default-sized starts run out of memory and retry).
TOY_PROFILES = """
models:
  toy:
    params: 5000000
    startup_s: 5
    batches:
      1: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 1.0}
      2: {step_time_s: 2.0, memory_mb: 3000, gpu_util: 0.6}
      3: {step_time_s: 0.5, memory_mb: 6000, gpu_util: 0.3}
"""


@pytest.fixture(scope="session")
def toy_profiles(tmp_path_factory):
    """The simulator property tests' profile (``TOY_PROFILES``), loaded."""
    path = tmp_path_factory.mktemp("prof") / "toy.yaml"
    path.write_text(TOY_PROFILES)
    return load_profiles(path)
