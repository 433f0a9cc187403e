"""Record: what identifies and reproduces a run (its id, the run snapshot, the Slurm code snapshot, git state, secret redaction), and what it logged (verl's metrics file).
May import: src.config only; written before anything runs, whole or absent.
"""
