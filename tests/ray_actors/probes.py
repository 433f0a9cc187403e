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


def agent_loop_worker(worker) -> dict:
    """Inside verl's agent-loop worker: the class Ray runs, and what verl's agent loop registry (per
    process) resolves the configured agent loop to, the lookup verl's _run_agent_loop makes."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    name = worker.config.actor_rollout_ref.rollout.agent.default_agent_loop
    entry = _agent_loop_registry.get(name)
    return {"pid": os.getpid(), "worker": _qualified(type(worker)), "agent_loop": name,
            "resolves_to": _qualified(hydra.utils.get_class(entry["_target_"])) if entry else None}


class ScriptedPolicy:
    """The GPU boundary: verl's LLM server client (vLLM needs a GPU), answering each prompt's k-th
    request with `responses[k % len(responses)]` (token ids). The second request of the first prompt
    it sees raises, as a rollout or reward call that fails does: verl's agent loop then tags that
    prompt's group `failure` while its other sessions finish (agent_loop_tq.py, _run_prompt)."""

    def __init__(self, responses: list[list[int]]):
        self.responses = responses
        self.calls: dict[tuple, int] = {}

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        key = tuple(prompt_ids)
        k = self.calls.get(key, 0)
        self.calls[key] = k + 1
        if k == 1 and next(iter(self.calls)) == key:
            raise RuntimeError("scripted failure of one session (tests/ray_actors/probes.py ScriptedPolicy)")
        return TokenOutput(token_ids=list(self.responses[k % len(self.responses)]), stop_reason="completed")
