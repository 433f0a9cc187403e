"""The `+verl.<key>` overrides a user gives, checked against verl's own ppo_trainer tree before a
launch: a misspelt key (Hydra would add it silently, verl would never read it) and a key of the
reward function (the reward group's, reward.*) are refused with one line naming the nearest key.

Called by the pre-launch check and the run (src/pipeline/precheck.py, run.py); apart from
checks.py (verl's values, run inside validate) because it reads ppo_trainer's own table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from src.rewards.credit import launch as credit_launch

from .checks import VerlValueError
from .ppo_trainer import VERL_KEYS, compose


# verl nodes whose keys are free, beyond the empty mappings of verl's yaml (`override_config: {}`,
# `engine_kwargs.vllm: {}`, ...) and the kwargs dicts our own table adds with `+`
# (reward.reward_kwargs; reward.custom_reward_function's are the reward group's: _reward_function_refusal):
# any key under them is passed on as a keyword argument, so whether it means something is the
# receiver's business, not a typo we can detect.
OPEN_DICTS = {
    # verl/trainer/main_ppo.py run_ppo: ray.init(**ray_kwargs.ray_init)
    "ray_kwargs.ray_init": "ray.init's keyword arguments",
}


def check_user_keys(plan) -> None:
    """`check_passthrough_keys` for a plan's `verl.` keys, against verl's tree plus what our table adds."""
    if not plan.verl_passthrough:
        return
    for key in plan.verl_passthrough:
        refusal = _reward_function_refusal(key)
        if refusal:
            raise VerlValueError(refusal)
    added = [k for k, _ in VERL_KEYS] + [k for k, _ in credit_launch.verl_overrides(plan.token_credit)]
    check_passthrough_keys(plan.verl_passthrough, added)


# verl's reward function and its kwargs are the reward group's (reward.*): set through `+verl.`, a
# weight would train one thing while `python -m src.evaluate.inspect_reward`, the plan and the guards' checks
# read another (issue 33: inspect scores with exactly the weights verl's config holds)
REWARD_FUNCTION = "reward.custom_reward_function."
REWARD_KEYS = {"train_weights": "weights", "validation_weights": "validation.weights"}


def _reward_function_refusal(key: str) -> str | None:
    if not key.startswith(REWARD_FUNCTION):
        return None
    rest = key[len(REWARD_FUNCTION):]
    head, _, tail = rest.partition(".")
    if head == "reward_kwargs" and tail:
        first, _, leaf = tail.partition(".")
        ours = f"reward.{REWARD_KEYS.get(first, first)}" + (f".{leaf}" if leaf else "")
        hint = f"set {ours}=... instead"
    else:
        hint = "choose the reward with reward=<group> (conf/reward/) or add a component (docs/rewards.md)"
    return (f"+verl.{key} is set by the reward group (reward.*), which the run's reward, its id and "
            f"`python -m src.evaluate.inspect_reward` all read; {hint}")


def check_passthrough_keys(keys, added: list[str]) -> None:
    """Every `+verl.<key>` names a key of verl's ppo_trainer (a yaml key, or a field of the config
    dataclass its node's `_target_` builds); VerlValueError with the nearest existing key otherwise.
    Hydra's `++` would add a misspelt key silently, and verl reads only the keys it knows, so
    `+verl.data.max_prompt_lenght=100` would leave the real max_prompt_length as it was.
    `added`: our table's verl keys (src/verl_config/ppo_trainer.py VERL_KEYS); those starting
    with `+` add a node verl's yaml lacks, a kwargs dict under which any key is open."""
    keys = list(keys)
    if not keys:
        return
    tree = OmegaConf.to_container(compose([]), resolve=False)  # verl's own ppo_trainer, cached
    open_paths = set(OPEN_DICTS) | {_first_missing(tree, k.lstrip("+")) for k in added if k.startswith("+")}
    for key in keys:
        refusal = _key_refusal(tree, key, open_paths)
        if refusal:
            raise VerlValueError(refusal)


def _first_missing(tree: dict, dotted: str) -> str:
    node, path = tree, []
    for part in dotted.split("."):
        path.append(part)
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    return ".".join(path)


def _key_refusal(tree: dict, key: str, open_paths: set[str]) -> str | None:
    node: Any = tree
    path: list[str] = []
    for part in key.split("."):
        if ".".join(path) in open_paths or ".".join(path + [part]) in open_paths:
            return None
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
            continue
        if node is None or (isinstance(node, dict) and not node):
            return None  # an empty mapping (or an unset optional one) in verl's yaml: free keys
        if isinstance(node, dict) and part in _dataclass_fields(node.get("_target_")):
            return None  # a field of verl's config dataclass that its yaml does not list
        where = ".".join(path)
        return _unknown_key_message(tree, key, where, node)
    return None


def _unknown_key_message(tree: dict, key: str, where: str, node: Any) -> str:
    import difflib

    scope = f"under {where}" if where else "at the top"
    candidates = _paths(tree)
    if isinstance(node, dict):
        candidates += [f"{where}.{f}" for f in _dataclass_fields(node.get("_target_")) if f != "_target_"]
    nearest = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if nearest:
        hint = f"did you mean +verl.{nearest[0]}?"
    elif isinstance(node, dict):
        names = sorted(str(k) for k in node if str(k) != "_target_")
        hint = f"keys {scope}: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
    else:
        hint = f"{where} is a value ({node!r}), not a section"
    return (f"verl has no key {key} (verl's ppo_trainer config, {scope}): +verl.{key} would add a key "
            f"nothing reads; {hint}")
    return None


def _dataclass_fields(target: Any) -> set[str]:
    """Field names of the config dataclass a verl node's `_target_` names, read from verl's source
    (importing verl.workers.config costs torch's import, tens of seconds): the annotated names of
    the class body and of its bases, found in the files of the `_target_`'s module or package."""
    import ast
    import importlib.util

    if not isinstance(target, str) or "." not in target:
        return set()
    spec = importlib.util.find_spec("verl")  # the package's location, without importing it
    if spec is None or not spec.submodule_search_locations:
        return set()
    root = Path(list(spec.submodule_search_locations)[0]).parent
    module, _, name = target.rpartition(".")
    base = root.joinpath(*module.split("."))
    files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    files += [root / "verl" / "base_config.py"]
    classes: dict[str, ast.ClassDef] = {}
    for f in files:
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)

    def fields(cls_name: str, seen: set[str]) -> set[str]:
        cls = classes.get(cls_name)
        if cls is None or cls_name in seen:
            return set()
        seen.add(cls_name)
        own = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for b in cls.bases:
            own |= fields(b.id if isinstance(b, ast.Name) else getattr(b, "attr", ""), seen)
        return own

    return fields(name, set())


def _paths(tree: Any, prefix: str = "") -> list[str]:
    out = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            if str(k) == "_target_":
                continue
            dotted = f"{prefix}{k}"
            out.append(dotted)
            out += _paths(v, dotted + ".")
    return out
