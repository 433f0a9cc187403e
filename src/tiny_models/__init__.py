"""Tiny random-weight models built offline from config (Qwen2 policy + byte-level BPE tokenizer, COMET QE checkpoints) for experiment=smoke_tiny and the tests.
May import: no other package of src (it runs in both environments: qe.py in the scorer env, policy.py in the train env).
"""
