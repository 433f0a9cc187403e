"""Fixtures for the scorer lifecycle tests: the tiny COMET models of the reward tests (built once per
session by tests/rewards/conftest.py's fixture, reused here, not rebuilt)."""
from tests.rewards.conftest import tiny_comet_dir  # noqa: F401  (a fixture, re-exported)
