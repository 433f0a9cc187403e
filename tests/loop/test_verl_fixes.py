"""verl's fixes (src/verl_fixes) in the loop env's pinned verl and vLLM: verl imports them in a process through
VERL_USE_EXTERNAL_MODULES as a run sets it, both ends of the weight sync take the launch's tag, and nothing of vLLM
is imported for them where a process does not import it itself. Two runs on one host in real steps:
tests/loop/test_smoke_on_cpu.py (the smoke beside another run's socket)."""
from __future__ import annotations

import json

from src.verl_fixes import REGISTER_MODULE
from src.verl_fixes.weight_sync_socket import PREFIX, TAG_ENV

from .conftest import REPO, in_loop_env


def test_both_ends_of_the_weight_sync_take_the_launchs_tag_in_the_pinned_verl():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), TAG_ENV: "a1b2c3d4e5f6",
           "VERL_USE_EXTERNAL_MODULES": f"{REGISTER_MODULE},src.cpu_platform.register", "VERL_PLATFORM": "cpu"}
    code = ("import json, sys, verl\n"
            "lazy = 'verl.workers.rollout.vllm_rollout.vllm_rollout' not in sys.modules\n"
            "from verl.workers.rollout.vllm_rollout import vllm_rollout, utils\n"
            "from src.verl_fixes import weight_sync_socket as w\n"
            "ends = ((vllm_rollout, 'ServerAdapter', '__init__'), "
            "(utils, 'vLLMColocateWorkerExtension', '_get_zmq_handle'))\n"
            "marked = [getattr(getattr(m, c), f).__dict__.get(w.MARK, False) for m, c, f in ends]\n"
            "receiver = object.__new__(utils.vLLMColocateWorkerExtension)\n"
            "receiver.model_runner, receiver.local_rank = None, 0\n"
            "print(json.dumps([lazy, marked, receiver._get_zmq_handle()]))")
    lazy, marked, receiver = json.loads(in_loop_env(code, env))
    assert lazy, "the fixes imported verl's vLLM rollout into a process that had not imported it"
    assert marked == [True, True]
    # the receiver's path as verl builds it (job id 0 without VERL_RAY_JOB_ID), the tag first
    assert receiver == f"{PREFIX}a1b2c3d4e5f6-0-replica-0-rank-0.sock"
