"""When a run saves and validates, and how many steps it trains, read from its resolved verl config (and the
train file's row count, when the file exists), as verl 0.9.1's V1 trainer runs them
(verl/trainer/ppo/v1/trainer_base.py):

- `_create_dataloader`: steps per epoch = train rows // data.train_batch_size (its dataloader drops an
  incomplete batch); steps = that x trainer.total_epochs, or trainer.total_training_steps where set (`fit`'s
  loop still ends with the last epoch, so the data bounds it too). Fewer where verl drops prompts longer
  than data.max_prompt_length (data.filter_overlong_prompts), or where DAPO's dynamic sampling draws more
  than one batch of prompts per step;
- `fit`: a checkpoint every trainer.save_freq steps and at the last step (save_freq <= 0: none); validation
  before training (trainer.val_before_train), every trainer.test_freq steps and at the last step
  (test_freq <= 0: none).

Pure: the caller counts the rows (src/pipeline/precheck.py check_data_files reads the file).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from src.config.presets import ABSENT, at

# how many of the steps a save or a validation happens at the row lists before it says "..."
LISTED = 4


@dataclass(frozen=True)
class Schedule:
    epochs: int
    max_steps: Optional[int]  # trainer.total_training_steps (None: from the data)
    save_freq: int
    test_freq: int
    val_before_train: bool
    prompts_per_step: int
    dynamic_sampling: bool  # DAPO's filter_groups: a step may draw several batches of prompts
    train_rows: Optional[int] = None  # the train file's rows; None while it does not exist

    @property
    def steps(self) -> Optional[int]:
        """The steps verl will train (at most: module docstring), or None before the data exists and without
        trainer.total_training_steps."""
        if self.train_rows is None:
            return self.max_steps
        from_data = self.train_rows // self.prompts_per_step * self.epochs
        return from_data if self.max_steps is None else min(self.max_steps, from_data)


def steps_beyond_data(s: Schedule) -> Optional[str]:
    """Why trainer.total_training_steps is more than the train data gives for trainer.total_epochs, or None.
    verl's fit ends with the last epoch whatever the step count asked (`while current_epoch < total_epochs`,
    verl/trainer/ppo/v1/trainer_base.py PPOTrainer.fit): such a run stops early, exit 0, and skips what it
    does at its last step (the last save and validation), as that step never comes."""
    if s.train_rows is None or s.max_steps is None or s.prompts_per_step <= 0:
        return None
    per_epoch = s.train_rows // s.prompts_per_step
    if per_epoch <= 0 or s.max_steps <= per_epoch * s.epochs:
        return None
    epochs = -(-s.max_steps // per_epoch)
    return (f"trainer.total_training_steps={s.max_steps} is more than the train data gives: {s.train_rows} prompts // "
            f"{s.prompts_per_step} a step x {s.epochs} epoch(s) = {per_epoch * s.epochs} steps, and verl's fit ends "
            f"with the last epoch, before the last step's save and validation; set trainer.total_epochs={epochs}, or "
            f"trainer.total_training_steps={per_epoch * s.epochs}")


def _get(verl: dict, key: str) -> Any:
    value = at(verl, key)
    return None if value is ABSENT else value


def schedule_of(verl: dict, train_rows: Optional[int] = None) -> Schedule:
    """From the resolved verl config (a plain dict)."""
    return Schedule(epochs=int(_get(verl, "trainer.total_epochs") or 1),
                    max_steps=_get(verl, "trainer.total_training_steps"),
                    save_freq=int(_get(verl, "trainer.save_freq") or 0),
                    test_freq=int(_get(verl, "trainer.test_freq") or 0),
                    val_before_train=bool(_get(verl, "trainer.val_before_train")),
                    prompts_per_step=int(_get(verl, "data.train_batch_size")),
                    dynamic_sampling=bool((_get(verl, "algorithm.filter_groups") or {}).get("enable")),
                    train_rows=train_rows)


def _at_steps(freq: int, steps: Optional[int]) -> str:
    """`every 50 steps and at the last (3: 50, 100, 120)`; the list where the step count is known."""
    text = f"every {freq} steps and at the last"
    if steps is None:
        return text
    at_steps = sorted({s for s in range(freq, steps + 1, freq)} | ({steps} if steps else set()))
    shown = ", ".join(map(str, at_steps[:LISTED])) + (f", ... {at_steps[-1]}" if len(at_steps) > LISTED else "")
    return f"{text} ({len(at_steps)}: {shown})" if at_steps else text


def rows(s: Schedule) -> list[tuple[str, str, str]]:
    """The plan table's rows: training steps, checkpoint saves, validation."""
    steps = s.steps
    fewer = "; fewer if verl drops prompts over data.max_prompt_length" + (
        " or dynamic sampling draws several batches per step" if s.dynamic_sampling else "")
    if s.train_rows is None:
        value = f"at most {steps}" if steps is not None else "from the data"
        how = ("trainer.total_training_steps; the train data does not exist yet" if steps is not None else
               f"train rows // {s.prompts_per_step} prompts per step x {s.epochs} epoch(s); the train data does not "
               f"exist yet")
    else:
        value = str(steps)
        how = (f"{s.train_rows} train rows // {s.prompts_per_step} prompts per step x {s.epochs} epoch(s)"
               + (f", capped by trainer.total_training_steps={s.max_steps}" if s.max_steps is not None else "")
               + fewer)
    saves = (_at_steps(s.save_freq, steps) if s.save_freq > 0 else "none (trainer.save_freq <= 0)")
    checks = ("before training, " if s.val_before_train else "") + (
        _at_steps(s.test_freq, steps) if s.test_freq > 0 else "never during training")
    return [("training steps", value, how),
            ("checkpoint saves", saves, "trainer.save_freq (verl's fit: every N steps and the last); resume "
                                        "starts from the newest"),
            ("validation", checks, "trainer.test_freq, trainer.val_before_train")]
