"""Slurm: this process's place in a job (task), a run's Slurm request from its plan, and a sweep submitted through submitit.
May import: src.config, src.plan, src.record; the Hydra launcher plugin (hydra_plugins/qe_rl) calls the sweep.
"""
