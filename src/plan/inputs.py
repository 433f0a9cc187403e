"""The files a run reads, each with the config key that names it: the policy model, the train and val
data and, when a QE scorer runs, each QE checkpoint with its local encoder and tokenizer dirs.

One list for every place that looks at them (issue 51, findings 4 and 15): the node's preflight and a
dry run's notes (src/node/input_files.py), a Slurm submission's check before anything is queued
(src/pipeline/precheck.py) and the snapshot's fingerprint of them (src/record/fingerprint.py). Pure:
where they are, never whether they exist.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from src.config.schema import Placement
from src.scorer.backends import BACKENDS, KINDS

from .run_plan import RunPlan
from .scorer import ScorerPlan

HF_PREFIX = "hf:"  # a QE model named by its hub id, resolved from the HF cache (src/scorer/backends/files.py)


@dataclass(frozen=True)
class Input:
    what: str                     # "model", "train data", "QE model cometkiwi_da", "encoder of QE model x"
    path: str
    role: str                     # model | data | qe | qe_part: how it is checked and what the fix says
    key: str                      # the config key that names it
    holds: tuple[str, ...] = ()   # files a dir there must hold (a QE backend's model_files)
    kind: str = ""                # a QE model's kind (conf/scorer `kind:`), which decides `holds`
    # under model.build_dir: a real launch builds it (src/pipeline/tiny_build.py), so it is never missing
    built: bool = False

    @property
    def hub_id(self) -> bool:
        """Named by a hub id (hf:Org/Name): resolved from the node's HF cache, no path to look at."""
        return self.path.startswith(HF_PREFIX)


def _under(path: str, root: str | None) -> bool:
    if not root:
        return False
    a, b = os.path.abspath(path), os.path.abspath(root)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def _local(name: str | None) -> bool:
    """An encoder/tokenizer given as a local dir (else a hub name the HF cache resolves)."""
    return bool(name) and str(name).startswith(("/", "./", "../"))


def run_inputs(plan: RunPlan, build_dir: str | None = None, scorer: bool = True) -> tuple[Input, ...]:
    """What `plan` reads. `build_dir`: model.build_dir (what a launch builds there is marked built);
    `scorer`: whether the QE service starts (debug.skip_scorer turns it off)."""
    found = (Input("model", str(plan.model_path), "model", "model.path", built=_under(plan.model_path, build_dir)),
             Input("train data", str(plan.train_files), "data", "data.train_files",
                   built=_under(plan.train_files, build_dir)),
             Input("val data", str(plan.val_files), "data", "data.val_files", built=_under(plan.val_files, build_dir)))
    return found + (scorer_inputs(plan.scorer, build_dir) if scorer else ())


def scorer_inputs(scorer: ScorerPlan | None, build_dir: str | None = None) -> tuple[Input, ...]:
    """The QE service's checkpoints, with the encoder and tokenizer dirs given as local paths (else hub
    names the HF cache resolves); none without a service."""
    found = []
    if scorer is not None and scorer.placement == Placement.external:
        return ()  # the service's checkpoints are on its own machine: it answers for them (src/node/scorer_service.py)
    for m in scorer.models if scorer is not None else ():
        key = f"scorer.models.{m.name}"
        holds = BACKENDS[KINDS[m.kind].backend].model_files if m.kind in KINDS else ()
        found.append(Input(f"QE model {m.name}", str(m.path), "qe", f"{key}.path", tuple(holds), m.kind,
                           _under(str(m.path), build_dir)))
        for part in ("encoder", "tokenizer"):
            name = getattr(m, part)
            if _local(name):
                found.append(Input(f"{part} of QE model {m.name}", str(name), "qe_part", f"{key}.{part}",
                                   built=_under(str(name), build_dir)))
    return tuple(found)
