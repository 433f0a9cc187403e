"""Node: what runs on a node around training (environment, training process, QE scorer process, Ray cluster, process groups, preflight).
May import: src.config, src.scorer (its config file format; the backends' model files), src.plan, src.trainer (the time-limit flag, the checkpoint tracker), src.record, src.slurm, src.verl_fixes (what verl imports in every process, the weight sync's tag).
"""
