"""Token-level credit from QE error spans (`reward.credit=token`, docs/token-credit.md).

    ranges.py      scorer spans / BAD words (offsets in the translation) -> penalised character
                   ranges of the *response*, with a penalty each (reward workers; stdlib only)
    tokens.py      the policy tokenizer's byte-level tokens -> character ranges of the decoded
                   response; penalised ranges -> one penalty per response token
    estimator.py   `grpo_token`, registered with verl's core_algos.register_adv_est
    agent_loop.py  the single-turn agent loop whose output puts the token penalties into rm_scores,
                   and the agent loop manager that registers the estimator in the trainer process
    launch.py      reward.credit -> the plan's TokenCreditPlan -> verl config keys

Data path: compute_score returns `credit_ranges` (JSON) in its dict -> verl's reward loop puts it
in `reward_extra_info` -> the agent loop output's `as_dict` (verl's postprocess calls it) adds the
per-token penalties to `rm_scores` -> verl's `_compute_advantage` hands rm_scores to `grpo_token`
as token_level_rewards -> the estimator splits the last-token sequence score from the penalties.
"""
