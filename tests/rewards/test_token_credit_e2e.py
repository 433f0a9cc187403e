"""Token-level credit end to end on CPU, up to the GPU boundary, with verl's own code:

real reward function (verl's reward manager as loaded from the launcher's verl config) against the
real QE service on the tiny models -> the agent loop output's `as_dict` (what verl's V1 postprocess
calls to build rm_scores) -> verl's V1 `compute_advantage_for_multi_trajectories` calling the
registered `grpo_token` estimator. The advantages are checked against an independent computation
(the service's spans asked directly, the tokenizer's own offset mapping, group statistics in plain
Python), and with weight 0 against verl's `grpo` on the rm_scores verl builds with sequence credit.

What is not verl's code here: the two assignments of verl's `AgentLoopWorker._compute_score` that
store the reward manager's answer on the output (a Ray call in verl), done by hand, and the policy
server (vLLM needs a GPU), replaced by one that answers with fixed token ids.
"""
from __future__ import annotations

import json
import re
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.helpers.reward_config import extra_info
from tests.helpers.verl_reward_harness import run, verl_config_for

SRC_ZH = "这只猫坐在垫子上。"
SRC_EN = "The cat sat on the mat."
# two prompts (groups), four answers each; one answer breaks the format (no scorer call, no ranges)
GROUPS = {
    "uid-zh-en": (SRC_ZH, "zh", "en", [
        "<think>猫 is cat.</think>\n<translate>The cat sat on the mat.</translate>",
        "<think>猫 is cat.</think>\n<translate>A cat is sitting on the mat today.</translate>",
        "<think>垫子 is mat.</think>\n<translate>\n  The dog sat on a carpet.\n</translate>",
        "<think>no tags after this</think> The cat sat on the mat.",
    ]),
    "uid-en-zh": (SRC_EN, "en", "zh", [
        "<think>cat is 猫.</think>\n<translate>这只猫坐在垫子上。</translate>",
        "<think>mat is 垫子.</think>\n<translate>猫坐在垫子上了。</translate>",
        "<think>x</think>\n<translate>一只狗坐在地毯上。</translate>",
        "<think>x</think>\n<translate>猫在垫子上坐着呢。</translate>",
    ]),
}
DATA_SOURCES = {"uid-zh-en": "wmt_zh_en/zh-en", "uid-en-zh": "wmt_en_zh/en-zh"}
MQM = {"minor": 1.0, "major": 5.0, "critical": 10.0}
STEP = 7


def response_ids(tokenizer, response: str) -> list[int]:
    # what vLLM hands back: the answer's tokens and the end-of-turn token
    return tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def trajectory(tokenizer, uid: str, response: str, split: str = "train"):
    """One finished trajectory as verl's agent loop hands it to the reward loop."""
    from verl import DataProto

    src, src_lang, tgt_lang, _ = GROUPS[uid]
    info = extra_info(src, src_lang, tgt_lang, template="chat", split=split)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": src}], tokenize=False,
                                           add_generation_prompt=True)
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = response_ids(tokenizer, response)
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([p]), "responses": torch.tensor([r]),
                 "attention_mask": torch.tensor([[1] * (len(p) + len(r))])},
        non_tensors={"data_source": np.array([DATA_SOURCES[uid]], dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": ""}], dtype=object),
                     "extra_info": np.array([info], dtype=object)})
    return data, p, r


def outputs_for(tokenizer, mgr, uid: str, response: str, split: str = "train"):
    """(verl's own output, the token-credit output) after the reward ran, and the reward's answer."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    from src.rewards.credit.agent_loop import with_token_ranges

    data, p, r = trajectory(tokenizer, uid, response, split)
    result = run(mgr, data)
    outs = []
    for credited in (False, True):
        out = AgentLoopOutput(prompt_ids=p, response_ids=r, response_mask=[1] * len(r), metrics={}, extra_fields={})
        if credited:
            out = with_token_ranges(out, tokenizer)
            out._step = STEP  # what TokenCreditAgentLoop.run takes from the batch's global_steps
        # verl's AgentLoopWorker._compute_score stores the reward loop's answer on the output like this
        out.reward_score = result["reward_score"]
        out.extra_fields["reward_extra_info"] = result["reward_extra_info"]
        outs.append(out.as_dict())
    return outs[0], outs[1], result


def batch(rows: list[dict], keys: list[str]):
    """Right-padded batch of the fields verl's V1 _compute_advantage fetches."""
    from verl import DataProto

    width = max(len(r["rm_scores"]) for r in rows)

    def pad(t):
        return torch.cat([t, t.new_zeros(width - len(t))])

    scores = torch.stack([pad(r["rm_scores"]) for r in rows])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": torch.stack([pad(r["response_mask"]) for r in rows])},
        non_tensors={"uid": np.array([k.rsplit("_", 2)[0] for k in keys], dtype=object)})
    return data


def advantages(data, keys, estimator, verl_cfg):
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    out = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator=estimator, num_repeat=4,
        norm_adv_by_std_in_grpo=verl_cfg.algorithm.norm_adv_by_std_in_grpo, config=verl_cfg.algorithm)
    return out.batch["advantages"]


def expected_penalties(tokenizer, scorer, uid: str, response: str, extra: dict) -> list[float]:
    """Independent: the service's spans for the translation, shifted to where the translation
    sits in the response, matched to tokens by the tokenizer's own offset mapping."""
    r_ids = response_ids(tokenizer, response)
    pens = [0.0] * len(r_ids)
    if not extra["format_ok"]:
        return pens
    translation = extra["translation"]
    _, _, tgt_lang, _ = GROUPS[uid]
    spans = scorer.results("xcomet_xl", [{"src": GROUPS[uid][0], "mt": translation, "lang": tgt_lang}],
                         ["score", "spans"])[0]["spans"]
    at = response.index(translation, response.index("<translate>"))
    offsets = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    for i, (s, e) in enumerate(offsets):
        for sp in spans:
            if s < at + sp["end"] and at + sp["start"] < e:
                pens[i] = min(pens[i], -MQM[sp["severity"]] / 10.0)
    return pens


@pytest.mark.parametrize("algo", ["grpo", "dapo"])
def test_token_credit_end_to_end(tokenizer, scorer_env, algo, monkeypatch, tmp_path):
    from verl.trainer.ppo.reward import load_reward_manager

    from src.report.run_files import load_reward_components
    from src.report.series import train_components

    from src.rewards.credit.agent_loop import TokenCreditAgentLoopManager

    monkeypatch.setenv("QE_REWARD_COMPONENTS_DIR", str(tmp_path / "components"))
    verl_cfg = verl_config_for("reward=xcomet_xl", "reward.credit=token", f"algo={algo}", "gpus=2")
    assert verl_cfg.algorithm.adv_estimator == "grpo_token"
    weight = verl_cfg.reward.custom_reward_function.reward_kwargs.token_credit.weight
    # verl's TaskRunnerV1 constructs the configured manager class in the trainer process; the
    # constructor registers and configures grpo_token there (create() would also start workers)
    TokenCreditAgentLoopManager(config=verl_cfg, llm_client=None)
    mgr = load_reward_manager(verl_cfg, tokenizer)

    rows_seq, rows_tok, keys, scores, uids, pens = [], [], [], [], [], []
    for uid, (_, _, _, responses) in GROUPS.items():
        for session, response in enumerate(responses):
            seq, tok, result = outputs_for(tokenizer, mgr, uid, response)
            extra = result["reward_extra_info"]
            rows_seq.append(seq)
            rows_tok.append(tok)
            keys.append(f"{uid}_{session}_0")
            scores.append(float(seq["rm_scores"][-1]))  # float32, as verl holds it
            uids.append(uid)
            pens.append(expected_penalties(tokenizer, scorer_env, uid, response, extra))
            # verl's rm_scores: the score on the last token; ours adds the penalties, nothing else
            assert seq["rm_scores"][-1].item() == pytest.approx(result["reward_score"])
            assert tok["rm_scores"].tolist() == pytest.approx(pens[-1][:-1] + [seq["rm_scores"][-1].item()])
            # per-sample metrics beside the reward's own extras (verl averages them at validation)
            stats = tok["extra_fields"]["reward_extra_info"]
            n = len(pens[-1])
            assert stats["credit_token_penalty"] == pytest.approx(sum(pens[-1]) / n)
            assert sum(stats[f"credit_tokens_{s}"] for s in ("minor", "major", "critical", "bad")) == pytest.approx(
                sum(p < 0 for p in pens[-1]) / n)
            assert stats["credit_tokens_critical"] == pytest.approx(sum(p == -1.0 for p in pens[-1]) / n)
    assert any(p < 0 for row in pens for p in row), "the tiny XCOMET flagged no span: the test would prove nothing"
    assert any(all(p == 0 for p in row) for row in pens)  # the broken-format answer
    # the report's training curves: per-step means of the per-sample credit metrics
    curves = train_components(SimpleNamespace(reward_components=load_reward_components(tmp_path / "components"),
                                              rollout_means=None))
    assert curves["credit_token_penalty"].to_dict() == pytest.approx(
        {STEP: statistics.fmean(sum(row) / len(row) for row in pens)})
    assert set(curves) >= {f"credit_tokens_{s}" for s in ("minor", "major", "critical", "bad")}

    got = advantages(batch(rows_tok, keys), keys, "grpo_token", verl_cfg)
    for i, (uid, s, row) in enumerate(zip(uids, scores, pens)):
        group = [scores[j] for j in range(len(uids)) if uids[j] == uid]
        seq_adv = (s - statistics.fmean(group)) / (statistics.stdev(group) + 1e-6)
        expected = [seq_adv + weight * p / 1.0 for p in row]  # scale: xcomet_xl's answer range, 1.0
        # verl holds scores in float32; the tiny models' scores in a group differ by ~1e-3, so
        # float32 rounding of (s - mean) / std reaches ~1e-4 (penalties are >= 0.1 apart)
        assert got[i, :len(row)].tolist() == pytest.approx(expected, abs=1e-3)
        assert not got[i, len(row):].any()  # padding

    # weight 0: bit for bit verl's grpo on the rm_scores verl builds with sequence credit
    zero_cfg = verl_config_for("reward=xcomet_xl", "reward.credit=token", "reward.token_credit.weight=0",
                               f"algo={algo}", "gpus=2")
    TokenCreditAgentLoopManager(config=zero_cfg, llm_client=None)
    grpo = advantages(batch(rows_seq, keys), keys, "grpo", verl_cfg)
    assert torch.equal(advantages(batch(rows_tok, keys), keys, "grpo_token", zero_cfg), grpo)
    TokenCreditAgentLoopManager(config=verl_cfg, llm_client=None)  # back to the configured weight


def test_validation_rows_carry_no_token_penalties(tokenizer, scorer_env, monkeypatch, tmp_path):
    from verl.trainer.ppo.reward import load_reward_manager

    monkeypatch.setenv("QE_REWARD_COMPONENTS_DIR", str(tmp_path / "components"))

    verl_cfg = verl_config_for("reward=xcomet_xl", "reward.credit=token", "algo=dapo", "gpus=2")
    mgr = load_reward_manager(verl_cfg, tokenizer)
    response = GROUPS["uid-en-zh"][3][0]
    seq, tok, result = outputs_for(tokenizer, mgr, "uid-en-zh", response, split="val")
    credit = json.loads(result["reward_extra_info"]["credit_ranges"])
    assert credit["train"] is False
    # the ranges are kept for the report; the span model runs at validation (mode=train)
    expected = expected_penalties(tokenizer, scorer_env, "uid-en-zh", response, result["reward_extra_info"])
    assert bool(credit["ranges"]) == any(p < 0 for p in expected)
    assert torch.equal(seq["rm_scores"], tok["rm_scores"])
    # the samples page colours the translation's tokens from verl's validation dump line
    from src.report.samples_page import render_samples_page

    output = tokenizer.decode(response_ids(tokenizer, response), skip_special_tokens=True)
    line = {"input": "", "output": output, "gts": "", "score": result["reward_score"],
            **tok["extra_fields"]["reward_extra_info"]}
    page = render_samples_page({0: [line]}, "val")
    alphas = [float(a) for a in re.findall(r'class="tok" style="background: rgba\(230, 40, 40, ([0-9.]+)\)"', page)]
    assert alphas and sum(a > 0 for a in alphas) == sum(p < 0 for p in expected)
    # the report's per-sample log gets the credit metrics of the row (the reward function's own
    # components line comes first, from the same process here)
    lines = [json.loads(x) for f in (tmp_path / "components").glob("*.jsonl") for x in f.read_text().splitlines()]
    credit_lines = [x for x in lines if "credit_token_penalty" in x]
    assert len(credit_lines) == 1 and credit_lines[0]["split"] == "val"  # from the token-credit output only


def test_sequence_credit_adds_nothing_to_the_reward(tokenizer, scorer_env):
    from verl.trainer.ppo.reward import load_reward_manager

    verl_cfg = verl_config_for("reward=xcomet_xl", "algo=grpo", "gpus=2")
    data, _, _ = trajectory(tokenizer, "uid-zh-en", GROUPS["uid-zh-en"][0][0])
    assert "credit_ranges" not in run(load_reward_manager(verl_cfg, tokenizer), data)["reward_extra_info"]


def test_agent_loop_is_registered_in_the_worker_process_by_name():
    import hydra
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from src.rewards.credit.agent_loop import AGENT_NAME, TokenCreditAgentLoop, register_agent_loop

    register_agent_loop()  # what TokenCreditAgentLoopWorker.__init__ runs first
    assert hydra.utils.get_class(_agent_loop_registry[AGENT_NAME]["_target_"]) is TokenCreditAgentLoop


class ReplayedPolicy:
    """The GPU boundary: verl's LLM server client, answering with fixed token ids (vLLM needs a GPU)."""

    def __init__(self, token_ids: list[int]):
        self.token_ids = token_ids

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        return TokenOutput(token_ids=list(self.token_ids), stop_reason="completed")


def test_verl_instantiates_and_runs_the_registered_agent_loop(tokenizer, scorer_env):
    """verl's own worker path: the registry entry instantiated as AgentLoopWorker._run_agent_loop
    does, its `run` (verl's single-turn loop under ours), then the reward and verl's as_dict."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from src.rewards.credit.agent_loop import AGENT_NAME, TokenCreditOutput, register_agent_loop

    verl_cfg = verl_config_for("reward=xcomet_xl", "reward.credit=token", "algo=grpo", "gpus=2")
    register_agent_loop()
    uid, response = "uid-zh-en", GROUPS["uid-zh-en"][3][1]
    agent = hydra.utils.instantiate(
        config=_agent_loop_registry[verl_cfg.actor_rollout_ref.rollout.agent.default_agent_loop],
        trainer_config=DictConfigWrap(config=verl_cfg),
        server_manager=ReplayedPolicy(response_ids(tokenizer, response)),
        tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(verl_cfg.data), tools=ToolListWrap([]))
    assert verl_cfg.actor_rollout_ref.rollout.agent.default_agent_loop == AGENT_NAME
    # on the agent loop's own event loop, as verl's worker runs it (AgentLoopBase keeps it as .loop)
    messages = [{"role": "user", "content": SRC_ZH}]
    out = agent.loop.run_until_complete(agent.run({"temperature": 1.0}, raw_prompt=messages,
                                                  global_steps=torch.tensor(STEP)))
    assert isinstance(out, TokenCreditOutput) and out.response_ids == response_ids(tokenizer, response)
    assert out._step == STEP

    data, _, _ = trajectory(tokenizer, uid, response)
    result = run(load_reward_manager(verl_cfg, tokenizer), data)
    out.reward_score = result["reward_score"]
    out.extra_fields["reward_extra_info"] = result["reward_extra_info"]
    pens = expected_penalties(tokenizer, scorer_env, uid, response, result["reward_extra_info"])
    assert out.as_dict()["rm_scores"].tolist() == pytest.approx(pens[:-1] + [result["reward_score"]])
