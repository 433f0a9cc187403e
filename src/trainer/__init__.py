"""Trainer: code verl runs inside its own processes (the entry with the time-limit save, the guarded replay buffer, the time-limit flag, the reward parts for per-component normalisation).
May import: src.rewards (the token-credit and per-component estimators it registers), src.verl_fixes (a run variable's name); verl at use, never at package import.
"""
