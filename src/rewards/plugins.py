"""reward.plugins: the user's files or modules that register reward components.

Each entry is a Python module name (`my_lab.rewards`, importable on the workers' PYTHONPATH) or a
path to a `.py` file. The launcher resolves a relative path against the checkout (one meaning on
every node, whatever the worker's working directory) and puts the resolved list into verl's
reward_kwargs; every process that computes rewards (the launcher's validation, each verl reward
worker) imports them before it reads the weights, so `reward.weights.<name>` of a plugin
component is checked at launch like a built-in one's.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Iterable

from src.rewards import components
from src.rewards.components import ComponentError

# spec -> the component names its import registered (a second load of the same spec is free)
_PROVIDED: dict[str, tuple[str, ...]] = {}


class PluginError(ValueError):
    """A plugin that cannot be loaded; one line naming it."""


def resolve(specs: Iterable[str], root: Path) -> list[str]:
    """Launch side: file paths made absolute against `root` (the checkout), checked to exist;
    module names kept as given."""
    out = []
    for spec in specs:
        spec = str(spec)
        if spec.endswith(".py") or "/" in spec:
            path = Path(spec).expanduser()
            path = path if path.is_absolute() else (root / path)
            if not path.is_file():
                raise PluginError(f"reward.plugins: {spec} is not a file (a .py file that registers components, "
                                  f"or a module name importable on the workers' PYTHONPATH)")
            out.append(str(path.resolve()))
        else:
            out.append(spec)
    return out


def component_names(specs: Iterable[str]) -> tuple[str, ...]:
    """The components a run with these plugins has: the built-in ones, then each plugin's, in order.
    Not every registered one: a process that loaded another run's plugin (a test, a sweep's
    precheck) must not add its components to this run's reward kwargs."""
    load(specs)
    names = list(components.BUILTIN)
    for spec in specs:
        names += [n for n in _PROVIDED[str(spec)] if n not in names]
    return tuple(names)


def load(specs: Iterable[str]) -> None:
    """Import each plugin once per process (registering its components)."""
    for spec in specs:
        spec = str(spec)
        if spec in _PROVIDED:
            continue
        before = set(components.known())
        try:
            if spec.endswith(".py"):
                # a stable module name per file, so a second import (another worker start) is the same module
                name = "qe_rl_reward_plugin_" + hashlib.sha1(spec.encode()).hexdigest()[:12]
                module_spec = importlib.util.spec_from_file_location(name, spec)
                if module_spec is None or module_spec.loader is None:
                    raise PluginError(f"reward.plugins: cannot load {spec} as a Python file")
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                module_spec.loader.exec_module(module)
            else:
                importlib.import_module(spec)
        except (PluginError, ComponentError):
            raise
        except Exception as exc:  # the user's code: any error, reported in one line
            raise PluginError(f"reward.plugins: loading {spec} failed: {type(exc).__name__}: {exc}") from None
        provided = tuple(n for n in components.known() if n not in before)
        if not provided:
            raise PluginError(f"reward.plugins: {spec} registers no reward component (decorate a RewardComponent "
                              f"subclass with @register_component, src/rewards/components.py)")
        _PROVIDED[spec] = provided
