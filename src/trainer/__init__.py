"""Trainer: code verl runs inside its own processes (the entry with the time-limit save, the guarded replay buffer, the time-limit flag).
May import: src.rewards (the token-credit estimator it registers); verl at use, never at package import.
"""
