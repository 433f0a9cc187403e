"""Scorer: the QE scoring service, unbabel-comet models behind a dynamic-batching HTTP API, in its own environment.
May import: nothing else of src, never verl; this file and config.py stay stdlib + PyYAML (the train env writes scorer configs).
"""
