"""What a run trains: the rows of the plan that say what verl trains (estimator, policy loss, loss
aggregation, KL, clip ratios, lr, epochs, lengths, temperature, reward weights), each with its source, read
from the validated verl config; and the one value the plan derives for the loss (loss_scale_factor).

Sources, as the plan table and plan.json show them:
  preset <name>      the value of conf/algo/<name>.yaml (or the schema's default where the file leaves the key out)
  override: <key>    a command line, sweep or experiment value that differs from the preset's, or a `verl.` key
  derived: <why>     computed by the plan (the estimator reward.credit / reward.normalise put in place, Dr. GRPO's
                     loss scale from the response length)
  config: <key>      the project's config (conf/config.yaml and its groups) outside the algo group
  project            a value the launcher always sets (src/verl_config/ppo_trainer.py VERL_KEYS)
  verl default       verl's own yaml, untouched

The preset a run names is read from conf/algo (src/config/presets.py), the only file this module reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from src.config.dotted import flatten
from src.config.presets import ABSENT, at, preset_value, preset_values

# verl's seq-mean-token-sum-norm divides each sequence's token sum by actor.loss_scale_factor or, unset, by
# the padded width of the micro batch (core_algos.agg_loss: loss_mask.shape[-1]), which moves from batch to
# batch; Dr. GRPO (https://arxiv.org/abs/2503.20783, section 3.2) divides by one constant, the generation
# budget, so the plan sets it to data.max_response_length
SUM_NORM = "seq-mean-token-sum-norm"

# what each of verl 0.9.1's policy losses reads beside the advantage (verl/trainer/ppo/core_algos.py
# compute_policy_loss_<mode>): its own parameters (actor keys), and whether it reads clip_ratio_low/high and
# loss_agg_mode. sapo aggregates with seq-mean-token-mean and geo_mean with a mean over sequences whatever
# loss_agg_mode says (the KL loss and the entropy bonus still use loss_agg_mode)
LOSSES: dict[str, tuple[tuple[str, ...], bool, Optional[str]]] = {
    "vanilla": (("clip_ratio_c",), True, None),
    "gspo": ((), True, None),
    "sapo": (("tau_pos", "tau_neg"), False, "seq-mean-token-mean (sapo's own)"),
    "gpg": ((), False, None),
    "clip_cov": (("policy_loss.clip_cov_ratio", "policy_loss.clip_cov_lb", "policy_loss.clip_cov_ub"), True, None),
    "kl_cov": (("policy_loss.kl_cov_ratio", "policy_loss.ppo_kl_coef"), False, None),
    "geo_mean": ((), True, "mean over sequences of the geometric-mean ratio (geo_mean's own)"),
    "dro": (("policy_loss.dro_beta",), False, None),
    "cispo": ((), True, None),
    "dppo_tv": (("clip_ratio_c",), True, None),
    "dppo_kl": (("clip_ratio_c",), True, None),
}

# estimators that read algorithm.norm_adv_by_std_in_grpo (core_algos.py compute_grpo_outcome_advantage,
# compute_grpo_passk_outcome_advantage; the project's grpo_token and grpo_per_component pass it to verl's grpo)
READS_STD = {"grpo", "grpo_vectorized", "grpo_passk", "grpo_token", "grpo_per_component"}

ACTOR = "actor_rollout_ref.actor."


@dataclass(frozen=True)
class TrainsRow:
    """One row of "what trains": a name, the value verl runs with, where it came from."""
    what: str
    value: str
    source: str


def loss_scale_factor(cfg: dict) -> Optional[int]:
    """actor.loss_scale_factor: the generation budget for seq-mean-token-sum-norm (SUM_NORM says why), else
    None (verl's own default)."""
    return cfg["data"]["max_response_length"] if cfg["algo"]["loss_agg_mode"] == SUM_NORM else None


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class _Sources:
    """Where a value came from (module docstring)."""

    def __init__(self, cfg: dict, passthrough: dict):
        self.algo = cfg["algo"]
        self.preset_name = str(self.algo["name"])
        self.preset = preset_values(self.preset_name)
        self.passthrough = passthrough
        self.algo_verl = flatten(self.algo.get("verl") or {})

    def algo_key(self, key: str, verl_key: Optional[str] = None) -> str:
        """algo.<key> (dotted), or the verl key it is copied to when a `verl.` key sets that."""
        if verl_key is not None and verl_key in self.passthrough:
            return f"override: verl.{verl_key}"
        if self.preset is None:
            return f"algo.{key} (algo.name={self.preset_name}: no conf/algo file)"
        if at(self.algo, key) == preset_value(self.preset, key):
            return f"preset {self.preset_name}"
        return f"override: algo.{key}"

    def verl_key(self, key: str, project: Optional[str] = None) -> str:
        """A verl key: a `verl.` override, the preset's algo.verl, the project's config key, or verl's default."""
        if key in self.passthrough:
            return f"override: verl.{key}"
        if key in self.algo_verl:
            return self.algo_key(f"verl.{key}")
        return project or "verl default"


def _get(verl: dict, key: str) -> Any:
    value = at(verl, key)
    return None if value is ABSENT else value


def overlong_row(verl: dict, src: "_Sources") -> TrainsRow:
    """DAPO's overlong penalty, as verl's dapo reward manager adds it to each trained answer
    (verl/workers/reward_manager/dapo.py DAPORewardManager.__call__: min(-(length - (max_resp_len - len)) / len
    x penalty_factor, 0)); only the dapo manager reads overlong_buffer_cfg (src/verl_config/ppo_trainer.py)."""
    cfg = _get(verl, "reward.reward_kwargs.overlong_buffer_cfg") or {}
    manager = str(_get(verl, "reward.reward_manager.name") or "")
    source = "; ".join(dict.fromkeys(src.algo_key(k) for k in ("overlong_buffer.enable", "overlong_buffer.len",
                                                                 "overlong_buffer.penalty_factor")))
    if not cfg.get("enable"):
        return TrainsRow("overlong penalty (DAPO)", "off", source)
    if "dapo" not in manager.lower():
        return TrainsRow("overlong penalty (DAPO)", f"- (not read by reward manager {manager})", source)
    longest = _get(verl, "reward.reward_kwargs.max_resp_len")
    factor = _num(cfg.get("penalty_factor"))
    return TrainsRow("overlong penalty (DAPO)",
                     f"last {cfg.get('len')} of {longest} response tokens, linear to -{factor} at {longest}",
                     source + "; trained answers only (src/rewards/managers.py)")


def trains(cfg: dict, verl: dict, passthrough: dict, token_credit: bool, per_component: bool) -> tuple[TrainsRow, ...]:
    """The rows of "what trains", read from the resolved verl config (a plain dict): what verl runs, not what
    was asked for. `passthrough`: the user's `verl.` keys (dotted); `token_credit` / `per_component`: the
    reward put its own estimator in place (src/rewards/credit, src/rewards/normalise.py)."""
    src = _Sources(cfg, passthrough)
    actor = lambda key: _get(verl, ACTOR + key)  # noqa: E731 - a short reader of the actor section
    rows = []

    estimator = _get(verl, "algorithm.adv_estimator")
    if "algorithm.adv_estimator" in passthrough:
        est_source = "override: verl.algorithm.adv_estimator"
    elif token_credit:
        est_source = f"derived: reward.credit=token (verl's grpo plus a token term, on algo.adv_estimator=" \
                     f"{src.algo['adv_estimator']})"
    elif per_component:
        est_source = f"derived: reward.normalise=per_component (verl's grpo per reward part, on " \
                     f"algo.adv_estimator={src.algo['adv_estimator']})"
    else:
        est_source = src.algo_key("adv_estimator", "algorithm.adv_estimator")
    rows.append(TrainsRow("advantage estimator", str(estimator), est_source))
    divides = "yes" if _get(verl, "algorithm.norm_adv_by_std_in_grpo") else "no"
    rows.append(TrainsRow("advantage / group std",
                          divides if estimator in READS_STD else f"- (not read by {estimator})",
                          src.algo_key("norm_adv_by_std_in_grpo", "algorithm.norm_adv_by_std_in_grpo")))

    mode = actor("policy_loss.loss_mode")
    params, clips, own_agg = LOSSES.get(mode, ((), True, None))
    shown = ", ".join(f"{p.rsplit('.', 1)[-1]} {_num(actor(p))}" for p in params)
    param_sources = sorted({src.verl_key(ACTOR + p) for p in params} - {"verl default"})
    # once each: the loss mode and its parameters come from one preset as a rule (`preset clip_cov; preset clip_cov`)
    rows.append(TrainsRow("policy loss", f"{mode}" + (f" ({shown})" if shown else ""),
                          "; ".join(dict.fromkeys([src.algo_key("loss_mode", ACTOR + "policy_loss.loss_mode"),
                                                   *param_sources]))))
    agg = actor("loss_agg_mode")
    scale = actor("loss_scale_factor")
    agg_value = (f"{own_agg}; KL and entropy terms: {agg}" if own_agg else str(agg)) + (
        f", / {scale} tokens" if scale is not None and agg == SUM_NORM else "")
    agg_source = src.algo_key("loss_agg_mode", ACTOR + "loss_agg_mode")
    if scale is not None and agg == SUM_NORM:
        agg_source += "; scale " + (src.verl_key(ACTOR + "loss_scale_factor") if ACTOR + "loss_scale_factor"
                                    in passthrough else "derived: data.max_response_length (Dr. GRPO's constant)")
    rows.append(TrainsRow("loss aggregation", agg_value, agg_source))

    kl_loss = (f"{actor('kl_loss_type')} x {_num(actor('kl_loss_coef'))}" if actor("use_kl_loss") else "off")
    rows.append(TrainsRow("KL in the loss", kl_loss, "; ".join(dict.fromkeys(
        [src.algo_key("use_kl_loss", ACTOR + "use_kl_loss")]
        + ([src.algo_key("kl_loss_coef", ACTOR + "kl_loss_coef")] if actor("use_kl_loss") else [])))))
    in_reward = _get(verl, "algorithm.use_kl_in_reward")
    rows.append(TrainsRow("KL in the reward",
                          f"{_get(verl, 'algorithm.kl_penalty')} x {_num(_get(verl, 'algorithm.kl_ctrl.kl_coef'))} "
                          f"({_get(verl, 'algorithm.kl_ctrl.type')})" if in_reward else "off",
                          src.verl_key("algorithm.use_kl_in_reward", "project (the reward stays the score)")))
    low, high = actor("clip_ratio_low"), actor("clip_ratio_high")
    rows.append(TrainsRow("clip ratio low / high", f"{_num(low)} / {_num(high)}" + ("" if clips else
                          f" (not read by {mode})"),
                          src.algo_key("clip_ratio_low", ACTOR + "clip_ratio_low")
                          + ("" if at(src.algo, "clip_ratio_high") == preset_value(src.preset, "clip_ratio_high")
                             or src.preset is None else "; high " + src.algo_key("clip_ratio_high"))))
    rows.append(TrainsRow("entropy bonus", _num(actor("entropy_coeff")),
                          src.algo_key("entropy_coeff", ACTOR + "entropy_coeff")))
    fg = _get(verl, "algorithm.filter_groups") or {}
    rows.append(TrainsRow("dynamic sampling (DAPO)", f"on, groups equal in {fg.get('metric')} dropped"
                          if fg.get("enable") else "off",
                          src.algo_key("filter_groups.enable", "algorithm.filter_groups.enable")))

    rows.append(overlong_row(verl, src))

    model = "actor_rollout_ref.model."
    rank = _get(verl, model + "lora_rank") or 0
    rows.append(TrainsRow("weights trained", f"LoRA adapters of rank {rank} (alpha {_num(_get(verl, model + 'lora_alpha'))}"
                          f", on {_get(verl, model + 'target_modules')}); the base frozen" if rank > 0
                          else "all (no LoRA)", src.verl_key(model + "lora_rank", "config: model.lora.rank")))

    optim = ACTOR + "optim."
    schedule = _get(verl, optim + "lr_scheduler_type")
    warmup = _get(verl, optim + "lr_warmup_steps")
    warmup_text = (f"warmup {warmup} steps" if warmup is not None and warmup > 0
                   else f"warmup {_num(_get(verl, optim + 'lr_warmup_steps_ratio'))} of the steps")
    rows.append(TrainsRow("learning rate", f"{_num(_get(verl, optim + 'lr'))}, {schedule}, {warmup_text}",
                          "; ".join(dict.fromkeys([src.verl_key(optim + "lr", "config: trainer.lr"),
                                                   src.verl_key(optim + "lr_scheduler_type"),
                                                   src.verl_key(optim + "lr_warmup_steps")]))))
    steps = _get(verl, "trainer.total_training_steps")
    rows.append(TrainsRow("epochs / steps", f"{_get(verl, 'trainer.total_epochs')} epoch(s)"
                          + (f", at most {steps} steps" if steps else " (steps from the data size)")
                          + f"; {actor('ppo_epochs')} update pass(es) per batch",
                          "; ".join(dict.fromkeys([src.verl_key("trainer.total_epochs", "config: trainer.total_epochs"),
                                                   src.verl_key("trainer.total_training_steps",
                                                                "config: trainer.total_training_steps"),
                                                   src.verl_key(ACTOR + "ppo_epochs")]))))
    rows.append(TrainsRow("max prompt / response tokens",
                          f"{_get(verl, 'data.max_prompt_length')} / {_get(verl, 'data.max_response_length')}",
                          "; ".join(dict.fromkeys([src.verl_key("data.max_prompt_length", "config: data group"),
                                                   src.verl_key("data.max_response_length", "config: data group")]))))
    rollout = "actor_rollout_ref.rollout."
    rows.append(TrainsRow("rollout temperature / top-p",
                          f"{_num(_get(verl, rollout + 'temperature'))} / {_num(_get(verl, rollout + 'top_p'))}",
                          "; ".join(dict.fromkeys([src.verl_key(rollout + "temperature"),
                                                   src.verl_key(rollout + "top_p")]))))
    kwargs = _get(verl, "reward.custom_reward_function.reward_kwargs") or {}
    trained = {c: w for c, w in (kwargs.get("train_weights") or {}).items() if w}
    held_out = [c for c, w in (kwargs.get("validation_weights") or {}).items() if w and c not in trained]
    # a metric whose model only reward.validation_models names (held out) that a weight now trains
    reward = cfg["reward"]
    validation_only = set(reward.get("validation_models") or []) - set(reward.get("sentence_models") or [])
    models = kwargs.get("models") or {}
    no_longer = [f"{c} (reward.validation_models names {models[c]}, reward.weights.{c} trains on it)"
                 for c in trained if models.get(c) in validation_only]
    rows.append(TrainsRow("reward weights",
                          "trained: " + (", ".join(f"{c} x{_num(w)}" for c, w in trained.items()) or "none")
                          + "; held out (validation only): " + (", ".join(held_out) or "none")
                          + ("; no longer held out: " + ", ".join(no_longer) if no_longer else ""),
                          f"config: reward={cfg['reward']['name']} (reward.weights, reward.validation_weights)"))
    return tuple(rows)
