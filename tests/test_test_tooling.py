"""The suite's own tooling: launches forked from the launch server behave as `python -m src.launch`
subprocesses do (tests/launch_server.py), the xdist groups and their order (tests/scheduling.py), and
the per-directory time table every CI log ends with (tests/durations.py)."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import durations, launch_server, scheduling


@pytest.mark.parametrize("args", [["gpus=0", "dry_run=true"], ["--resume"], ["reward=nope", "dry_run=true"],
                                  ["--help"]])
def test_a_forked_launch_gives_what_a_real_process_gives(args, tmp_path):
    env = {**launch_server.launch_env(), "QE_RL_SECRET_FOR_TEST": "x"}
    real = subprocess.run([sys.executable, "-m", "src.launch", *args], cwd=launch_server.REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    forked = launch_server.launch(args, env=env, cwd=launch_server.REPO)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert forked.args == [sys.executable, "-m", "src.launch", *args]


def test_what_is_read_at_import_gets_a_real_process(monkeypatch):
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(launch_server.subprocess, "run", lambda *a, **kw: calls.append(a) or real_run(*a, **kw))
    launch_server.launch(["gpus=0"], env={**launch_server.launch_env(), "PYTHONHASHSEED": "7"})
    launch_server.launch(["gpus=0"], env=launch_server.launch_env(), cwd="/")
    assert len(calls) == 2
    launch_server.launch(["gpus=0"], env={**launch_server.launch_env(), "QE_SCORER_TOKEN": "t"})  # read at call time: forked
    assert len(calls) == 2


def test_a_launch_after_this_process_imported_verl_is_still_forked():
    """Importing verl sets RAY_* and TORCH* variables in the importing process (its megatron engine
    TORCH_CUDA_ARCH_LIST). A test process whose launch server started before it imported them sent every later
    launch to a real process (a variable read at import differed from the server's), which made the fast tier
    slower and this file's test above order-dependent; the server is started again from the process's new
    environment. Run in a fresh process, so the server surely starts first. The variable is set as verl's import
    sets it (os.environ in the importing process), without the import's 5 CPU-s."""
    code = (
        "import os, subprocess, sys\n"
        "from tests import launch_server as ls\n"
        "assert ls.launch(['gpus=0'], env=ls.launch_env()).returncode == 2\n"
        "os.environ['TORCH_CUDA_ARCH_LIST'] = '8.0 9.0'  # as `import verl.workers.engine` sets it here\n"
        "calls = []\n"
        "real_run = subprocess.run\n"
        "ls.subprocess.run = lambda *a, **kw: calls.append(a) or real_run(*a, **kw)\n"
        "assert ls.launch(['gpus=0'], env=ls.launch_env()).returncode == 2\n"
        "print('real processes:', len(calls))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=launch_server.REPO, env=launch_server.launch_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "real processes: 0" in done.stdout, done.stdout + done.stderr[-3000:]


def test_a_forked_command_past_its_timeout_is_killed_and_says_so():
    with pytest.raises(subprocess.TimeoutExpired):
        launch_server.run_module("tests.fixtures.sleeper", ["60"], env=launch_server.launch_env(), timeout=2)
    # the server reaped it and serves the next launch
    assert launch_server.launch(["gpus=0"], env=launch_server.launch_env()).returncode == 2


def test_modules_are_groups_and_the_slowest_go_first():
    ids = ["tests/data/test_a.py::t1", "tests/slurm/test_sweeps.py::t", "tests/data/test_a.py::t2[x]",
           "tests/ray_actors/test_task_runner.py::t", "tests/slurm/test_dev_cluster.py::t", "tests/test_layout.py::t",
           "tests/loop/test_learn_tiny.py::t", "tests/loop/test_learn_terms.py::t",
           "tests/loop/test_smoke_on_cpu.py::t"]
    items = [SimpleNamespace(nodeid=nodeid) for nodeid in ids]
    scheduling.pytest_collection_modifyitems(None, items)
    assert [scheduling.group_of(item.nodeid) for item in items] == [
        "loop", "loop", "slurm", "slurm", "tests/loop/test_learn_terms.py", "ray_actors", "tests/data/test_a.py",
        "tests/data/test_a.py", "tests/test_layout.py"]


def test_xdist_schedules_by_group():
    from xdist.scheduler import LoadScopeScheduling

    cls = scheduling.scheduler_class()
    assert issubclass(cls, LoadScopeScheduling)
    assert cls._split_scope(None, "tests/slurm/test_time_limit.py::test_x") == "slurm"
    assert cls._split_scope(None, "tests/launcher/test_cli.py::test_y[a::b]") == "tests/launcher/test_cli.py"
    split = "tests/launcher/test_algo_presets.py::test_x[gspo]"
    assert cls._split_scope(None, split) == split  # scheduling.SPLIT: each test its own group


def test_the_time_table_sums_per_directory():
    assert durations.directory_of("tests/launcher/test_cli.py::test_x[a/b]") == "tests/launcher"
    assert durations.directory_of("tests/test_docs.py::test_y") == "tests/test_docs.py"
    lines = durations.table({"tests/a": 3.0, "tests/bb": 10.0}, {"tests/a": {"1", "2"}, "tests/bb": {"3"}})
    assert [line.split() for line in lines] == [["directory", "tests", "seconds"], ["tests/bb", "1", "10.0"],
                                                ["tests/a", "2", "3.0"], ["total", "3", "13.0"]]


# ------------------------------------------------------------------------------ the memory gate
def test_the_memory_gate_lets_in_what_fits_and_queues_the_rest_first_come_first_served(tmp_path):
    import threading
    import time

    from tests.helpers.memory_gate import MemoryGate

    gate = MemoryGate(tmp_path / "gate.json", budget=10)
    order, release_a, release_b = [], threading.Event(), threading.Event()
    holding_at_entry = {}  # read from the ledger by each holder once it is in: who else held then

    def holder(name, gb, until=None):
        with gate.hold(gb, name):
            holding_at_entry[name] = [e["what"] for e in gate.holders() if e["holding"]]
            order.append(f"{name} in")
            if until is not None:
                until.wait(timeout=30)
        order.append(f"{name} out")

    a = threading.Thread(target=holder, args=("a", 7, release_a))
    a.start()
    while "a in" not in order:
        time.sleep(0.05)
    # b does not fit beside a; c would, but comes after b and waits its turn
    b = threading.Thread(target=holder, args=("b", 6, release_b))
    b.start()
    while len(gate.holders()) < 2:
        time.sleep(0.05)
    c = threading.Thread(target=holder, args=("c", 2))
    c.start()
    time.sleep(3 * 2.0)
    assert order == ["a in"] and [e["what"] for e in gate.holders()] == ["a", "b", "c"]
    release_a.set()
    # b holds until c is in (c fits beside b): c got in after b did, whichever thread wrote its line first
    deadline = time.monotonic() + 60
    while "c out" not in order and time.monotonic() < deadline:
        time.sleep(0.05)
    release_b.set()
    for t in (a, b, c):
        t.join(timeout=60)
    # b only once a was out; c only while b held (c's own reading; b's may already show c beside it)
    assert holding_at_entry["a"] == ["a"] and "a" not in holding_at_entry["b"], holding_at_entry
    assert holding_at_entry["c"] == ["b", "c"], holding_at_entry
    assert set(order) == {"a in", "a out", "b in", "b out", "c in", "c out"}
    assert gate.holders() == []


def test_the_memory_gate_drops_a_dead_holder_and_lets_one_alone_past_the_budget(tmp_path):
    import json
    import subprocess

    from tests.helpers.memory_gate import MemoryGate

    gone = subprocess.Popen(["true"])  # a pid that no longer runs: a crashed worker's
    gone.wait()
    ledger = tmp_path / "gate.json"
    ledger.write_text(json.dumps([{"id": "x", "pid": gone.pid, "gb": 9, "what": "crashed", "holding": True}]))
    gate = MemoryGate(ledger, budget=10)
    with gate.hold(20, "alone"):  # more than the budget, but nobody else holds anything
        assert [e["what"] for e in gate.holders()] == ["alone"]
    assert gate.holders() == []


# ------------------------------------------------------------------------------ the fast tier
def test_every_entry_the_fast_tier_leaves_out_still_names_a_directory_a_module_or_a_test():
    import re
    from pathlib import Path

    from tests.tiers import HEAVY

    root = Path(__file__).resolve().parents[1]
    for entry in HEAVY:
        where, _, test = entry.partition("::")
        assert (root / where).is_dir() if where.endswith("/") else (root / where).is_file(), entry
        if test:
            assert re.search(rf"^def {re.escape(test)}\(", (root / where).read_text(), re.M), entry


def test_the_fast_tier_leaves_out_directories_modules_and_single_tests_and_keeps_the_rest(monkeypatch):
    from tests import tiers

    monkeypatch.setattr(tiers, "HEAVY", ("tests/loop/", "tests/launcher/test_smoke.py",
                                         "tests/launcher/test_cli.py::test_slow"))
    assert tiers.is_heavy("tests/loop/test_learn_tiny.py::test_x")
    assert tiers.is_heavy("tests/launcher/test_smoke.py::test_any[param]")
    assert tiers.is_heavy("tests/launcher/test_cli.py::test_slow[a-b]")
    assert not tiers.is_heavy("tests/launcher/test_cli.py::test_slower")
    assert not tiers.is_heavy("tests/launcher/test_smoke_tiny.py::test_x")
    assert not tiers.is_heavy("tests/loopy/test_x.py::test_y")


def test_the_fast_tier_does_not_import_what_it_leaves_out():
    """A directory or module of HEAVY is not collected at all (importing verl's actors for it cost seconds in every
    xdist worker), where deselecting would import it first and then say "0/5 tests collected (5 deselected)"."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    fast = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--tier", "fast", "tests/ray_actors"], cwd=root, capture_output=True, text=True, timeout=300)
    last = fast.stdout.strip().splitlines()[-1]
    assert last.startswith("no tests collected") and "deselected" not in last, fast.stdout[-2000:] + fast.stderr[-2000:]
