"""Test-suite settings shared by every test module."""

import os

from hypothesis import settings

# CI runs the property tests on fixed examples, so a green run is reproducible; a
# developer's run (no CI variable) draws new examples each time and keeps failures.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
