"""Ray across a multi-node Slurm job (nodes=K, one task per node), and Ray's place on a shared node.

verl's driver needs one Ray cluster spanning the allocation. Node 0 (SLURM_PROCID 0) starts the
Ray head and, once all K nodes have joined, runs verl (trainer.nnodes=K) with RAY_ADDRESS set;
nodes 1..K-1 start Ray workers that join the head and stay until node 0 says it is done.
Everything stops at the end: each node stops the Ray processes it started (its own process
group, then anything left that names its temp dir), never `ray stop`, which would stop every
Ray on the node, another job's included.

Ports and temp dirs are unique per job and node, so two jobs sharing a node (or the K tasks of
`debug.nodes_as_tasks` on one host) never collide: each node takes a block of ports chosen from
its Slurm job id and rank, moving on to the next block while one is in use, and a temp dir
named after the job and rank. Nodes meet through files in the run dir (a shared filesystem, as
submitit itself needs): `<run dir>/ray/<job id>.<restart>/head.json` (the head's address),
`done` (node 0 finished) and `left-<rank>` (a worker stopped its Ray; the head stops last, so no
worker sees its head vanish); each node also writes the command it ran (`node-<rank>.sh`) and
its Ray log there.

A single-node job lets verl start Ray itself (verl passes ray_init.num_cpus, which cannot be
given when joining a running cluster); under Slurm it gets a per-job temp dir (RAY_TMPDIR).
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from src.slurm.task import SlurmTask, slurm_task

# Below Linux's default ephemeral range (32768-60999), so outgoing connections never take them.
PORT_LOW, PORT_HIGH = 20000, 32000
BLOCK = 400
N_BLOCKS = (PORT_HIGH - PORT_LOW) // BLOCK
# ports of one node's Ray processes, at these offsets in its block; the rest are worker ports
_FIXED = ("gcs", "client_server", "dashboard", "node_manager", "object_manager", "metrics_export",
          "dashboard_agent_grpc", "dashboard_agent_listen", "runtime_env_agent")
_WORKER_OFFSET = 16
# Ray's unix socket paths (<temp>/session_<date>_<pid>/sockets/plasma_store) must stay under 108
# characters, so the temp root is short and not under a long $TMPDIR
TEMP_ROOT = "/tmp/qe-rl-ray"
HEAD_WAIT_S = 600.0       # how long a worker waits for the head's address
JOIN_WAIT_S = 600.0       # how long the head waits for all nodes to join
LEAVE_WAIT_S = 60.0       # how long the head waits for the workers to leave before it stops
STOP_GRACE_S = 15.0


class RayBootstrapError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodePorts:
    gcs: int
    client_server: int
    dashboard: int
    node_manager: int
    object_manager: int
    metrics_export: int
    dashboard_agent_grpc: int
    dashboard_agent_listen: int
    runtime_env_agent: int
    min_worker: int
    max_worker: int

    @classmethod
    def of_block(cls, block: int) -> "NodePorts":
        base = PORT_LOW + (block % N_BLOCKS) * BLOCK
        fixed = [base + i for i in range(len(_FIXED))]
        return cls(*fixed, base + _WORKER_OFFSET, base + BLOCK - 1)

    def all(self) -> range:
        return range(self.gcs, self.max_worker + 1)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def first_block(job_id: int, rank: int) -> int:
    # consecutive job ids (e.g. the tasks of a job array) start 4 blocks apart, leaving room for
    # the ranks of debug.nodes_as_tasks on one host
    return (job_id * 4 + rank) % N_BLOCKS


def node_ports(job_id: int, rank: int, port_free: Callable[[int], bool] = _port_free) -> NodePorts:
    """This node's ports: the job's own block, or the next one whose ports are all free."""
    start = first_block(job_id, rank)
    for step in range(N_BLOCKS):
        ports = NodePorts.of_block(start + step)
        probe = list(astuple(ports)[:len(_FIXED)]) + [ports.min_worker, ports.max_worker]
        if all(port_free(p) for p in probe):
            return ports
    raise RayBootstrapError(f"no free block of {BLOCK} ports in {PORT_LOW}-{PORT_HIGH} on {socket.gethostname()}")


def temp_dir(job_id: int, rank: int) -> str:
    return f"{TEMP_ROOT}/{job_id}-{rank}"


def rendezvous_dir(run_dir: Path, task: SlurmTask) -> Path:
    # per attempt: a requeued job must not read the head address of its previous attempt
    return Path(run_dir) / "ray" / f"{task.job_id}.{task.restart}"


def node_ip() -> str:
    """This node's address as other nodes reach it (Ray maps loopback to this anyway)."""
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(socket.gethostname())
        if not ip.startswith("127."):
            return ip
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # UDP: picks the outgoing interface, sends nothing
        return s.getsockname()[0]
    return "127.0.0.1"


def ray_start_command(ray_bin: str, ports: NodePorts, tmp: str, ip: str, num_cpus: int, num_gpus: int,
                      head_address: Optional[str]) -> list[str]:
    """`ray start --block` for a head (head_address None) or a worker joining head_address."""
    role = (["--head", f"--port={ports.gcs}", f"--ray-client-server-port={ports.client_server}",
             f"--dashboard-port={ports.dashboard}", "--include-dashboard=false"]
            if head_address is None else [f"--address={head_address}"])
    return [ray_bin, "start", *role, "--block", "--disable-usage-stats",
            f"--node-ip-address={ip}", f"--temp-dir={tmp}", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
            f"--node-manager-port={ports.node_manager}", f"--object-manager-port={ports.object_manager}",
            f"--metrics-export-port={ports.metrics_export}",
            f"--dashboard-agent-grpc-port={ports.dashboard_agent_grpc}",
            f"--dashboard-agent-listen-port={ports.dashboard_agent_listen}",
            f"--runtime-env-agent-port={ports.runtime_env_agent}",
            f"--min-worker-port={ports.min_worker}", f"--max-worker-port={ports.max_worker}"]


def single_node_env(environ: dict) -> dict:
    """Env for a single-node verl run: under Slurm, a Ray temp dir of its own per job."""
    task = slurm_task(environ)
    if task is None:
        return {}
    return {"RAY_TMPDIR": temp_dir(task.job_id, task.rank), "RAY_USAGE_STATS_ENABLED": "0"}


# ---------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------
def _ray_env(env: dict) -> dict:
    # no usage-stats upload from compute nodes; on SIGTERM `ray start` would first wait to drain
    # the node for Ray Serve (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S); nothing here needs that
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def _auth_env(folder: Path, create: bool) -> dict:
    """Ray 2.60 turns token authentication on by default (ray/_private/authentication/
    authentication_token_setup.py, enable_token_auth_by_default) and each `ray start` looks for a token
    in ~/.ray/auth_token, which node-local homes do not share and which a head may write after a worker
    looked. So the job brings its own: one random token per attempt beside head.json (the run dir every
    node already shares), read by Ray from RAY_AUTH_TOKEN_PATH; it never reaches a command line or log."""
    path = folder / "ray_auth_token"
    if create:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_hex(32))
        os.replace(tmp, path)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def _ray_bin(python: Optional[str] = None) -> str:
    """The `ray` CLI of the env that trains: a raylet starts its worker processes with the python that ran
    `ray start`, so verl's workers and vLLM run in that env (accelerator=cpu: .venv-loop, with vLLM's CPU
    build and the CPU platform; the launcher's .venv has neither)."""
    return str(Path(python or sys.executable).with_name("ray"))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _start(command: list[str], env: dict, folder: Path, rank: int) -> subprocess.Popen:
    """Start `ray start --block` in its own process group; write the generated bootstrap line."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"node-{rank}.sh").write_text(
        "#!/bin/bash\n# generated by src/node/ray_cluster.py: how this node joined the job's Ray cluster\n"
        + shlex.join(command) + "\n", encoding="utf-8")
    log = open(folder / f"node-{rank}.log", "ab")
    try:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def _pids_naming(path: str) -> list[int]:
    """Processes whose command line names `path` or something under it (not a longer sibling)."""
    needles = (path.encode() + b"/", path.encode() + b"\x00")
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if any(n in cmdline for n in needles):
                    pids.append(int(entry.name))
    return pids


def stop(proc: subprocess.Popen, tmp: str, grace_s: float = STOP_GRACE_S) -> None:
    """Stop what this node's `ray start` started. SIGTERM to `ray start` alone: its handler stops
    the processes it started (no drain wait, see _ray_env); then SIGKILL whatever is left in its
    process group, and any process left that names this node's own temp dir."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(proc.pid):
            break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    for pid in _pids_naming(tmp):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    return True
    return False


def _wait_port(ip: str, port: int, proc: subprocess.Popen, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RayBootstrapError(f"ray head exited with code {proc.returncode} before it listened on "
                                    f"{ip}:{port}; see {log}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            if s.connect_ex((ip, port)) == 0:
                return
        time.sleep(0.3)
    raise RayBootstrapError(f"ray head did not listen on {ip}:{port} after {timeout_s:.0f}s; see {log}")


def wait_for_nodes(address: str, nodes: int, timeout_s: float, env: dict,
                   abort: Callable[[], Optional[str]] = lambda: None) -> None:
    """Block until `nodes` Ray nodes are alive in the cluster at `address` (in a subprocess, so the
    launcher never becomes a Ray driver itself), or until `abort()` names a reason to give up."""
    code = ("import sys,time,ray\n"
            "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
            "want, end = int(sys.argv[2]), time.monotonic() + float(sys.argv[3])\n"
            "while True:\n"
            "    alive = sum(1 for n in ray.nodes() if n['Alive'])\n"
            "    if alive >= want: print(alive); sys.exit(0)\n"
            "    if time.monotonic() > end: print(alive); sys.exit(3)\n"
            "    time.sleep(1)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, address, str(nodes), str(timeout_s)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s + 120
    while proc.poll() is None:
        reason = abort()
        if reason or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RayBootstrapError(reason or f"could not count the Ray nodes at {address} within {timeout_s:.0f}s")
        time.sleep(0.5)
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = (err.strip().splitlines() or [""])[-1]
        seen = out.strip().splitlines()[-1:]
        if not seen:   # the counter never connected: Ray's own reason is the message
            raise RayBootstrapError(f"could not connect to the Ray cluster at {address}: {tail}")
        raise RayBootstrapError(f"only {seen[0]} of {nodes} nodes joined the Ray cluster at {address} "
                                f"within {timeout_s:.0f}s {tail}".rstrip())


def worker_failed(run_dir: Path, task: SlurmTask, message: str) -> None:
    """A node 1..K-1 could not join (e.g. its preflight failed): tell node 0, which stops waiting."""
    folder = rendezvous_dir(run_dir, task)
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / f"failed-{task.rank}", message + "\n")


def _failed_workers(folder: Path) -> Optional[str]:
    failed = sorted(folder.glob("failed-*"))
    if not failed:
        return None
    reasons = []
    for f in failed:
        prefix, message = f"node {f.name.split('-', 1)[1]}: ", f.read_text().strip()
        reasons.append(message if message.startswith(prefix) else prefix + message)
    return "; ".join(reasons)


def release_workers(run_dir: Path, task: SlurmTask) -> None:
    """Tell nodes 1..K-1 that node 0 is done (also when it failed before its Ray head started)."""
    folder = rendezvous_dir(run_dir, task)
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / "done", "done\n")


@contextlib.contextmanager
def head(task: SlurmTask, nodes: int, num_cpus: int, num_gpus: int, run_dir: Path, env: dict,
         join_wait_s: float = JOIN_WAIT_S, python: Optional[str] = None) -> Iterator[dict]:
    """Node 0: start the Ray head, publish its address, wait until all `nodes` joined; yields the
    env for verl (RAY_ADDRESS). On exit: tell the workers, stop this node's Ray. `python`: the training
    env's (plan.trainer_python; None: this process's)."""
    folder = rendezvous_dir(run_dir, task)
    ports, tmp, ip = node_ports(task.job_id, task.rank), temp_dir(task.job_id, task.rank), node_ip()
    address = f"{ip}:{ports.gcs}"
    auth = _auth_env(folder, create=True)   # before head.json: a worker that sees the address finds it
    env = {**_ray_env(env), **auth}
    proc = _start(ray_start_command(_ray_bin(python), ports, tmp, ip, num_cpus, num_gpus, None), env, folder,
                  task.rank)
    try:
        _wait_port(ip, ports.gcs, proc, 120, folder / f"node-{task.rank}.log")
        _write_atomic(folder / "head.json", json.dumps({"address": address, "job_id": task.job_id,
                                                        "restart": task.restart, "ports": ports.__dict__}))
        print(f"ray head at {address} (temp dir {tmp}); waiting for {nodes} nodes", flush=True)
        wait_for_nodes(address, nodes, join_wait_s, env, abort=lambda: _failed_workers(folder))
        print(f"ray cluster up: {nodes} nodes at {address}", flush=True)
        yield {"RAY_ADDRESS": address, "RAY_USAGE_STATS_ENABLED": "0", **auth}
    finally:
        release_workers(run_dir, task)
        deadline = time.monotonic() + LEAVE_WAIT_S
        while (time.monotonic() < deadline and proc.poll() is None
               and not all((folder / f"left-{rank}").exists() for rank in range(1, nodes))):
            time.sleep(0.3)
        stop(proc, tmp)
        Path(auth["RAY_AUTH_TOKEN_PATH"]).unlink(missing_ok=True)


def run_worker(task: SlurmTask, num_cpus: int, num_gpus: int, run_dir: Path, env: dict,
               head_wait_s: float = HEAD_WAIT_S, abort: Callable[[], Optional[str]] = lambda: None,
               python: Optional[str] = None) -> int:
    """Nodes 1..K-1: join the head once it has published its address; leave when it is done, or
    when `abort()` names a reason (this node's QE scorer died for good). `python`: as for `head`."""
    folder = rendezvous_dir(run_dir, task)
    head_file, done = folder / "head.json", folder / "done"
    deadline = time.monotonic() + head_wait_s
    while not head_file.exists():
        if done.exists():
            print(f"node {task.rank}: node 0 ended before it started the Ray head; nothing to join", flush=True)
            return 0
        if time.monotonic() > deadline:
            raise RayBootstrapError(f"node {task.rank}: the Ray head (node 0) published no address in {head_file} "
                                    f"within {head_wait_s:.0f}s; see node 0's log")
        time.sleep(0.5)
    address = json.loads(head_file.read_text(encoding="utf-8"))["address"]
    ports, tmp = node_ports(task.job_id, task.rank), temp_dir(task.job_id, task.rank)
    env = {**_ray_env(env), **_auth_env(folder, create=False)}
    proc = _start(ray_start_command(_ray_bin(python), ports, tmp, node_ip(), num_cpus, num_gpus, address), env,
                  folder, task.rank)
    print(f"ray worker node {task.rank} joining {address} (temp dir {tmp})", flush=True)
    try:
        while not done.exists():
            reason = abort()
            if reason:
                raise RayBootstrapError(f"node {task.rank}: {reason}")
            if proc.poll() is not None:
                raise RayBootstrapError(f"node {task.rank}: ray worker exited with code {proc.returncode} "
                                        f"while the job ran; see {folder / f'node-{task.rank}.log'}")
            time.sleep(0.5)
        return 0
    finally:
        stop(proc, tmp)
        _write_atomic(folder / f"left-{task.rank}", "left\n")
