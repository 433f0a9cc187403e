"""The layout of src/: one package per pipeline stage, imports in one direction, each package saying so.

ALLOWED is the import graph docs/layout.md draws: a package imports only the
packages listed for it (lazy imports inside functions count), the graph has no cycle, and each
package's two-line docstring names exactly what it may import, with no exception. Below the packages,
the modules: no two import each other, even lazily, and none imports another's private name. Plus
Hydra's private API in one adapter module, and the
scorer (its own environment) importing nothing of src but itself. The train-env packages that share
facts with the service (rewards, evaluate, report: severity names, model kind -> metric, /score items)
may import src.scorer for its stdlib-only vocabulary.py and the backends' registry of descriptors
(src/scorer/backends/__init__.py), one copy of them (tests/test_one_copy.py).
"""
import ast
import graphlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# package (or top-level module) -> the src packages it may import
ALLOWED = {
    # the reward guards' settings classes (src/rewards/guards.py): the reward group's guards schema is made from them,
    # one definition of each guard's keys for the launcher and the workers (issue 46, item 6)
    "config": {"rewards"},
    "data": set(),
    "scorer": set(),
    # builders users run (experiment=smoke_tiny) and tests share; in both environments, so nothing of src
    "tiny_models": set(),
    # rewards, report and evaluate import src.scorer.vocabulary and the backends' registry (stdlib only): the severity names,
    # model kind -> metric and /score item building the service and its clients share, one copy
    "rewards": {"data", "scorer"},
    # + src.record: the snapshot's file names, the identity file and the sweep summary it compares runs by
    # + src.evaluate: where run= evaluations of a sweep lie and their files' names (shown beside the curves)
    "report": {"data", "evaluate", "record", "scorer"},
    # config.dotted.flatten: the one flatten, shared with the run identity (record)
    # + src.scorer KINDS and the backends' descriptors (stdlib + PyYAML): a QE model's backend sizes its memory
    "plan": {"config", "rewards", "scorer"},
    "trainer": {"rewards", "verl_fixes"},
    # verl imports it by name in the processes of a CPU run (VERL_USE_EXTERNAL_MODULES); nothing of src imports it
    "cpu_platform": {"verl_fixes"},
    # verl imports its `register` by name in every process of every run; the launcher reads its variables' names
    "verl_fixes": set(),
    "verl_config": {"config", "plan", "rewards"},
    "record": {"config"},
    "slurm": {"config", "plan", "record"},
    "node": {"config", "plan", "record", "scorer", "slurm", "trainer", "verl_fixes"},
    "pipeline": {"config", "data", "node", "plan", "record", "report", "slurm", "verl_config"},
    # + src.record: a run dir's snapshot (its checkpoint dir) and verl's metrics file (steps=best)
    "evaluate": {"config", "data", "node", "plan", "record", "rewards", "scorer"},
    "launch": {"config", "pipeline"},
}
HYDRA_ADAPTER = SRC / "config" / "hydra_internal.py"


def unit_of(path: Path) -> str:
    """'plan' for src/plan/batch.py, 'launch' for src/launch.py."""
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def python_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def imports(path: Path):
    """(module imported, names imported from it, line) for every import in the file, lazy ones
    included; relative imports resolved against the file's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(("src",) + path.relative_to(SRC).parts[:-1]) if path.is_relative_to(SRC) else ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module, [a.name for a in node.names], node.lineno


def src_target(module: str, names: list[str]) -> list[str]:
    """The src units an import reaches: `from src import verl_config` -> ['verl_config']."""
    parts = module.split(".")
    if parts[0] != "src":
        return []
    if len(parts) > 1:
        return [parts[1]]
    return names


def test_src_is_packages_and_one_entry_module():
    top = sorted(p.name for p in SRC.iterdir() if p.suffix == ".py")
    assert top == ["__init__.py", "launch.py"], f"modules outside a package: {top}"
    packages = sorted(p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert set(packages) == set(ALLOWED) - {"launch"}, "a package without an entry in ALLOWED, or the reverse"


def test_the_allowed_graph_has_no_cycle():
    order = list(graphlib.TopologicalSorter(ALLOWED).static_order())  # raises CycleError on a cycle
    assert set(order) == set(ALLOWED)


def test_every_import_goes_down_the_graph():
    wrong = []
    for path in python_files(SRC):
        unit = unit_of(path)
        for module, names, line in imports(path):
            for target in src_target(module, names):
                if target != unit and target not in ALLOWED[unit]:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} ({unit}) imports src.{target}")
    assert not wrong, "\n".join(wrong)


def module_name(path: Path) -> str:
    """'src.rewards.guards' for src/rewards/guards.py, 'src.rewards' for its __init__.py."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """Module -> the src modules it imports (lazy imports included): `from src.rewards import guards`
    reaches src.rewards.guards, `from src.rewards.guards import check` src.rewards.guards; a
    package's __init__ is not counted as imported by its own modules."""
    paths = {module_name(p): p for p in python_files(SRC)}
    graph = {}
    for name, path in paths.items():
        reached = set()
        for module, names, _ in imports(path):
            for target in [f"{module}.{n}" for n in names if f"{module}.{n}" in paths] or [module]:
                while target and target not in paths:  # `from src.rewards.guards import X`: the module
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    reached.add(target)
        graph[name] = reached
    return graph


def test_no_import_circle_between_modules():
    """Packages in order are not enough: two modules of one package importing each other (lazily
    or not) are a circle too, and a sign that one of them owns both sides of a boundary."""
    try:
        graphlib.TopologicalSorter(module_graph()).prepare()
    except graphlib.CycleError as exc:
        # graphlib lists the circle from importer to imported's importer: reversed, `a -> b` is `a imports b`
        pytest.fail(f"import circle: {' -> '.join(reversed(exc.args[1]))}")


def test_no_private_name_of_another_module():
    """A `_name` is its module's own, even for a module of the same package: the name it is used under
    elsewhere is a public one, or the fact moves to a module both can import."""
    wrong = []
    for path in python_files(SRC):
        for module, names, line in imports(path):
            if module.startswith("src") and module != module_name(path):
                wrong += [f"{path.relative_to(ROOT)}:{line} imports {module}.{n}" for n in names
                          if n.startswith("_") and not n.startswith("__")]
    assert not wrong, "\n".join(wrong)


def test_hydra_private_api_only_in_its_adapter():
    users = [f"{path.relative_to(ROOT)}:{line}" for root in (SRC, ROOT / "hydra_plugins")
             for path in python_files(root) if path != HYDRA_ADAPTER
             for module, _, line in imports(path) if module.startswith("hydra._internal")]
    assert not users, users
    assert any(m.startswith("hydra._internal") for m, _, _ in imports(HYDRA_ADAPTER))


def test_scorer_imports_only_itself_and_never_verl():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in python_files(SRC / "scorer") for module, names, line in imports(path)
             if (module.startswith("src") and src_target(module, names) != ["scorer"]) or module.startswith("verl")]
    assert not wrong, wrong


def test_hydra_plugins_reach_src_only_through_the_slurm_sweep():
    targets = {t for path in python_files(ROOT / "hydra_plugins")
               for module, names, _ in imports(path) for t in src_target(module, names)}
    assert targets == {"slurm"}


PACKAGES = sorted(set(ALLOWED) - {"launch"})


@pytest.mark.parametrize("package", PACKAGES)
def test_package_docstring_says_what_it_holds_and_may_import(package):
    doc = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text(encoding="utf-8")))
    assert doc, f"src/{package}/__init__.py has no docstring"
    lines = doc.splitlines()
    assert len(lines) == 2, f"src/{package}: two lines (what it holds; `May import: ...`), got {len(lines)}"
    assert lines[1].startswith("May import:"), lines[1]
    named = set(re.findall(r"\bsrc\.([a-z_]+)", lines[1]))
    assert named == ALLOWED[package], (f"src/{package} docstring names {sorted(named)}, ALLOWED has "
                                       f"{sorted(ALLOWED[package])}")


def test_the_checks_can_fail(tmp_path):
    """The walker sees lazy, relative and `from src import x` imports, and private names."""
    pkg = SRC / "plan"  # resolve relative imports as if the file were in src/plan
    body = ("def f():\n    from src import pipeline\n    from ..node import training\n"
            "    from src.record.identity import _flatten\n")
    probe = pkg / "_layout_probe.py"
    probe.write_text(body, encoding="utf-8")
    try:
        found = [(m, n) for m, n, _ in imports(probe)]
    finally:
        probe.unlink()
    assert ("src", ["pipeline"]) in found and ("src.node", ["training"]) in found
    assert src_target("src", ["pipeline"]) == ["pipeline"] and src_target("src.node", ["training"]) == ["node"]
    assert ("src.record.identity", ["_flatten"]) in found
    graph = module_graph()  # the module walker sees `from pkg import module` and `from pkg.module import name`
    assert {"src.rewards.lid", "src.rewards.guard_registry"} <= graph["src.rewards.guards"]
    assert "src.verl_config.ppo_trainer" in graph["src.verl_config.user_keys"]
    graph["src.rewards.lid"].add("src.rewards.guards")
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()
