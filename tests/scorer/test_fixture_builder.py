"""The tiny-checkpoint builder's cache: one build per builder version, never a half-built tree."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.fixtures import build_tiny_comet as builder
from tests.helpers.scorer_service import REPO


def test_cache_dir_is_keyed_by_the_builder_source(tiny_dir):
    assert tiny_dir == builder.default_out().resolve()
    assert tiny_dir.parent == REPO / ".cache" / "tiny-comet"
    assert tiny_dir.name == builder.builder_hash()
    for name in builder.BASE_MODELS:
        assert builder.checkpoint(tiny_dir, name).is_file()


def test_failed_build_leaves_nothing(tmp_path):
    final = tmp_path / "tree"

    def build(tmp):
        (tmp / "half.txt").write_text("x")
        raise RuntimeError("died half way")

    with pytest.raises(RuntimeError):
        builder._atomic_build(final, build)
    assert not final.exists() and list(tmp_path.iterdir()) == []


def test_killed_build_leaves_no_tree_and_its_temp_is_cleaned_later(tmp_path):
    final = tmp_path / "tree"
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]);"
            "from tests.fixtures import build_tiny_comet as b; from pathlib import Path;"
            "b._atomic_build(Path(sys.argv[2]), lambda t: ((t / 'part').write_text('x'), time.sleep(60)))")
    p = subprocess.Popen([sys.executable, "-c", code, str(REPO), str(final)])
    deadline = time.time() + 20
    while not list(tmp_path.glob(".building-*/part")):
        assert time.time() < deadline and p.poll() is None
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not final.exists() and len(list(tmp_path.glob(".building-*"))) == 1
    builder._atomic_build(final, lambda t: (t / "done").write_text("ok"))
    assert (final / "done").read_text() == "ok"
    assert list(tmp_path.glob(".building-*")) == []  # the dead build's temp dir is gone


def test_existing_tree_is_not_rebuilt(tmp_path):
    final = tmp_path / "tree"
    final.mkdir()
    builder._atomic_build(final, lambda t: pytest.fail("rebuilt an existing tree"))
