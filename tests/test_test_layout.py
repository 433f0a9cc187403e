"""The layout of tests/: shared code lives in tests/helpers/, fixtures in conftest.py files.

A test module imports no other test module (`test_*.py`: what two modules share goes to tests/helpers/,
or to a conftest.py when it is a fixture) and no private name of the project (src/, tests/); a fixture
is never imported (pytest finds it in a conftest.py above the test); tests/helpers/ holds no test
module and no fixture. Lazy imports inside functions count.

verl keeps two registries the tests read private, with no accessor: they are the oracle the tests
compare against, so those two names, and only they, are allowed (THIRD_PARTY_PRIVATE).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
HELPERS = TESTS / "helpers"

# (module, private name) -> why a test reads it
THIRD_PARTY_PRIVATE = {
    ("verl.workers.rollout.base", "_ROLLOUT_REGISTRY"):
        "verl's rollout registry (verl/workers/rollout/base.py get_rollout_class reads it): the async rollouts "
        "verl offers, which tests/launcher/test_verl_reasons.py checks the launcher's reasons against",
    ("verl.experimental.agent_loop.agent_loop", "_agent_loop_registry"):
        "verl's agent-loop registry, the lookup AgentLoopWorker._run_agent_loop makes "
        "(verl/experimental/agent_loop/agent_loop.py): where the project's agent loop must resolve",
}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module under tests/."""
    out = {}
    for path in sorted(TESTS.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, source: str | None = None):
    """(line, imported module, imported name or None) of every import in the module, relative ones
    resolved; `from a import b` gives (a, b) and, for a module b, (a.b, None) too."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[:len(package) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                yield node.lineno, base, alias.name
                yield node.lineno, f"{base}.{alias.name}", None


def _fixtures(path: Path) -> set[str]:
    """Names of the functions in the module decorated as pytest fixtures."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if ast.unparse(target) in ("pytest.fixture", "fixture"):
                    names.add(node.name)
    return names


def _is_project(module: str) -> bool:
    return module.split(".")[0] in ("src", "tests")


def violations(name: str, path: Path, modules: dict[str, Path], fixtures: dict[str, set[str]],
               source: str | None = None) -> list[str]:
    """What module `name` (at `path`) imports against the rules above, one line each."""
    rel = path.relative_to(ROOT)
    found = []
    for line, module, imported in sorted(_imports(name, path, source), key=lambda i: i[0]):
        if module.split(".")[-1].startswith("test_") and module in modules:
            found.append(f"{rel}:{line} imports the test module {module}: move what it shares to tests/helpers/")
        if imported is None:
            continue
        if imported.startswith("_") and not imported.startswith("__"):
            if _is_project(module):
                found.append(f"{rel}:{line} imports the private name {imported} from {module}: make it public "
                             f"where it is an API, or test through the public one")
            elif (module, imported) not in THIRD_PARTY_PRIVATE:
                found.append(f"{rel}:{line} imports the private name {imported} from {module}: not in "
                             f"THIRD_PARTY_PRIVATE (tests/test_test_layout.py)")
        if imported in fixtures.get(module, ()):
            found.append(f"{rel}:{line} imports the fixture {imported} from {module}: pytest finds fixtures in "
                         f"the conftest.py files above a test; move it to the nearest common one")
    return list(dict.fromkeys(found))  # one line per import, not per name it takes


def _fixture_table(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {name: _fixtures(path) for name, path in modules.items()}


def test_no_test_imports_a_test_module_a_private_name_or_a_fixture():
    modules = _modules()
    fixtures = _fixture_table(modules)
    found = [v for name, path in modules.items() for v in violations(name, path, modules, fixtures)]
    assert not found, "\n".join(found)


def test_every_allowed_third_party_private_name_is_still_imported():
    modules = _modules()
    used = {(module, imported) for name, path in modules.items() for _, module, imported in _imports(name, path)}
    assert set(THIRD_PARTY_PRIVATE) <= used, set(THIRD_PARTY_PRIVATE) - used


def test_helpers_hold_no_test_module_and_no_fixture():
    assert (HELPERS / "__init__.py").is_file()
    files = sorted(HELPERS.rglob("*.py"))
    assert not [p.name for p in files if p.name.startswith("test_")]  # pytest would collect it
    assert not {p.name: _fixtures(p) for p in files if _fixtures(p)}  # fixtures live in conftest.py


def test_the_check_catches_each_kind_of_import():
    """The rules on a probe module beside the real ones (a check that cannot fail proves nothing)."""
    modules = _modules()
    fixtures = _fixture_table(modules)
    probe = TESTS / "rewards" / "probe_imports.py"
    source = ("from tests.rewards.test_verl_managers import check_common\n"
              "from .test_fuzz import fuzz\n"
              "def f():\n    import tests.launcher.test_verl_oracle\n"
              "from src.node.preflight import _check_checkpoint_dir\n"
              "from tests.helpers import reward_config\n"
              "from verl.utils import _private\n"
              "from tests.conftest import tokenizer\n")
    found = violations("tests.rewards.probe_imports", probe, modules, fixtures, source)
    assert [v.split(" ", 1)[0] for v in found] == [f"tests/rewards/probe_imports.py:{n}" for n in (1, 2, 4, 5, 7, 8)], \
        found
    assert "test module tests.rewards.test_verl_managers" in found[0]
    assert "test module tests.rewards.test_fuzz" in found[1]
    assert "private name _check_checkpoint_dir from src.node.preflight" in found[3]
    assert "fixture tokenizer from tests.conftest" in found[5]
