"""QE scoring service: unbabel-comet models behind a dynamic-batching HTTP API.

Runs in its own environment (.venv-scorer / envs/scorer.yml). This package file and
`config.py` stay stdlib + PyYAML only, because the train env (which cannot import comet)
builds and validates scorer configs with `src.scorer.config`.
"""
