"""Evaluate: a trained policy on a prepared test set (`python -m src.evaluate ...`): generate, extract, BLEU/chrF and QE; the reward inspector (`python -m src.evaluate.inspect_reward`).
May import: src.config, src.data, src.node (the scorer process), src.plan (ScorerPlan), src.record (a run's snapshot and metrics file), src.rewards (parsing, BLEU, QE client), src.scorer (config kinds, vocabulary).
"""
