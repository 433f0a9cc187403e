"""The run plan: every derived value of a run, computed from the composed config.

Pure: no I/O, no environment, no clock. Input is the composed config as a plain dict (and the
run dir Hydra chose); output is a `RunPlan` that the launcher prints, snapshots, and turns into
a verl config. Everything derived is derived here and nowhere else.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from src.memory_plan import ActorShape, MemoryInputs, MemoryPlan, ScorerModel, plan_memory
from src.rewards.credit.launch import CreditConfigError, TokenCreditPlan
from src.rewards.credit.launch import plan as plan_token_credit
from src.stop_rules import StopRules, StopRulesError, stop_rules
from src.time_limit import TimeLimitError, TimeLimitPlan, plan_time_limit
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
class ScorerModelSpec:
    name: str
    path: str
    kind: str
    encoder: Optional[str]


@dataclass(frozen=True)
class ScorerPlan:
    """The QE scoring service each node runs (src/node_services.py starts it from this)."""
    placement: str                  # shared | dedicated | cpu
    device: str                     # the service's `device`: cuda (sees only its own GPU(s)) or cpu
    # shared: index among this node's training GPUs the service runs on (the last one: rank 0's GPU
    # also hosts verl's driver-side allocations); None otherwise
    training_gpu_index: Optional[int]
    dtype: str
    python: str
    batch_tokens: int
    ready_timeout_s: float
    restarts: int
    models: tuple[ScorerModelSpec, ...]


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
    # wandb run id, stable per run id: a requeued or resumed run continues its wandb run.
    # Passed to verl through the environment (WANDB_RUN_ID); "" until with_identity
    wandb_run_id: str
    train_files: str
    val_files: str
    max_prompt_length: int
    max_response_length: int
    logger_backends: tuple[str, ...]
    wandb_offline: bool
    device: str
    accelerator_env: dict
    # vLLM's share: model.gpu_memory_utilization lowered to what the memory plan leaves free
    gpu_memory_utilization: float
    # None when the reward needs no QE model: no service is started
    scorer: Optional[ScorerPlan]
    memory: MemoryPlan
    # verl keys the user passed through `verl.*` (batch pins removed; they live in `batch`)
    verl_passthrough: dict = field(default_factory=dict)
    # 8 hex (src/run_identity.py) once with_identity is applied; the original run's id when this
    # run reproduces it from its snapshot
    run_id: str = ""
    reproduces: Optional[str] = None
    # what stops training instead of letting it shrink or spin (src/stop_rules.py)
    stop_rules: Optional[StopRules] = None
    # Slurm's time limit and when the step in progress is saved before it (src/time_limit.py)
    time_limit: Optional[TimeLimitPlan] = None
    # reward.credit=token: estimator, agent loop and token weights (src/rewards/credit/launch.py); None: sequence
    token_credit: Optional[TokenCreditPlan] = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["batch"]["samples_per_step"] = self.batch.samples_per_step
        d["memory"]["fits"] = self.memory.fits
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


def checkpoint_prefix(results_root: str, model: str, reward: str, mode: str, algo: str, world_size: int) -> str:
    # One subtree per world size because FSDP shards are per rank. The run's own dir below it
    # (with_identity) ends in the run id. No timestamps: requeue/resume find it.
    return f"{results_root}/{model}/{reward}_{mode}/{algo}/gpus{world_size}"


def ray_cpus_for(gpus: int) -> int:
    """Logical CPUs Ray needs for `gpus` GPUs: each GPU bundle reserves 3, TransferQueue 9 more, +1."""
    return 3 * gpus + 10


def with_identity(plan: "RunPlan", run_id: str, name: str, reproduces: Optional[str] = None,
                  reproduction: int = 0) -> "RunPlan":
    """The plan with its run's names: checkpoint dir `<prefix>/<name>-<id>` (plus `-repro<N>` for
    the N-th reproduction of a run from its snapshot), wandb id and experiment name carrying the id.
    `plan.checkpoint_dir` is the prefix until this is applied (src/run_identity.py: the id is
    computed without the names, so they can be derived from it)."""
    from dataclasses import replace

    leaf = f"{name}-{run_id}" + (f"-repro{reproduction}" if reproduces else "")
    # wandb ids: letters, digits, - and _ only; the same id on every attempt resumes the wandb run
    wandb_id = f"qerl-{run_id}" + (f"-repro{reproduction}" if reproduces else "")
    return replace(plan, checkpoint_dir=f"{plan.checkpoint_dir}/{leaf}", run_id=run_id, reproduces=reproduces,
                   wandb_run_id=wandb_id,
                   wandb_run_name=f"{plan.model}-{plan.algo}-g{plan.world_size}-{leaf}")


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


def _scorer_plan(cfg: dict, models: list[str], gpus_per_node: int) -> Optional[ScorerPlan]:
    """Where and how each node runs its QE service; None when no QE model is needed."""
    if not models:
        return None
    scorer = cfg["scorer"]
    placement = scorer["placement"]
    specs = []
    for name in models:
        m = scorer["models"][name]
        for key in ("path", "kind"):
            if not m.get(key):
                raise PlanError(f"scorer.models.{name}.{key} is missing (conf/scorer/default.yaml: path and kind, "
                                f"e.g. kind: xcomet)")
        specs.append(ScorerModelSpec(name=name, path=str(m["path"]), kind=str(m["kind"]), encoder=m.get("encoder")))
    batch_tokens = _positive_int(scorer["batch_tokens"], "scorer.batch_tokens", "scorer.batch_tokens=16384")
    restarts = scorer.get("restarts", 1)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise PlanError(f"scorer.restarts must be an integer >= 0, got {restarts!r} (e.g. scorer.restarts=1)")
    timeout = scorer["ready_timeout_s"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise PlanError(f"scorer.ready_timeout_s must be a positive number, got {timeout!r}")
    dtype = scorer["dtype"]
    if dtype not in ("bf16", "fp16", "fp32"):
        raise PlanError(f"scorer.dtype must be bf16, fp16 or fp32, got {dtype!r} (e.g. scorer.dtype=bf16)")
    on_gpu = placement in ("shared", "dedicated")
    return ScorerPlan(placement=placement, device="cuda" if on_gpu else "cpu",
                      training_gpu_index=gpus_per_node - 1 if placement == "shared" else None,
                      # bf16/fp16 are autocast on CUDA; the CPU path runs fp32
                      dtype=dtype if on_gpu else "fp32", python=str(scorer["python"]), batch_tokens=batch_tokens,
                      ready_timeout_s=float(timeout), restarts=restarts, models=tuple(specs))


# verl keys (under the `verl` passthrough) the memory plan reads, with verl 0.9.1's defaults
OFFLOAD_KEYS = {
    "actor_param_offload": ("actor_rollout_ref.actor.fsdp_config.param_offload", False),
    "actor_optimizer_offload": ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", False),
    "ref_param_offload": ("actor_rollout_ref.ref.fsdp_config.param_offload", False),
}
DTYPE_KEYS = {"actor_dtype": ("actor_rollout_ref.actor.fsdp_config.model_dtype", "fp32"),
              "ref_dtype": ("actor_rollout_ref.ref.fsdp_config.model_dtype", "fp32")}
MAX_NUM_SEQS = ("actor_rollout_ref.rollout.max_num_seqs", 256)
# src/verl_config.py turns gradient checkpointing on; a passthrough override comes after it and wins
GRADIENT_CHECKPOINTING = ("actor_rollout_ref.model.enable_gradient_checkpointing", True)


def _scorer_shapes(cfg: dict, names: list[str]) -> tuple[ScorerModel, ...]:
    shapes = []
    for name in names:
        m = cfg["scorer"]["models"][name]
        shape = m.get("encoder_shape") or {}
        if not m.get("params_b") or not all(shape.get(k) for k in ("layers", "hidden", "ffn", "heads")):
            raise PlanError(f"scorer.models.{name} needs params_b and encoder_shape {{layers, hidden, ffn, heads}} "
                            f"for the memory plan (see conf/scorer/default.yaml)")
        shapes.append(ScorerModel(name=name, params_b=float(m["params_b"]), layers=shape["layers"],
                                  hidden=shape["hidden"], ffn=shape["ffn"], heads=shape["heads"]))
    return tuple(shapes)


def _memory_inputs(cfg: dict, batch: BatchPlan, world_size: int, gpu_gb: float, scorer_models: list[str],
                   placement: str, passthrough: dict) -> MemoryInputs:
    model, data, memory, scorer = cfg["model"], cfg["data"], cfg["memory"], cfg["scorer"]
    max_seq = data["max_prompt_length"] + data["max_response_length"]
    reserve = memory["reserve_gb"]
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or reserve < 0:
        raise PlanError(f"memory.reserve_gb must be a number >= 0, got {reserve!r} (e.g. memory.reserve_gb=4)")
    flags = {attr: bool(passthrough.get(key, default)) for attr, (key, default) in OFFLOAD_KEYS.items()}
    dtypes = {attr: str(passthrough.get(key, default)) for attr, (key, default) in DTYPE_KEYS.items()}
    micro = batch.max_token_len_per_gpu if batch.dynamic_bsz else batch.mu * max_seq
    return MemoryInputs(
        gpu_gb=float(gpu_gb), reserve_gb=float(reserve),
        actor=ActorShape(params_b=float(model["params_b"]), layers=model["num_layers"], hidden=model["hidden_size"],
                         heads=model["num_attention_heads"], kv_heads=model["num_kv_heads"], vocab=model["vocab_size"]),
        world_size=world_size, tp=batch.tp, samples_per_step=batch.samples_per_step, max_seq_len=max_seq,
        micro_tokens=micro, max_num_seqs=int(passthrough.get(MAX_NUM_SEQS[0], MAX_NUM_SEQS[1])),
        gradient_checkpointing=bool(passthrough.get(*GRADIENT_CHECKPOINTING)),
        use_ref=bool(cfg["algo"]["use_kl_loss"]), vllm_share_ceiling=float(model["gpu_memory_utilization"]),
        scorer_placement=placement if scorer_models else None, scorer_dtype=scorer["dtype"],
        scorer_batch_tokens=scorer["batch_tokens"], scorer_models=_scorer_shapes(cfg, scorer_models),
        **flags, **dtypes)


def _gpu_gb(cfg: dict, detected: Optional[float]) -> float:
    configured = cfg["memory"].get("gpu_gb")
    if configured is None:
        if detected is None:
            raise PlanError("memory.gpu_gb is null (read it from the GPUs) but no GPU is visible here to read it "
                            "from; set memory.gpu_gb=79.6 (GiB per card: what an 80 GB H100 reports)")
        return float(detected)
    if isinstance(configured, bool) or not isinstance(configured, (int, float)) or configured <= 0:
        raise PlanError(f"memory.gpu_gb must be a positive number of GiB or null, got {configured!r} "
                        f"(e.g. memory.gpu_gb=79.6)")
    return float(configured)


def _refuse_memory(cfg: dict, inputs: MemoryInputs, mem: MemoryPlan, scorer_models: list[str],
                   placement: str) -> PlanError:
    """One line: what does not fit, with the numbers, and which alternatives would fit."""
    from dataclasses import replace

    alternatives = []
    if "xcomet_xxl" in scorer_models and "xcomet_xl" in cfg["scorer"]["models"]:
        swapped = list(dict.fromkeys("xcomet_xl" if m == "xcomet_xxl" else m for m in scorer_models))
        alternatives.append(("XCOMET-XL instead of XXL (reward.span_model=xcomet_xl)",
                             replace(inputs, scorer_models=_scorer_shapes(cfg, swapped))))
    if placement == "shared" and scorer_models:
        alternatives.append(("scorer.placement=dedicated", replace(inputs, scorer_placement="dedicated")))
    if not (inputs.actor_param_offload and inputs.actor_optimizer_offload
            and (inputs.ref_param_offload or not inputs.use_ref)):
        keys = [k for k, _ in OFFLOAD_KEYS.values() if inputs.use_ref or ".ref." not in k]
        alternatives.append(("offload (" + " ".join(f"+verl.{k}=true" for k in keys) + ")",
                             replace(inputs, actor_param_offload=True, actor_optimizer_offload=True,
                                     ref_param_offload=True)))
    fitting = [name for name, x in alternatives if plan_memory(x).fits]
    tried = [name.split(" (")[0] for name, _ in alternatives]
    hint = ("alternatives that fit: " + "; ".join(fitting) if fitting else
            f"none of {', '.join(tried)} fits alone: combine them or use more GPUs (gpus=, nodes=)"
            if tried else "use more GPUs (gpus=, nodes=)")
    scorer = f"scorer {'+'.join(scorer_models)} {placement}" if scorer_models else "no scorer"
    return PlanError(f"memory plan: {cfg['model']['name']} on {inputs.world_size} GPU(s) of {inputs.gpu_gb:g} GiB "
                     f"with {scorer} does not fit: {'; '.join(mem.problems)}; {hint}")


def build_plan(cfg: dict, run_dir: str, gpu_memory_gb: Optional[float] = None) -> RunPlan:
    """The whole run plan from the composed, resolved config (a plain dict). `gpu_memory_gb`: what
    the launcher read from the visible GPUs, used when memory.gpu_gb is null."""
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
    scorer_models = list(dict.fromkeys(scorer_models))
    scorer_plan = _scorer_plan(cfg, scorer_models, gpus_per_node)
    placement = cfg["scorer"]["placement"]
    inputs = _memory_inputs(cfg, batch, world_size, _gpu_gb(cfg, gpu_memory_gb), scorer_models, placement,
                            passthrough)
    memory = plan_memory(inputs)
    if not memory.fits:
        raise _refuse_memory(cfg, inputs, memory, scorer_models, placement)
    if memory.vllm_share != memory.vllm_share_ceiling:
        why = (f"the shared scorer needs {memory.scorer_gb:.1f} GiB on training GPU {scorer_plan.training_gpu_index}"
               if memory.scorer_on_training_gpu else "")
        resident = memory.rollout_gb - memory.vllm_gb - memory.reserve_gb - (
            memory.scorer_gb if memory.scorer_on_training_gpu else 0.0)
        why = ("; ".join(w for w in (why, f"actor/ref stay resident during rollout ({resident:.1f} GiB)") if w)
               + f" on a {memory.gpu_gb:g} GiB GPU with {memory.reserve_gb:g} GiB reserve")
        adjustments.append(Adjustment("gpu_memory_utilization", memory.vllm_share_ceiling, memory.vllm_share, why))
    try:
        token_credit = plan_token_credit(cfg)
    except CreditConfigError as exc:
        raise PlanError(str(exc)) from None
    try:
        rules = stop_rules(cfg)
    except StopRulesError as exc:
        raise PlanError(str(exc)) from None
    try:
        limit = plan_time_limit(cfg.get("slurm") or {})
    except TimeLimitError as exc:
        raise PlanError(str(exc)) from None
    ckpt_dir = checkpoint_prefix(cfg["paths"]["results_root"], model["name"], reward["name"], mode,
                                 algo["name"], world_size)
    backends = tuple(cfg["logger"]["backends"])
    return RunPlan(
        model=model["name"], model_path=model["path"], reward=reward["name"], reward_mode=mode,
        algo=algo["name"], seed=cfg["seed"], gpus_per_node=gpus_per_node, nodes=nodes,
        world_size=world_size, batch=batch, samples_per_step=batch.samples_per_step,
        adjustments=tuple(adjustments),
        checkpoint_dir=ckpt_dir,
        run_dir=run_dir,
        wandb_project=f"qe-rl-{reward['name']}-{mode}-s{batch.samples_per_step}",
        wandb_run_name=f"{model['name']}-{algo['name']}-g{world_size}",
        ray_cpus_needed=ray_needed, ray_num_cpus=ray_num_cpus,
        scorer_models=tuple(scorer_models),
        scorer_gpus_per_node=scorer_gpus, node_gpus=gpus_per_node + scorer_gpus, node_cpus=node_cpus,
        wandb_run_id="",
        train_files=data["train_files"], val_files=data["val_files"],
        max_prompt_length=data["max_prompt_length"], max_response_length=data["max_response_length"],
        logger_backends=backends, wandb_offline=bool(cfg["logger"].get("offline", False)),
        device=cfg["accelerator"]["device"], accelerator_env=dict(cfg["accelerator"].get("env") or {}),
        gpu_memory_utilization=memory.vllm_share, scorer=scorer_plan, memory=memory,
        verl_passthrough=passthrough, stop_rules=rules, time_limit=limit,
        token_credit=token_credit,
    )
