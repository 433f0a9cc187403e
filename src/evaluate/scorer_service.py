"""The QE scoring service for an evaluation: a running one (`scorer_url=` + QE_SCORER_TOKEN), or one
started here for the duration of the scoring.

Starting reuses the launcher's service lifecycle (src/node/scorer_service.py `ScorerProcess`: fresh
token, ready file, /health, SIGTERM to its process group) on a `ScorerPlan` (src/plan/scorer.py)
with the models of the launcher's composed `scorer` group (conf/scorer/default.yaml, paths through
conf/paths and conf/local/default.yaml), so evaluation finds the same checkpoints training uses.
Only the models the asked-for metrics need are loaded.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from src.config import compose_config
from src.config.schema import Placement
from src.data.safe_write import dir_mode
from src.node.preflight import visible_gpus
from src.node.scorer_service import TOKEN_ENV, ScorerProcess
from src.plan import ScorerModelSpec, ScorerPlan

from .options import EvalOptions, UsageError
from .qe_metrics import model_names


def token_from_env() -> str:
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise UsageError(f"scorer_url= needs the service's bearer token in {TOKEN_ENV}")
    return token


def scorer_device(requested: str, environ: dict) -> str:
    """`auto` -> cuda when this process sees a GPU (CUDA_VISIBLE_DEVICES, else nvidia-smi: the
    launcher's preflight count), else cpu. A GPU asked for where none is visible is refused here,
    before generation, rather than by the service after it has started."""
    gpus = visible_gpus(environ)
    if requested == "auto":
        return "cuda" if gpus else "cpu"
    if requested.startswith("cuda"):
        wanted = int(requested.partition(":")[2] or 0) + 1
        if gpus < wanted:
            raise UsageError(f"scorer_device={requested} but this process sees {gpus} GPU(s) (CUDA_VISIBLE_DEVICES="
                             f"{environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); use scorer_device=cpu (or auto), "
                             f"or give scorer_url= of a running service")
    return requested


def plan_for(opts: EvalOptions, scorer_cfg: dict, environ: dict | None = None) -> ScorerPlan:
    """The service to start, from the composed `scorer` group; UsageError when a model is unknown
    or its checkpoint is not on disk, or its device is not here (checked before generation, which
    can take an hour)."""
    device = scorer_device(opts.scorer_device, os.environ if environ is None else environ)
    models = []
    for metric, name in model_names(opts).items():
        spec = (scorer_cfg.get("models") or {}).get(name)
        if not spec:
            raise UsageError(f"{metric}: no model {name!r} in conf/scorer (has: "
                             f"{', '.join(scorer_cfg.get('models') or {})})")
        path = str(spec["path"])
        if not path.startswith("hf:") and not Path(path).exists():
            raise UsageError(f"{metric}: checkpoint of {name} not found: {path} (set paths.model_root in "
                             f"conf/local/default.yaml or QE_RL_MODELS, or give scorer_url=)")
        models.append(ScorerModelSpec(name, path if path.startswith("hf:") else os.path.abspath(path),
                                      str(spec["kind"]), spec.get("encoder"), spec.get("tokenizer")))
    python = str(scorer_cfg["python"])
    if not Path(python).exists():
        raise UsageError(f"the scorer env's python {python} does not exist (make setup, or give scorer_url=)")
    on_gpu = device != "cpu"
    # the evaluation's service has its device to itself: dedicated on a GPU
    return ScorerPlan(placement=Placement.dedicated if on_gpu else Placement.cpu, device=device, training_gpu_index=None,
                      dtype=str(scorer_cfg["dtype"]) if on_gpu else "fp32", python=python,
                      batch_tokens=int(scorer_cfg["batch_tokens"]), ready_timeout_s=float(scorer_cfg["ready_timeout_s"]),
                      restarts=int(scorer_cfg["restarts"]), models=tuple(models))


def composed_scorer_config() -> dict:
    """The launcher's composed `scorer` group (paths resolved as for training)."""
    return compose_config([])["scorer"]


@contextlib.contextmanager
def started_service(plan: ScorerPlan, log=print) -> Iterator[tuple[str, str]]:
    """(url, token) of a service started for this block; stopped (drained) at its end. Its config
    and log live in a temp dir, removed when the block ends without an error."""
    folder = Path(tempfile.mkdtemp(prefix="qe-eval-scorer-"))
    os.chmod(folder, dir_mode())  # kept (with the service's log) when scoring fails: readable as the umask says
    devices = "" if plan.device == "cpu" else None  # cpu: hide the GPUs from the service
    deaths: list[str] = []
    service = ScorerProcess(plan, folder, "eval", dict(os.environ), devices, on_fatal=deaths.append)
    ok = False
    try:
        env = service.start()
        log(f"QE scorer ready at {env['QE_SCORER_URL']} ({', '.join(m.name for m in plan.models)}); "
            f"log: {service.log_path}")
        yield env["QE_SCORER_URL"], env[TOKEN_ENV]
        ok = True
    finally:
        service.stop()
        if ok:
            shutil.rmtree(folder, ignore_errors=True)
