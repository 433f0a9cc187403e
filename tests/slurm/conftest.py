"""Fixtures for tests that run on the real single-node Slurm dev cluster (slurm/dev-cluster/).

`slurm_cluster` (session scope) runs slurm/dev-cluster/start.sh, which is idempotent: on a healthy cluster
it returns in about a second, on a fresh machine it installs Debian's Slurm, munge and MariaDB first
(needs root and apt; CI has both). If the cluster cannot be brought up the tests FAIL, they never skip:
a skipped Slurm suite would hide a broken Slurm path.

Knobs are read from the environment exactly as start.sh reads them (FAKE_GPUS, FAKE_CPUS, FAKE_MEM_GB,
PARTITION, ACCOUNTING, SLURM_BASE); what the fixture yields is read back from Slurm itself, not from
the knobs, so tests see what the scheduler really offers.

Functions that run inside Slurm jobs are pickled by submitit (cloudpickle) and unpickled by the venv's
python on the "node". A function defined in a test module would be pickled by reference to a module
name that pytest made up (its rootdir/import-mode rules) and that the job cannot import. Call
`pickle_by_value(module)` (or use the `submitit_executor` fixture, which does it for the requesting
test module) so those functions travel by value.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import pytest

from tests.helpers.memory_gate import CPU_LOOP_GB, TWO_NODE_LOOP_GB, said_wait
from tests.helpers.slurm_sweeps import Sweep

REPO = Path(__file__).resolve().parents[2]
START_SH = REPO / "slurm" / "dev-cluster" / "start.sh"
# A cold start installs ~30 Debian packages; on a slow mirror that is minutes, never tens of minutes.
START_TIMEOUT_S = int(os.environ.get("SLURM_DEV_START_TIMEOUT_S", "900"))
# Bound on every wait for a job in these tests. Turnaround on the dev cluster is a few seconds; a job
# that dies without a result costs submitit ~15 s more (it waits for the result pickle on a slow FS).
JOB_TIMEOUT_S = float(os.environ.get("SLURM_DEV_JOB_TIMEOUT_S", "120"))


@dataclasses.dataclass(frozen=True)
class SlurmClusterInfo:
    partition: str
    node: str
    gpus: int
    cpus: int
    mem_mb: int
    accounting: bool
    start_log: str


def _run(cmd: list[str], timeout: float = 30) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout).stdout


def _read_cluster_info(start_log: str) -> SlurmClusterInfo:
    # %P marks the default partition with '*'; the dev cluster has one partition and one node.
    rows = [line.split("|") for line in _run(["sinfo", "-h", "-N", "-o", "%P|%N"]).split()]
    if not rows:
        pytest.fail(f"sinfo shows no node after start.sh:\n{start_log}")
    partition, node = rows[0][0].rstrip("*"), rows[0][1]
    show = _run(["scontrol", "show", "node", node])
    gres = re.search(r"\bGres=(\S+)", show)
    gpu = re.search(r"gpu:(?:[^:,(]+:)?(\d+)", gres.group(1)) if gres else None
    cpus = int(re.search(r"\bCPUTot=(\d+)", show).group(1))
    mem_mb = int(re.search(r"\bRealMemory=(\d+)", show).group(1))
    storage = _run(["scontrol", "show", "config"])
    accounting = "accounting_storage/slurmdbd" in storage
    return SlurmClusterInfo(partition, node, int(gpu.group(1)) if gpu else 0, cpus, mem_mb, accounting, start_log)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmClusterInfo]:
    """Make sure the dev cluster is up (start.sh is idempotent) and yield what it offers."""
    if os.geteuid() != 0:
        pytest.fail(
            "the Slurm dev cluster needs root (apt-get, /etc/slurm, mknod, daemons); run the Slurm tests as "
            f"root, or start it once with `sudo bash {START_SH.relative_to(REPO)}` and run them as root"
        )
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        pytest.fail("Slurm is not installed and there is no apt-get to install it (start.sh needs Debian)")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            ["bash", str(START_SH)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"slurm/dev-cluster/start.sh did not finish in {START_TIMEOUT_S}s:\n{e.stdout}\n{e.stderr}")
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"slurm/dev-cluster/start.sh failed (exit {proc.returncode}):\n{out[-6000:]}")
    info = _read_cluster_info(out)
    sys.stderr.write(f"\n[slurm_cluster] up in {time.monotonic() - t0:.1f}s: {info.partition=} {info.node=} "
                     f"{info.gpus=} {info.cpus=} {info.accounting=}\n")
    yield info


def pickle_by_value(module: ModuleType) -> None:
    """Make cloudpickle (which submitit uses) ship `module`'s functions by value, see module docstring."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)


@pytest.fixture
def submitit_executor(slurm_cluster: SlurmClusterInfo, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Factory: `submitit_executor(**params)` -> a slurm AutoExecutor on the dev cluster's partition.

    Each executor gets its own folder under tmp_path: job ids restart when a state dir is recreated and
    submitit reads `<folder>/<jobid>_result.pkl`, so a shared folder could hand a test a stale result.
    cluster="slurm" (not auto-detection) so a missing Slurm is an error, never a silent local run.
    """
    import submitit

    pickle_by_value(request.module)
    count = 0

    def make(**params: Any) -> Any:
        nonlocal count
        count += 1
        ex = submitit.AutoExecutor(folder=tmp_path / f"submitit{count}" / "%j", cluster="slurm")
        params.setdefault("slurm_partition", slurm_cluster.partition)
        params.setdefault("timeout_min", 10)
        ex.update_parameters(**params)
        return ex

    return make


def slurm_job_details(job_id: str) -> str:
    """What Slurm says about a job, for failure messages."""
    parts = []
    for cmd in (["scontrol", "show", "job", job_id], ["sacct", "-j", job_id, "-P", "-o", "JobID,State,ExitCode,Reason"]):
        try:
            parts.append(subprocess.run(cmd, capture_output=True, text=True, timeout=15).stdout)
        except Exception as e:  # noqa: BLE001 - diagnostics only
            parts.append(f"{cmd}: {e}")
    return "\n".join(parts)


def wait_done(job: Any, timeout_s: float = JOB_TIMEOUT_S) -> float:
    """Wait like submitit's job.wait() does (job.done() once a second, which polls sacct on submitit's own
    back-off) but give up after timeout_s: cancel the job and fail with what Slurm knows.
    Returns the seconds waited."""
    t0 = time.monotonic()
    while not job.done():
        if time.monotonic() - t0 > timeout_s:
            details = slurm_job_details(str(job.job_id))
            subprocess.run(["scancel", str(job.job_id)], timeout=15)
            pytest.fail(f"job {job.job_id} not done after {timeout_s:.0f}s (cancelled it):\n{details}")
        time.sleep(0.2)
    return time.monotonic() - t0


@pytest.fixture
def wait_job() -> Callable[..., float]:
    """`wait_job(job, timeout_s=...)`: bounded job.wait(), see wait_done."""
    return wait_done


@pytest.fixture
def job_details() -> Callable[[str], str]:
    """`job_details(job_id)`: scontrol/sacct text for failure messages."""
    return slurm_job_details


@pytest.fixture
def one_loop_of_memory(memory_gate, request):
    """The test's jobs train one CPU loop at a time: it holds one loop's share of the suite's memory budget
    (tests/helpers/memory_gate.py) for as long as it runs."""
    with memory_gate.hold(CPU_LOOP_GB, request.node.nodeid, on_wait=said_wait):
        yield


@pytest.fixture
def two_nodes_of_memory(memory_gate, request):
    """The test's job is two Ray nodes on this host, each with verl's worker and a vLLM engine."""
    with memory_gate.hold(TWO_NODE_LOOP_GB, request.node.nodeid, on_wait=said_wait):
        yield


@pytest.fixture
def sweep(slurm_cluster, tmp_path):
    """A sweep of this test on the dev cluster (tests/helpers/slurm_sweeps.py), its jobs cancelled at the end."""
    s = Sweep(tmp_path, slurm_cluster.partition)
    yield s
    s.cleanup()
