"""`hydra/launcher=slurm`: hydra-submitit-launcher's SlurmLauncher with what this repo needs.

A thin shell: the work is in src/slurm/sweep.py (submission, code snapshot, per-plan resources,
failure report, and the job-side composition from the code snapshot). Imported by Hydra's plugin
scan on every start, so it imports nothing heavy at module level.
"""
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher


class QeRlSlurmLauncher(SlurmLauncher):
    # set at submission: the copy of the code the jobs run from (pickled with the launcher)
    code_dir: Optional[str] = None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from src.slurm import sweep as slurm_sweep

        return slurm_sweep.launch(self, job_overrides, initial_job_idx)

    def __call__(self, sweep_overrides: List[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: Dict[type, Singleton]) -> Any:
        from src.slurm import sweep as slurm_sweep

        return slurm_sweep.run_job(self, sweep_overrides, job_dir_key, job_num, singleton_state)
