"""The run plan: every derived value of a run, computed from the composed config.

Pure: no I/O, no environment, no clock. Input is the composed config as a plain dict (and the
run dir Hydra chose); output is a `RunPlan` that the launcher prints, snapshots, and turns into
a verl config. Everything derived is derived here and nowhere else.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from src.verl_rules import RULES, BatchValues, Rule, check


class PlanError(ValueError):
    """Bad input: the message is one line saying what is wrong and how to fix it."""


@dataclass(frozen=True)
class Adjustment:
    key: str
    intent: Any
    value: Any
    reason: str


# where a batch value can be pinned explicitly (verl key names, under the `verl` passthrough)
PIN_KEYS = {
    "P": "data.train_batch_size",
    "n": "actor_rollout_ref.rollout.n",
    "m": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "mu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "lam": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "tp": "actor_rollout_ref.rollout.tensor_model_parallel_size",
}


# the intent key each pin replaces
PIN_ATTR_INTENT = {"P": "prompts_per_step", "n": "samples_per_prompt", "m": "mini_batch_prompts",
                   "mu": "micro_batch_per_gpu", "lam": "log_prob_micro_batch_per_gpu", "tp": "rollout_tp"}


@dataclass(frozen=True)
class BatchPlan:
    P: int
    n: int
    m: int
    mu: Optional[int]
    lam: Optional[int]
    tp: int
    dynamic_bsz: bool
    max_token_len_per_gpu: Optional[int]

    @property
    def samples_per_step(self) -> int:
        return self.P * self.n


@dataclass(frozen=True)
class RunPlan:
    model: str
    model_path: str
    reward: str
    reward_mode: str
    algo: str
    seed: int
    gpus_per_node: int
    nodes: int
    world_size: int
    batch: BatchPlan
    samples_per_step: int
    adjustments: tuple[Adjustment, ...]
    checkpoint_dir: str
    run_dir: str
    wandb_project: str
    wandb_run_name: str
    ray_cpus_needed: int
    ray_num_cpus: Optional[int]
    scorer_models: tuple[str, ...]
    # GPUs of each node reserved for the QE scorer beyond the training GPUs (placement=dedicated)
    scorer_gpus_per_node: int
    # what each node (one Slurm task per node) needs: training GPUs + dedicated scorer GPUs, and
    # the CPUs Ray needs there (3 per training GPU + 10) or more if the user asks (slurm.cpus_per_task)
    node_gpus: int
    node_cpus: int
    # wandb run id, stable per checkpoint dir: a requeued or resumed run continues its wandb run
    wandb_run_id: str
    train_files: str
    val_files: str
    max_prompt_length: int
    max_response_length: int
    logger_backends: tuple[str, ...]
    wandb_offline: bool
    device: str
    accelerator_env: dict
    gpu_memory_utilization: float
    # verl keys the user passed through `verl.*` (batch pins removed; they live in `batch`)
    verl_passthrough: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["batch"]["samples_per_step"] = self.batch.samples_per_step
        return d


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; empty dicts are kept as values."""
    out = {}
    for key, value in (tree or {}).items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _positive_int(value: Any, what: str, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{what} must be a positive integer, got {value!r} (e.g. {example})")
    return value


def _nearest_multiple(target: int, step: int) -> int:
    """Nearest positive multiple of `step` to `target` (ties go up)."""
    low = max(step, (target // step) * step)
    high = low if low >= target else low + step
    return low if target - low < high - target else high


def _largest_divisor_at_most(number: int, ceiling: int) -> int:
    return max(d for d in range(1, max(1, min(number, ceiling)) + 1) if number % d == 0)


def _rollout_tp(preferred: int, gpus_per_node: int, kv_heads: int) -> int:
    for tp in range(max(1, preferred), 0, -1):
        if gpus_per_node % tp == 0 and kv_heads % tp == 0:
            return tp
    return 1


def _refuse(values: BatchValues, broken: list[Rule], pins: dict, derive) -> PlanError:
    """One line: the pins, the first rule they break, and the nearest pin values that work
    (with everything unpinned re-derived for each candidate, as the plan would)."""
    rule = broken[0]
    pinned = ", ".join(f"{PIN_KEYS[a]}={v}" for a, v in pins.items())
    hints = []
    for attr, current in pins.items():
        ok = [v for v in range(1, max(4 * current, 256) + 1) if not check(derive({**pins, attr: v}))]
        near = [v for v in ok if v < current][-1:] + [v for v in ok if v > current][:1]
        if near:
            hints.append(f"{PIN_KEYS[attr]} in {{{', '.join(map(str, near))}}}")
    hint = "; nearest valid: " + " or ".join(hints) if hints else ""
    return PlanError(
        f"{pinned} breaks verl rule {rule.formula} for G={values.G} GPUs "
        f"(P={values.P}, n={values.n}, m={values.m}, mu={values.mu}, lam={values.lam}, "
        f"tp={values.tp}){hint}; or drop the pin and let the plan derive it"
    )


def plan_batch(cfg: dict, gpus_per_node: int, world_size: int,
               adjustments: list[Adjustment]) -> BatchPlan:
    intent = cfg["batch"]
    model = cfg["model"]
    data = cfg["data"]
    passthrough = flatten(cfg.get("verl") or {})
    pins = {}
    if data.get("train_batch_size") is not None:
        pins["P"] = data["train_batch_size"]
    for attr, key in PIN_KEYS.items():
        if key in passthrough:
            pins[attr] = passthrough[key]
    for attr, value in pins.items():
        _positive_int(value, PIN_KEYS[attr], f"{PIN_KEYS[attr]}=8")

    n = pins.get("n", _positive_int(intent["samples_per_prompt"], "batch.samples_per_prompt",
                                    "batch.samples_per_prompt=8"))
    P0 = _positive_int(intent["prompts_per_step"], "batch.prompts_per_step", "batch.prompts_per_step=48")
    m0 = _positive_int(intent["mini_batch_prompts"], "batch.mini_batch_prompts", "batch.mini_batch_prompts=24")
    mu_max = _positive_int(intent["micro_batch_per_gpu"], "batch.micro_batch_per_gpu", "batch.micro_batch_per_gpu=8")
    lam_max = _positive_int(intent["log_prob_micro_batch_per_gpu"], "batch.log_prob_micro_batch_per_gpu",
                            "batch.log_prob_micro_batch_per_gpu=16")
    G = world_size
    kv_heads = model["num_kv_heads"]
    dynamic = bool(intent.get("dynamic_bsz", False))
    max_seq_len = data["max_prompt_length"] + data["max_response_length"]

    tp_pref = model["rollout_tp"]
    budget = intent.get("max_token_len_per_gpu")
    max_tokens = (budget if budget is not None else 2 * max_seq_len) if dynamic else None
    if dynamic:
        _positive_int(max_tokens, "batch.max_token_len_per_gpu", f"batch.max_token_len_per_gpu={2 * max_seq_len}")

    def derive(pinned: dict) -> BatchValues:
        """Pinned values as given; everything else moved to the nearest value that fits."""
        tp = pinned.get("tp", _rollout_tp(tp_pref, gpus_per_node, kv_heads))
        # m*n % G == 0  <=>  m is a multiple of G / gcd(n, G)
        m = pinned.get("m", _nearest_multiple(m0, G // math.gcd(n, G)))
        P = pinned.get("P", _nearest_multiple(P0, m))
        mu = lam = None
        if not dynamic:
            per_gpu_mini = (m * n) // G if (m * n) % G == 0 else 1
            per_gpu_step = (P * n) // G if (P * n) % G == 0 else 1
            mu = pinned.get("mu", _largest_divisor_at_most(per_gpu_mini, mu_max))
            lam = pinned.get("lam", _largest_divisor_at_most(per_gpu_step, lam_max))
        return BatchValues(G=G, gpus_per_node=gpus_per_node, P=P, n=n, m=m, mu=mu, lam=lam, tp=tp,
                           kv_heads=kv_heads, dynamic_bsz=dynamic, max_token_len_per_gpu=max_tokens,
                           max_seq_len=max_seq_len)

    values = derive(pins)
    broken = check(values)
    if broken:
        if not pins and broken[0] is RULES["token_budget"]:
            raise PlanError(
                f"batch.max_token_len_per_gpu={max_tokens} is below max prompt + response = {max_seq_len} "
                f"tokens; set batch.max_token_len_per_gpu>={max_seq_len}")
        if pins:
            raise _refuse(values, broken, pins, derive)
        raise PlanError(f"internal: derived batch breaks {broken[0].formula} ({values}); please report")

    pinned_intent = {PIN_ATTR_INTENT[a] for a in pins}

    def note(key: str, want: Any, got: Any, reason: str) -> None:
        # a pinned value is the user's explicit choice, not an adjustment of intent
        if want != got and key not in pinned_intent:
            adjustments.append(Adjustment(key, want, got, reason))

    note("rollout_tp", tp_pref, values.tp,
         f"must divide the {gpus_per_node} GPUs per node and the model's {kv_heads} KV heads")
    note("mini_batch_prompts", m0, values.m,
         f"m*n must divide by G={G} with n={n}: m must be a multiple of {G // math.gcd(n, G)}")
    note("prompts_per_step", P0, values.P, f"must be a multiple of the mini batch m={values.m} (P>=m, no padding)")
    if not dynamic:
        note("micro_batch_per_gpu", mu_max, values.mu,
             f"must divide the {values.m * n // G} samples each GPU gets per mini batch")
        note("log_prob_micro_batch_per_gpu", lam_max, values.lam,
             f"must divide the {values.P * n // G} samples each GPU gets per step")
    P, m, mu, lam, tp = values.P, values.m, values.mu, values.lam, values.tp
    return BatchPlan(P=P, n=n, m=m, mu=mu, lam=lam, tp=tp, dynamic_bsz=dynamic,
                     max_token_len_per_gpu=max_tokens)


def checkpoint_dir(results_root: str, model: str, reward: str, mode: str, algo: str,
                   world_size: int, seed: int) -> str:
    # One dir per world size because FSDP shards are per rank; the seed level keeps a seed
    # sweep from resuming another seed's checkpoints. No timestamps: requeue/resume find it.
    return f"{results_root}/{model}/{reward}_{mode}/{algo}/gpus{world_size}/seed{seed}"


def ray_cpus_for(gpus: int) -> int:
    """Logical CPUs Ray needs for `gpus` GPUs: each GPU bundle reserves 3, TransferQueue 9 more, +1."""
    return 3 * gpus + 10


def wandb_run_id(checkpoint_dir: str) -> str:
    # The checkpoint dir names one training trajectory (model, reward, algo, G, seed): every
    # attempt that resumes it is the same wandb run. Passed to verl through the environment
    # (WANDB_RUN_ID), never through the verl config, which stays byte-identical across re-runs.
    return "qerl-" + hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:16]


def _node_resources(cfg: dict, gpus_per_node: int) -> tuple[int, int]:
    scorer = cfg["scorer"]
    placement = scorer["placement"]
    if placement not in ("shared", "dedicated", "cpu"):
        raise PlanError(f"scorer.placement must be shared, dedicated or cpu, got {placement!r} "
                        f"(e.g. scorer.placement=dedicated)")
    scorer_gpus = 0
    if placement == "dedicated":
        scorer_gpus = _positive_int(scorer["dedicated_gpus"], "scorer.dedicated_gpus", "scorer.dedicated_gpus=1")
    # per node: a multi-node job asks Slurm for one task of this size on every node
    cpus = ray_cpus_for(gpus_per_node)
    asked = (cfg.get("slurm") or {}).get("cpus_per_task")
    if asked is not None:
        cpus = max(cpus, _positive_int(asked, "slurm.cpus_per_task", f"slurm.cpus_per_task={cpus}"))
    return scorer_gpus, cpus


def build_plan(cfg: dict, run_dir: str) -> RunPlan:
    """The whole run plan from the composed, resolved config (a plain dict)."""
    gpus_per_node = _positive_int(cfg["gpus"]["per_node"], "gpus (GPUs per node)", "gpus=4")
    nodes = _positive_int(cfg["nodes"], "nodes", "nodes=2")
    world_size = gpus_per_node * nodes
    reward, algo, model, data = cfg["reward"], cfg["algo"], cfg["model"], cfg["data"]
    mode = reward["mode"]
    if mode not in ("off", "train", "eval"):
        raise PlanError(f"reward.mode must be off, train or eval, got {mode!r} (e.g. reward.mode=eval)")
    for key in ("max_prompt_length", "max_response_length"):
        _positive_int(data[key], f"data.{key}", f"data.{key}=512")

    adjustments: list[Adjustment] = []
    batch = plan_batch(cfg, gpus_per_node, world_size, adjustments)

    known = set(cfg["scorer"]["models"])
    scorer_models = list(reward["sentence_models"]) + list(reward["validation_models"])
    if mode != "off":
        scorer_models.append(reward["span_model"])
    for name in scorer_models:
        if name not in known:
            raise PlanError(f"reward {reward['name']} needs scorer model {name!r}, which conf/scorer does "
                            f"not define (known: {', '.join(sorted(known))})")

    ray_needed = ray_cpus_for(world_size)
    ray_num_cpus = cfg.get("ray_num_cpus")
    if ray_num_cpus is not None and ray_num_cpus < ray_needed:
        raise PlanError(f"ray_num_cpus={ray_num_cpus} is below the {ray_needed} logical CPUs verl needs for "
                        f"G={world_size} (3 per GPU + 10); set ray_num_cpus>={ray_needed} or null")
    if nodes == 1 and ray_num_cpus is None:
        ray_num_cpus = ray_needed
    # multi-node: Ray is started by the node bootstrap with each node's CPUs; the driver joins it

    passthrough = {k: v for k, v in flatten(cfg.get("verl") or {}).items()
                   if k not in PIN_KEYS.values()}
    scorer_gpus, node_cpus = _node_resources(cfg, gpus_per_node)
    ckpt_dir = checkpoint_dir(cfg["paths"]["results_root"], model["name"], reward["name"], mode,
                              algo["name"], world_size, cfg["seed"])
    backends = tuple(cfg["logger"]["backends"])
    return RunPlan(
        model=model["name"], model_path=model["path"], reward=reward["name"], reward_mode=mode,
        algo=algo["name"], seed=cfg["seed"], gpus_per_node=gpus_per_node, nodes=nodes,
        world_size=world_size, batch=batch, samples_per_step=batch.samples_per_step,
        adjustments=tuple(adjustments),
        checkpoint_dir=ckpt_dir,
        run_dir=run_dir,
        wandb_project=f"qe-rl-{reward['name']}-{mode}-s{batch.samples_per_step}",
        wandb_run_name=f"{model['name']}-{algo['name']}-g{world_size}-seed{cfg['seed']}",
        ray_cpus_needed=ray_needed, ray_num_cpus=ray_num_cpus,
        scorer_models=tuple(dict.fromkeys(scorer_models)),
        scorer_gpus_per_node=scorer_gpus, node_gpus=gpus_per_node + scorer_gpus, node_cpus=node_cpus,
        wandb_run_id=wandb_run_id(ckpt_dir),
        train_files=data["train_files"], val_files=data["val_files"],
        max_prompt_length=data["max_prompt_length"], max_response_length=data["max_response_length"],
        logger_backends=backends, wandb_offline=bool(cfg["logger"].get("offline", False)),
        device=cfg["accelerator"]["device"], accelerator_env=dict(cfg["accelerator"].get("env") or {}),
        gpu_memory_utilization=model["gpu_memory_utilization"],
        verl_passthrough=passthrough,
    )
