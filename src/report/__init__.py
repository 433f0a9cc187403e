"""Report: plots, a validation-samples page and a summary from a run's files (`python -m src.report outputs/<run>`); a comparison of a sweep's runs.
May import: src.data (the templates the samples page parses), src.evaluate (where a sweep's run= evaluations lie, their files), src.record (snapshot, identity and sweep summary files), src.scorer (its stdlib vocabulary: severities, QE metric names).
"""

from .cli import build_report, main

__all__ = ["build_report", "main"]
