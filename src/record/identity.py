"""A run's identity: what it trains, as a dict, and an 8-hex id (its names are read from it: src/plan/run_names.py).

The id is a hash of verl's resolved config with the keys that only say where and how to log,
save or resume taken out (EXCLUDED below), plus the QE models the reward scores with (they live
outside verl's config). The checkpoint dir, the experiment/wandb names and the profiler paths
are among the excluded keys and are filled in from the id afterwards, so nothing is circular:
a config built with placeholder names and one built with the final names give the same id.
Not in it: the time, the host, the Hydra output dir, the order of overrides.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Optional

from src.config.dotted import flatten

# (pattern, why it does not change what is trained). A pattern is a dotted key, a subtree
# ("a.b." ends in a dot), or "*.segment." (a subtree of that name anywhere). First match wins.
EXCLUDED: list[tuple[str, str]] = [
    ("trainer.project_name", "wandb/console project label"),
    ("trainer.experiment_name", "run label: carries the id itself"),
    ("trainer.logger", "which backends receive metrics"),
    ("trainer.log_val_generations", "how many validation samples are logged"),
    ("trainer.rollout_data_dir", "where rollout samples are dumped"),
    ("trainer.validation_data_dir", "where validation samples are dumped"),
    ("trainer.save_freq", "how often checkpoints are written"),
    ("trainer.esi_redundant_time", "when the legacy trainer saves before a time limit"),
    ("trainer.resume_mode", "whether to resume, not what is trained"),
    ("trainer.resume_from_path", "where to resume from (the dir's identity guards what it holds)"),
    ("trainer.checkpoint_callback_class", "a hook run after a checkpoint is saved"),
    ("trainer.test_freq", "how often validation runs; validation does not update the policy"),
    ("trainer.val_before_train", "a validation pass before step 1; no update"),
    ("trainer.val_only", "a validation-only pass trains nothing, so it cannot change what the dir holds"),
    ("trainer.default_hdfs_dir", "a copy destination for checkpoints"),
    ("trainer.del_local_ckpt_after_load", "disk housekeeping after a resume"),
    ("trainer.default_local_dir", "the checkpoint dir: carries the id itself"),
    ("trainer.max_actor_ckpt_to_keep", "disk housekeeping"),
    ("trainer.max_critic_ckpt_to_keep", "disk housekeeping"),
    ("trainer.ray_wait_register_center_timeout", "a start-up timeout"),
    ("trainer.device", "where it runs (cuda/npu), set by the accelerator group"),
    ("global_profiler.", "profiling: what is measured, not what is trained"),
    ("*.profiler.", "per-role profiling"),
    ("*.checkpoint.", "what a checkpoint file holds and how it is written"),
    ("*.trace.", "rollout tracing to an observability backend"),
    ("*.prometheus.", "rollout metrics export"),
    ("ray_kwargs.", "Ray start-up resources and timeline file; derived from the GPU count, which is in the id"),
    ("transfer_queue.metrics.", "TransferQueue metrics export"),
    ("data.dataloader_num_workers", "loader processes: speed, not the sample order"),
    ("data.filter_overlong_prompts_workers", "worker processes for filtering: speed only"),
    ("*.dump_dir", "where skip-rollout dumps are written"),
]

# verl subtrees whose every key changes training unless EXCLUDED says otherwise. `trainer.` is
# deliberately not a subtree rule: its keys are listed one by one (TRAINER_TRAINING), so a new
# trainer key fails the classification test until someone decides.
TRAINING_SUBTREES = ("actor_rollout_ref.", "critic.", "reward.", "reward_model.", "distillation.", "data.",
                     "algorithm.", "custom_reward_function.", "sandbox_fusion.", "model_engine", "skip.",
                     "transfer_queue.")
TRAINER_TRAINING = ("trainer.balance_batch", "trainer.total_epochs", "trainer.total_training_steps",
                    "trainer.nnodes", "trainer.n_gpus_per_node", "trainer.critic_warmup", "trainer.use_v1",
                    "trainer.v1.")


def _matches(key: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        seg = pattern[1:]  # ".profiler." or ".dump_dir"
        return seg in f".{key}." if seg.endswith(".") else key.endswith(seg)
    return key.startswith(pattern) if pattern.endswith(".") else key == pattern


def classify(key: str) -> Optional[str]:
    """'excluded', 'training', or None when no rule says (the test fails on None)."""
    if any(_matches(key, p) for p, _ in EXCLUDED):
        return "excluded"
    if key.startswith(TRAINING_SUBTREES) or any(_matches(key, p) for p in TRAINER_TRAINING):
        return "training"
    return None


_flatten = flatten  # the name the launcher tests (tests/launcher/test_past_snapshots.py) read it by


def is_excluded(key: str) -> bool:
    return classify(key.lstrip("+")) == "excluded"


# Modules of this repo that verl's config names, by the path run ids were first computed with. A
# module that moves keeps its first name here, so an unchanged training config keeps its id (and a
# relaunch its checkpoint dir); the code itself is recorded by the snapshot's git.txt.
STABLE_CODE_NAMES = {
    # moved by the one-package-per-stage layout (the module was src.training_guard)
    "pkg://src.trainer.guard": "pkg://src.training_guard",
}


# Keys the project started to set after run ids existed that do not change what is trained, taken out
# before flattening, so the dict they sit in hashes as it did without them (`override_config: {}`) and
# a relaunch keeps its id (EXCLUDED cannot hold them: verl's own config does not have them).
# - the attention kernel (flash-attn or sdpa, src/plan/attention.py): the same function, another
#   implementation; a run relaunched after flash-attn is installed resumes in its own dir
ADDED_LATER = ("actor_rollout_ref.model.override_config.attn_implementation",)


def _without(tree: dict, dotted: str) -> dict:
    head, _, rest = dotted.partition(".")
    if not isinstance(tree, dict) or head not in tree:
        return tree
    if not rest:
        return {k: v for k, v in tree.items() if k != head}
    return {**tree, head: _without(tree[head], rest)}


def identity(verl_config: dict, scorer_models: dict) -> dict:
    """The training config as flat `key: value` pairs (sorted), from a resolved verl config (a plain
    dict) and the QE models the reward uses ({name: {path, kind, dtype}}). Unclassified keys are kept:
    a key nobody has judged counts as training, so it can only split runs, never merge them."""
    for key in ADDED_LATER:
        verl_config = _without(verl_config, key)
    flat = {k: STABLE_CODE_NAMES.get(v, v) if isinstance(v, str) else v
            for k, v in flatten(verl_config).items() if classify(k) != "excluded"}
    for name, spec in sorted(scorer_models.items()):
        for field, value in sorted(spec.items()):
            flat[f"qe_scorer.{name}.{field}"] = value
    return dict(sorted(flat.items()))


def run_id(ident: dict) -> str:
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def differences(recorded: dict, current: dict) -> list[str]:
    """Keys whose values differ (or exist on one side only), sorted."""
    return sorted(k for k in set(recorded) | set(current) if recorded.get(k, "<absent>") != current.get(k, "<absent>"))


IDENTITY_FILE = "run_identity.json"
SHOWN_KEYS = 5


def check_dir(checkpoint_dir: Path, ident: dict, rid: str) -> Optional[str]:
    """Why this run may not use `checkpoint_dir` (its identity file records another training
    config), or None. Only possible through a hash collision or a hand-set path."""
    path = checkpoint_dir / IDENTITY_FILE
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        old = recorded["identity"]
    except (OSError, ValueError, KeyError, TypeError):
        return (f"{path} is unreadable, so what {checkpoint_dir} holds is unknown; restore the file or move the "
                f"checkpoint dir away")
    diff = differences(old, ident)
    if not diff:
        return None
    shown = ", ".join(f"{k} ({old.get(k, '<absent>')!r} -> {ident.get(k, '<absent>')!r})" for k in diff[:SHOWN_KEYS])
    more = f" and {len(diff) - SHOWN_KEYS} more" if len(diff) > SHOWN_KEYS else ""
    return (f"{checkpoint_dir} holds run {recorded.get('run_id')} trained with another config; this run "
            f"({rid}) differs in {shown}{more}: resuming would mix two runs; use another checkpoint dir")


def earlier_dirs(prefixes: list[Path], rid: str, ident: dict) -> list[Path]:
    """This run's checkpoint dir under a naming it had before (the names changed in issue 33: the
    reward's `_off`, overrides that trained nothing, data paths; in issue 51: verl's key names became a
    researcher's words, within 80 characters): each dir `<name>-<id>` under one of
    `prefixes` whose identity file records this very training config. Only a real launch
    writes that file, so a dir found here holds this run's checkpoints and a relaunch resumes there."""
    found = []
    for prefix in prefixes:
        found += [d for d in sorted(Path(prefix).glob(f"*-{rid}"))
                  if (d / IDENTITY_FILE).is_file() and check_dir(d, ident, rid) is None]
    return found


def record(checkpoint_dir: Path, ident: dict, rid: str, reproduces: Optional[str],
           differs_from_preset: Optional[list] = None) -> None:
    """Write the identity on the first launch (atomically: a whole file or none); later launches
    keep it (check_dir has compared them already). `differs_from_preset`: what the dir's name reads, word
    by word (src/plan/run_names.py), all of it where the name had no room."""
    path = checkpoint_dir / IDENTITY_FILE
    if path.exists():
        return
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    body = {"run_id": rid, "reproduces": reproduces, "identity": ident}
    if differs_from_preset is not None:
        body["differs_from_preset"] = differs_from_preset
    fd, tmp = tempfile.mkstemp(prefix=".run_identity-", dir=checkpoint_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=1, sort_keys=True, default=str)
        # mkstemp makes the file 0600: readable as the user's umask says, like every file of the run
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
