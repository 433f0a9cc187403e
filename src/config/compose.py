"""Our config composed from conf/ with overrides, and a sweep's jobs, through Hydra's compose API.

`compose_config(overrides)` is the one way code outside a Hydra app (the pre-launch check, the
evaluation CLI, tests) gets the config a run with those overrides would get: conf/ of the code
this process runs, the schema (src/config/schema.py), the resolvers, resolved to plain dicts.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import re

from omegaconf import DictConfig, OmegaConf

from . import hydra_internal, parse_cache, schema
from .paths import CONF_DIR
from .resolvers import register_resolvers


def register() -> None:
    """What composing conf/ needs registered first: the resolvers and the schema. Idempotent;
    called wherever a config is composed (also in a Slurm job composing from its code snapshot). OmegaConf's
    interpolation parses and config files are remembered from then on (src/config/parse_cache.py: the same strings,
    parsed once; hydra_internal.remember_config_files: each file read once)."""
    parse_cache.install()
    hydra_internal.remember_config_files()
    register_resolvers()
    schema.register()


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """conf/config.yaml with `overrides` (Hydra's compose API), unresolved. Without the `hydra` node, the
    composition of the same config group choices is reused within the process and the other overrides are
    applied to a copy as Hydra applies them (hydra_internal.compose_on_choices)."""
    from hydra.core.global_hydra import GlobalHydra

    register()
    with _interrupt_kept():
        # inside a running Hydra app the compose API refuses (compose_config_in_app is for that): so it does
        # here too, whatever this process composed before
        if not with_hydra and not GlobalHydra.instance().is_initialized():
            cfg = hydra_internal.compose_on_choices(str(CONF_DIR), overrides, _composed_choices)
            if cfg is not None:
                return cfg
        return _compose_with_hydra(overrides, with_hydra)


@contextlib.contextmanager
def _interrupt_kept():
    """A Ctrl-C that lands inside OmegaConf comes out as the interrupt, not as a config error. Why:
    OmegaConf restores a node's flags in a `finally` (omegaconf.py flag_override); the KeyboardInterrupt
    raised there leaves the node half-set, the restore fails on it (an UnboundLocalError, an AttributeError)
    and OmegaConf and Hydra wrap that (config_loader_impl.py load_configuration: ConfigCompositionException):
    a command would answer an interrupt with `error: config: ConfigCompositionException` and exit 2. The
    interrupt is still in the chain (__context__), and is raised again as itself."""
    try:
        yield
    except Exception as exc:
        interrupt = next((e for e in _chain(exc) if isinstance(e, KeyboardInterrupt)), None)
        if interrupt is not None:
            raise interrupt from None
        raise


def _chain(exc: BaseException):
    """`exc`, then what it was raised from or while handling, and so on (each once)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _compose_with_hydra(overrides: list[str], with_hydra: bool) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="launch"):
        return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=with_hydra)


@functools.lru_cache(maxsize=64)
def _composed_choices(choices: tuple[str, ...]) -> DictConfig:
    """conf/ with only config group choices (`algo=dapo`, `+experiment=...`), composed once per process;
    never handed out: compose_on_choices copies it."""
    return _compose_with_hydra(list(choices), with_hydra=False)


def to_plain(cfg: DictConfig) -> dict:
    """A composed config (without its `hydra` node) as the plain dict the plan reads: resolved,
    enums as their names (so it dumps to YAML as written in conf/)."""
    if "hydra" in cfg:
        cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def compose_config(overrides: list[str]) -> dict:
    """Our config composed with overrides, resolved to a plain dict."""
    cfg = compose(overrides)
    with _interrupt_kept():  # resolving sets OmegaConf's flags too
        return to_plain(cfg)


def compose_config_in_app(overrides: list[str]) -> dict:
    """`compose_config`, also inside a running Hydra app (a job composing a second config: Hydra's
    compose API refuses while the app's GlobalHydra is initialized). Same result."""
    register()
    with _interrupt_kept():
        return to_plain(hydra_internal.compose_dir(str(CONF_DIR), "config", overrides))


def is_hydra_override(line: str) -> bool:
    return line.startswith(("hydra.", "hydra/", "+hydra", "~hydra", "++hydra"))


class SweepError(ValueError):
    """A sweep given where a single run was asked for (or the reverse): one line."""


def sweep_jobs(overrides: list[str], multirun: bool, sweeper_params: dict) -> list[list[str]]:
    """Every job's overrides, as Hydra's BasicSweeper makes them: a sweep config's
    hydra.sweeper.params first, command-line overrides after (the command line wins per key)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    if not multirun:
        sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
        if sweeps:
            raise SweepError(f"{sweeps[0]} is a sweep: add --multirun to run every value")
        if sweeper_params:
            raise SweepError("the config defines a sweep (hydra.sweeper.params, e.g. from +sweep=...): "
                             "add --multirun to run it")
        return [overrides]
    params = parser.parse_overrides([f"{k}={v}" for k, v in sweeper_params.items()])
    return hydra_internal.sweep_jobs(params + parsed)


def fixed_overrides(overrides: list[str]) -> list[str]:
    """The overrides that are not sweeps (what every job of a sweep shares)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_sweep_override()]


def one_line(exc: BaseException) -> str:
    """Hydra's multi-line errors on one line: what failed, why (OmegaConf's reason for a schema
    refusal, which Hydra keeps on a later line or in the exception's cause), the key
    (`full_key: scorer.placement`), and the options Hydra lists for an unknown group option."""
    marked = _yaml_error(exc)
    if marked is not None:
        return marked
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    if not lines:
        return type(exc).__name__
    cause = exc.__cause__
    lines += [l.strip() for l in str(cause).splitlines() if l.strip()] if cause is not None else []
    head = lines[0]
    reason = lines[1] if len(lines) > 1 else ""
    # "Error merging override gpus=x" / "... raised while composing config:" say nothing of why
    if reason and not reason.startswith(("full_key:", "Available options")) and (
            head.endswith(":") or head.startswith(("Error merging", "Could not override"))):
        head = f"{head.rstrip(':.')}: {reason}"
    replaced = _group_replaced(head)
    if replaced is not None:
        return replaced
    key = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("full_key:")), None)
    if key and key not in head:
        head += f" (key: {key})"
    if any(l.startswith("Available options") for l in lines):
        idx = next(i for i, l in enumerate(lines) if l.startswith("Available options"))
        options = list(itertools.takewhile(lambda l: not l.endswith(":"), lines[idx + 1:]))  # then "Config search path:"
        head += f" ({lines[idx].rstrip(':').lower()}: {', '.join(options)})"
    return head


def _group_replaced(head: str) -> str | None:
    """`reward.guards.repetition=false`: a value in place of a group of settings (a dataclass of the
    schema), which OmegaConf refuses as "bool is not a subclass of RepetitionSchema": the key, what was
    given, and how to set the group (to switch it off: its `enable`)."""
    import re
    import typing
    from dataclasses import is_dataclass

    found = re.match(r"Error merging override ([\w.]+)=.*: Invalid type assigned: \w+ is not a subclass of "
                     r"\w+\. value: (.*)$", head)
    if found is None:
        return None
    key, value = found.groups()
    node: typing.Any = schema.Config
    for part in key.split("."):
        hints = typing.get_type_hints(node) if isinstance(node, type) and is_dataclass(node) else {}
        if part not in hints:
            return None
        node = _unwrap_optional(hints[part])
    if not (isinstance(node, type) and is_dataclass(node)):
        return None
    names = list(typing.get_type_hints(node))
    fix = f"to turn it off: {key}.enable=false" if "enable" in names else f"set its keys ({', '.join(names)})"
    return f"{key} is a group of settings, got {value}; {fix}"


def _yaml_error(exc: BaseException) -> str | None:
    """A YAML syntax error anywhere in the exception's chain (a config file of conf/, e.g. the
    user's conf/local/default.yaml): its file, line and column, and what the parser expected."""
    import yaml

    for exc in _chain(exc):
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
            mark = exc.problem_mark
            where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}"
            context = f" ({exc.context} at line {exc.context_mark.line + 1})" if exc.context and exc.context_mark else ""
            return f"YAML syntax error in {where}: {exc.problem}{context}; fix that file"
    return None


def added_key_refusal(overrides: list[str]) -> str | None:
    """Why an override that adds (`+key=`, `++key=`) is refused, or None. Hydra adds any key a `+`
    names, so `+rewad=comet` (Hydra's own hint after `rewad=comet`) would compose, keep the default
    reward and only change the run's name. A `+name=` with no dot must name a config group
    (`+sweep=reward_grid`); a dotted key must be a key of the schema (src/config/schema.py), except
    under its free-form parts (`verl.`: checked against verl's own tree by src/verl_config/user_keys.py;
    a mapping such as `scorer.models.` or `reward.weights.`, whose component names src/rewards/settings.py
    checks against the registry, plug-ins included). Hydra's own keys (`hydra.`) are Hydra's business."""
    import difflib
    import typing
    from dataclasses import fields, is_dataclass

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    for o in OverridesParser.create().parse_overrides(overrides):
        if o.type not in (OverrideType.ADD, OverrideType.FORCE_ADD) or is_hydra_override(o.key_or_group):
            continue
        key, plus = o.key_or_group, o.input_line[:o.input_line.index(o.key_or_group)]
        value = o.input_line.split("=", 1)[1] if "=" in o.input_line else ""
        if o.package is not None or "/" in key:
            continue
        if "." not in key:
            groups = config_groups()
            if key in groups:
                continue
            if key in {f.name for f in fields(schema.Config)}:
                if plus == "++":
                    continue  # `++gpus=2` overrides an existing key: harmless
                return f"{o.input_line}: {key} is already a key of the config; set it without '+': {key}={value}"
            near = difflib.get_close_matches(key, groups, n=1, cutoff=0.5)
            default_groups = {f.name for f in fields(schema.Config)}
            fix = (f"; did you mean {'' if near[0] in default_groups else '+'}{near[0]}={value}?" if near else "")
            return (f"{o.input_line} names no config group (groups: {', '.join(sorted(groups))}): it would add a "
                    f"key nothing reads{fix}")
        node: typing.Any = schema.Config
        path = []
        for part in key.split("."):
            if not (isinstance(node, type) and is_dataclass(node)):
                break  # a mapping or `Any` (verl, scorer.models, accelerator.env, reward.weights): free keys
            hints = typing.get_type_hints(node)
            if part not in hints:
                return _no_such_key(o.input_line, path, part, hints)
            node = _unwrap_optional(hints[part])
            path.append(part)
    return None


_APPEND_HINT = re.compile(r"To append to your config use \+(\S+)")


def plus_form(line: str, overrides: list[str]) -> tuple[str, list[str]] | None:
    """Hydra refused `key=value` for a key the config does not have and said (in `line`, its error on one
    line) to add it with `+`. Where the key is under a free mapping (reward.weights, reward.clip: the
    component names a later check knows, plug-ins included), that check, not Hydra's hint, knows whether
    the name is misspelt: (the key, the overrides with `+key=value` in its place) to run it on; None
    when Hydra's hint is not about such a key."""
    added = _APPEND_HINT.search(line)
    if added is None or added_key_refusal(["+" + added.group(1)]) is not None:
        return None
    key = added.group(1).split("=", 1)[0]
    plus = ["+" + o if o.split("=", 1)[0] == key else o for o in overrides]
    return (key, plus) if plus != overrides else None


def _no_such_key(line: str, path: list[str], part: str, keys) -> str:
    """The refusal of an added key `part` under `path` (the schema's), with the
    nearest existing key or, failing one, the keys there are."""
    import difflib

    names = sorted(keys)
    near = difflib.get_close_matches(part, names, n=1, cutoff=0.5)
    where = ".".join(path) or "the config"
    fix = f"did you mean {'.'.join(path + [near[0]])}?" if near else f"keys of {where}: {', '.join(names)}"
    return f"{line}: {where} has no key {part!r}, so it would add a key nothing reads; {fix}"


def _unwrap_optional(tp):
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


def config_groups() -> list[str]:
    """The config groups a `+group=option` may name: conf/'s (Hydra's public ConfigLoader API) and
    the sweeps/ dir's `sweep` (hydra_plugins/qe_rl/sweeps_source.py); Hydra's own and `local` aside."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from hydra_plugins.qe_rl.sweeps_source import GROUP as SWEEP_GROUP

    register()
    if GlobalHydra.instance().is_initialized():  # inside a running Hydra app: its own loader
        loader = GlobalHydra.instance().config_loader()
        return sorted((set(loader.list_groups("")) | {SWEEP_GROUP}) - {"hydra", "local"})
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        return sorted((set(loader.list_groups("")) | {SWEEP_GROUP}) - {"hydra", "local"})
