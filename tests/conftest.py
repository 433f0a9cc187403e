"""Shared by both test environments (train and scorer): stdlib only at import (a fixture imports
what it needs when it runs).

Tests never reach the network: any connect to a non-loopback address raises. Models and data
used by tests are built locally by fixtures: the tiny tokenizer, and for the train-env tests the
QE service on the tiny COMET and MetricX checkpoints (tests/helpers/scorer_service.py), each built
or started once per session (per xdist worker).
"""
import ipaddress
import os
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

# how the suite is split across xdist workers, and the per-directory time table of every CI log
pytest_plugins = ("tests.scheduling", "tests.durations", "tests.tiers")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
# verl's composition and verdict cache (src/verl_config/cache.py): a fresh one per test session, so no
# verdict from a user's ~/.cache (or an earlier code version) decides a test; within the session a
# config verl passed once is reused, as on a user's second launch. Set here in the xdist controller
# before its workers start, so they inherit it and share one cache (entries are written atomically)
os.environ.setdefault("QE_RL_CACHE_DIR", tempfile.mkdtemp(prefix="qe_rl_test_cache-"))
# an xdist worker has COLUMNS=80 and LINES=24 in its environment, which every launch of a test would inherit:
# the plan table takes the terminal's width from COLUMNS (src/plan/table.py width), and a test's launch has
# no terminal (its output is read, as from a log file): the width a log gets. A test that means a width sets it
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# Ctrl-C as a terminal delivers it. A shell without job control starts a background job with SIGINT ignored
# (POSIX), Python then keeps it ignored, and an ignored signal stays ignored across exec: every process the
# tests start would shrug off the SIGINT that the interrupt tests send (tests/lifecycle/test_interrupts.py
# fails with exit 0 instead of 130). A handler here, in the controller and in each xdist worker, is reset to
# the default in every child at exec, as in a user's terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded(real):
    def connect(self, address, *args, **kwargs):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
            raise RuntimeError(f"test tried to reach the network: {address!r}")
        return real(self, address, *args, **kwargs)
    return connect


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    socket.socket.connect = _guarded(_real_connect)
    socket.socket.connect_ex = _guarded(_real_connect_ex)
    yield
    socket.socket.connect = _real_connect
    socket.socket.connect_ex = _real_connect_ex


@pytest.fixture(scope="session")
def memory_gate(tmp_path_factory):
    """The suite's memory budget for real training launches, shared by every xdist worker of this run
    (tests/helpers/memory_gate.py): `with memory_gate.hold(gb, what):`."""
    from tests.helpers.memory_gate import MemoryGate, ledger_for

    return MemoryGate(ledger_for(tmp_path_factory))


@pytest.fixture(scope="session")
def taught_build(tmp_path_factory) -> Path:
    """experiment=learn_tiny's model.build_dir (the tiny policy, the synthetic task's prompts, the taught policy),
    one for every xdist worker of the run: built by the first worker to ask, through the launcher's own
    src/pipeline/tiny_build.py, which lets one launch build a dir at a time while the others wait and then reuse
    it (the loop's launches, the real-loop Slurm jobs, experiment=smoke_tiny's build checks). A launch adds
    what its run needs and the build lacks (the tiny QE checkpoints of a QE reward) the same way."""
    from src.config import compose_config
    from src.pipeline import tiny_build
    from src.plan import build_plan
    from tests.helpers.run_temp import run_temp_dir

    build = run_temp_dir(tmp_path_factory) / "tiny-build"
    own = tmp_path_factory.mktemp("tiny-build-plan")
    composed = compose_config(["experiment=learn_tiny", "accelerator=cpu", f"model.build_dir={build}",
                               f"paths.output_dir={own}/out"])
    tiny_build.prepare(build_plan(composed, run_dir=str(own / "run"), flash_attn=None), composed)
    return build


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory):
    """The tests' small Qwen-style tokenizer, saved (src/tiny_models/tokenizer.py)."""
    from src.tiny_models.tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer(tmp_path_factory.mktemp("tiny_tokenizer"))


@pytest.fixture(scope="session")
def tokenizer(tiny_tokenizer_dir):
    """That tokenizer loaded as verl loads a policy's: one per session, never changed by a test."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), local_files_only=True)


@pytest.fixture(scope="session")
def policy_tokenizer(tmp_path_factory):
    """The same tokenizer as the tiny policy has it: padded with reserved special tokens to the model's
    vocabulary (conf/model/tiny_qwen2.yaml vocab_size 640), which a policy sampling at temperature 1 emits."""
    from transformers import AutoTokenizer

    from src.tiny_models.tokenizer import build_tiny_tokenizer

    path = build_tiny_tokenizer(tmp_path_factory.mktemp("policy_tokenizer"), vocab_size=640)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


@pytest.fixture(scope="session")
def tiny_comet_dir():
    """The tiny COMET and MetricX checkpoints, built (or found cached) by the scorer env."""
    from tests.helpers.scorer_service import REPO, SCORER_PYTHON

    if not SCORER_PYTHON.exists():
        pytest.fail(f"{SCORER_PYTHON} is missing: run `make setup` (the scorer env runs the QE service)")
    out = subprocess.run([str(SCORER_PYTHON), "tests/fixtures/build_tiny_comet.py"], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        pytest.fail(f"building the tiny COMET models failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def scorer_service(tiny_comet_dir, tmp_path_factory):
    """The QE service on the tiny COMET models (cometkiwi_da, comet_da, xcomet_xl), for the session."""
    from tests.helpers.scorer_service import start_service, stop_service, write_tiny_config

    d = tmp_path_factory.mktemp("scorer")
    svc = start_service(write_tiny_config(d / "scorer.yaml", tiny_comet_dir), d / "ready.json")
    yield svc
    stop_service(svc, timeout=30)


@pytest.fixture(scope="session")
def metricx_service(tiny_comet_dir, tmp_path_factory):
    """The QE service on the tiny CometKiwi (cometkiwi_da) and the tiny MetricX-24 (metricx24_xl)."""
    from tests.helpers.scorer_service import start_service, stop_service, write_tiny_config

    d = tmp_path_factory.mktemp("metricx-scorer")
    svc = start_service(write_tiny_config(d / "scorer.yaml", tiny_comet_dir, metricx=True), d / "ready.json")
    yield svc
    stop_service(svc, timeout=30)
