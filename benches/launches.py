"""What the benches that launch the CPU loop share: learn_tiny's overrides for a short run, and a launch's own temp dirs.

Imported by benches/against_verl.py, benches/startup.py and benches/step_time.py (with the project root on sys.path).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def learn_tiny_overrides(build_dir: Path, out: Path, steps: int, test_freq: int = 1000,
                         save_freq: int = 1000) -> list[str]:
    """`experiment=learn_tiny accelerator=cpu` for `steps` steps, no validation before training and no verdict;
    with the defaults no validation or save either."""
    return ["experiment=learn_tiny", "accelerator=cpu", f"model.build_dir={build_dir}", f"paths.output_dir={out}",
            f"trainer.total_training_steps={steps}", "trainer.val_before_train=false", f"trainer.test_freq={test_freq}",
            f"trainer.save_freq={save_freq}", "learn.enable=false"]


def own_temp_env() -> dict:
    """The environment with a Ray temp dir and a TMPDIR of the launch's own, as every launch of the tests has
    (tests/loop/conftest.py): what a launch caches there is paid again, as CI pays it."""
    return dict(os.environ, RAY_TMPDIR=tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"),
                TMPDIR=tempfile.mkdtemp(prefix="qerl-tmp-", dir="/tmp"))
