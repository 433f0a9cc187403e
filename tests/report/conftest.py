from __future__ import annotations

import shutil

import pytest

from .browser import Browser, chromium
from .run_builder import build_run


@pytest.fixture(scope="session")
def built_run(tmp_path_factory, tokenizer):
    """Built once with verl's writers; tests get their own copy (some add or remove files)."""
    return build_run(tmp_path_factory.mktemp("runs") / "grpo-xcomet-4gpu", tokenizer)


@pytest.fixture
def run_dir(built_run, tmp_path):
    dst = tmp_path / built_run.name
    shutil.copytree(built_run, dst)
    return dst


@pytest.fixture(scope="session")
def held_out_run(tmp_path_factory, tokenizer):
    """The same run with COMET-DA logged at validation (weight 0 in training): a held-out metric."""
    return build_run(tmp_path_factory.mktemp("runs") / "grpo-xcomet-heldout", tokenizer, held_out=True)


@pytest.fixture(scope="session")
def metricx_run(tmp_path_factory, tokenizer):
    """The held-out run with MetricX-24 logged at validation too (raw, 0-25, lower is better)."""
    return build_run(tmp_path_factory.mktemp("runs") / "grpo-xcomet-metricx", tokenizer, held_out=True,
                     metricx=True)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless chromium per test module (tests/report/browser.py)."""
    chromium()
    tmp = tmp_path_factory.mktemp("chromium")
    b = Browser(tmp / "profile", tmp / "chromium.log")
    yield b
    b.close()
