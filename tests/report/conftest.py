from __future__ import annotations

import shutil

import pytest

from tests.fixtures.tiny_tokenizer import build_tiny_tokenizer

from .browser import Browser, chromium
from .run_builder import build_run


@pytest.fixture(scope="session")
def report_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    path = build_tiny_tokenizer(tmp_path_factory.mktemp("report_tokenizer"))
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


@pytest.fixture(scope="session")
def built_run(tmp_path_factory, report_tokenizer):
    """Built once with verl's writers; tests get their own copy (some add or remove files)."""
    return build_run(tmp_path_factory.mktemp("runs") / "grpo-xcomet-4gpu", report_tokenizer)


@pytest.fixture
def run_dir(built_run, tmp_path):
    dst = tmp_path / built_run.name
    shutil.copytree(built_run, dst)
    return dst


@pytest.fixture(scope="session")
def held_out_run(tmp_path_factory, report_tokenizer):
    """The same run with COMET-DA logged at validation (weight 0 in training): a held-out metric."""
    return build_run(tmp_path_factory.mktemp("runs") / "grpo-xcomet-heldout", report_tokenizer, held_out=True)


@pytest.fixture(scope="session")
def metricx_run(tmp_path_factory, report_tokenizer):
    """The held-out run with MetricX-24 logged at validation too (raw, 0-25, lower is better)."""
    return build_run(tmp_path_factory.mktemp("runs") / "grpo-xcomet-metricx", report_tokenizer, held_out=True,
                     metricx=True)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless chromium per test module (tests/report/browser.py)."""
    chromium()
    tmp = tmp_path_factory.mktemp("chromium")
    b = Browser(tmp / "profile", tmp / "chromium.log")
    yield b
    b.close()
