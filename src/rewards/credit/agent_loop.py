"""verl's own seams for token-level credit: an agent loop, its output, and the manager.

verl 0.9.1 builds `rm_scores` in `AgentLoopOutput.as_dict` (verl/experimental/agent_loop/
agent_loop.py): zeros with the scalar `reward_score` on the last response token. The V1 worker
(verl/trainer/ppo/v1/agent_loop_tq.py, `AgentLoopWorkerTQ._agent_loop_postprocess`) first runs
the reward (`_compute_score`, which fills `reward_score` and `extra_fields["reward_extra_info"]`
on the output object the agent loop returned), then calls that object's `as_dict()` and puts the
result into TransferQueue. So an agent loop that returns an output subclass can add the token
penalties to rm_scores without touching verl: `TokenCreditOutput.as_dict` reads the reward's
`credit_ranges` (src/rewards/credit/ranges.py) and the token -> character ranges computed in
`run` (src/rewards/credit/tokens.py).

`TokenCreditAgentLoopManager` (actor_rollout_ref.rollout.agent.agent_loop_manager_class, loaded
by verl's TaskRunnerV1.init_agent_loop_manager in the trainer process) registers the `grpo_token`
estimator in that process and starts `TokenCreditAgentLoopWorker`s, which register the agent loop
under AGENT_NAME in each worker process (actor_rollout_ref.rollout.agent.default_agent_loop).
"""
from __future__ import annotations

from typing import Any

import ray
import torch
from pydantic import PrivateAttr
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from src.rewards import components_log
from src.rewards.credit import estimator, ranges, tokens

AGENT_NAME = "token_credit_agent"
TOKENS_KEY = "credit_tokens"  # src/report/samples_page.py reads it


class TokenCreditOutput(AgentLoopOutput):
    """verl's output; `as_dict` adds the token penalties to the rm_scores verl built."""

    _token_ranges: list = PrivateAttr(default_factory=list)
    _response_chars: int = PrivateAttr(default=0)
    # where the trajectory comes from, for the per-sample credit log (src/rewards/components_log.py)
    _step: Any = PrivateAttr(default=None)

    def _credit(self) -> tuple[bool, list[dict]] | None:
        """(whether the ranges count, the reward's penalised ranges); None before the reward ran."""
        info = self.extra_fields.get("reward_extra_info")
        if self.reward_score is None or info is None:
            return None
        raw = info.get(ranges.RESULT_KEY)
        if raw is None:
            raise ValueError(f"the reward function returned no {ranges.RESULT_KEY!r}: agent loop {AGENT_NAME} needs "
                             f"reward.credit=token in the reward kwargs (set by the launcher)")
        chars, train, penalised = ranges.decode(str(raw))
        if chars != self._response_chars:
            raise ValueError(f"token credit: the reward parsed a response of {chars} characters, the agent loop "
                             f"decoded {self._response_chars}; the reward manager and the agent loop must decode "
                             f"the same ids")
        return train, penalised

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        credit = self._credit()
        if credit is None or "rm_scores" not in out:
            return out
        train, penalised = credit
        penalties = tokens.token_penalties(self._token_ranges, penalised if train else [])
        if penalties:
            out["rm_scores"] = out["rm_scores"] + torch.tensor(penalties, dtype=out["rm_scores"].dtype)
        # per-sample credit metrics: verl's V1 validation averages numeric reward_extra_info keys
        # into val-aux/<data_source>/<key>; in training the guarded replay buffer does the same
        # (train-aux/<key>/mean, src/trainer/reward_metrics.py), and the report's components log has them
        stats = tokens.credit_stats(self._token_ranges, penalised)
        info = out.get("extra_fields", {}).get("reward_extra_info")
        if isinstance(info, dict):
            info.update(stats)
            if not train:
                # validation rows: each token's characters and the penalty it would get in training,
                # for the samples page (verl's validation dump carries reward extras per sample)
                info[TOKENS_KEY] = tokens.encode_token_credit(
                    self._token_ranges, tokens.token_penalties(self._token_ranges, penalised))
        components_log.write(self._step, "train" if train else "val", stats)
        return out


def with_token_ranges(output: AgentLoopOutput, tokenizer) -> TokenCreditOutput:
    """verl's output as a TokenCreditOutput (the same fields set, so verl's as_dict dumps the same
    keys), with each response token's character range in the decoded response."""
    credited = TokenCreditOutput(**{name: getattr(output, name) for name in output.model_fields_set})
    text, credited._token_ranges = tokens.token_char_ranges(tokenizer, output.response_ids)
    credited._response_chars = len(text)
    return credited


class TokenCreditAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn agent loop; its output carries the token -> character ranges."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        credited = with_token_ranges(output, self.tokenizer)
        # the V1 worker passes every batch field to run(), the step too (a number or a 0-d tensor)
        try:
            credited._step = int(kwargs.get("global_steps"))
        except (TypeError, ValueError):
            credited._step = None
        return credited


def register_agent_loop() -> None:
    """verl's agent loop registry is per process: each worker registers the loop itself."""
    register(AGENT_NAME)(TokenCreditAgentLoop)


class TokenCreditAgentLoopWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """verl's TransferQueue agent loop worker, unchanged, with the token-credit loop registered."""

    def __init__(self, *args, **kwargs):
        register_agent_loop()
        super().__init__(*args, **kwargs)


class TokenCreditAgentLoopManager(AgentLoopManagerTQ):
    """verl's TransferQueue agent loop manager; runs in the trainer process (TaskRunner), where
    `_compute_advantage` looks the estimator up, so it registers `grpo_token` there."""

    def __init__(self, config, *args, **kwargs):
        estimator.register(config)
        super().__init__(config, *args, **kwargs)
        # after super(): AgentLoopManagerTQ.__init__ sets verl's worker class unconditionally
        self.agent_loop_workers_class = ray.remote(TokenCreditAgentLoopWorker)
