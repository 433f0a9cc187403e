"""`python -m src.trainer --config-path=<snapshot> --config-name=verl_config ...`: verl's training
entry with the time-limit save (src/trainer/entry.py), the command the runner starts.

Runs the importable module's code, not a copy under __main__: Ray pickles TimeLimitTaskRunner by
reference to src.trainer.entry, which the TaskRunner actor imports (PYTHONPATH has the code root).
"""
from src.trainer.entry import main

main()
