"""Code the tests run inside verl's actors, through Ray's `actor.__ray_call__.remote(fn)` (fn(actor
instance) runs in the actor's own process, on the actor unchanged). Stdlib at import only: the
actor imports this module by reference."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

# a fresh interpreter with the actor's environment and no working directory of ours: importable
# here means importable on a node that has the runner's environment
CLEAN_IMPORT = ("import src.rewards.compute as c, src.rewards.managers as m; "
                "print(c.__file__); print(m.__file__); print(c.compute_score.__qualname__)")


def _qualified(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def reward_worker(worker) -> dict:
    """Inside verl's RewardLoopWorker: what verl loaded there, and the node's environment."""
    manager = worker.reward_manager
    fn = manager.compute_score
    # verl wraps the reward function with its kwargs (verl/trainer/ppo/reward.py get_custom_reward_fn)
    raw = fn.args[0] if isinstance(fn, functools.partial) else fn
    clean = subprocess.run([sys.executable, "-c", CLEAN_IMPORT], cwd="/", env=dict(os.environ),
                           capture_output=True, text=True, timeout=300)
    return {"pid": os.getpid(), "manager": _qualified(type(manager)), "compute_score": _qualified(raw),
            "compute_score_file": sys.modules[raw.__module__].__file__,
            "env": {k: os.environ.get(k) for k in ("QE_SCORER_URL", "QE_SCORER_LOG", "PYTHONPATH", "HF_HUB_OFFLINE")},
            "clean_import": (clean.returncode, clean.stdout.split(), clean.stderr[-2000:])}
