"""A change to a module applied right after its first import: verl's external modules are imported by
verl/__init__.py, before most of verl, vLLM or torch is, and importing a target there would load vLLM into
processes that never use it (the TaskRunner, the reward workers)."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after `name` is first imported (its exec_module), once."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then(module)
        spec.loader.exec_module = exec_module
        return spec


def when_imported(name: str, then: Callable[[ModuleType], None]) -> None:
    """`then(module)` now if `name` is imported already, else right after its first import."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))
