"""Rewards: the translation reward verl's reward workers compute (format, degenerate checks, BLEU, QE over HTTP, token credit).
May import: src.data (the templates), src.scorer (its stdlib vocabulary only); never comet, which cannot live in the train env.
"""
