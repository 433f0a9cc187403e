"""`python -m src.launch ARGS` (and the project's other `python -m src.X` commands) for tests, forked from
a process that has already imported the launcher.

Why: a launch on a 2-core machine spends 4-8 s importing verl, torch, tensordict, transformers and
Hydra before it plans anything, and the suite launches a few hundred times. The server imports
them once per test process (each xdist worker has its own server); each launch is then a fork of it
that becomes `python -m src.launch ARGS`: its own process, environment, working directory, argv,
stdin (/dev/null), stdout and stderr (captured, as subprocess.run(capture_output=True) does), the
launcher module run as `__main__` by runpy exactly as `python -m` runs it, and on the way out what
an interpreter does at exit (non-daemon threads joined, atexit handlers, streams flushed). The
server itself never runs a launch, so every launch starts from the same state.

What it is not: a fresh interpreter. A launch whose environment changes what is read at import time
(PYTHON* variables: PYTHONPATH, ...) or that runs from another directory than this checkout gets a
real `python -m src.launch` subprocess instead (`launch` decides); tests that signal the launcher or
need its process group start it with subprocess.Popen themselves.

    launch(args, env=..., cwd=..., timeout=...) -> subprocess.CompletedProcess
    run_module("src.report", args, env=..., ...)   the same for another of the project's commands
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what a launch imports on its way to verl's verdict (src/verl_config/ppo_trainer.py _run_verl_validation);
# not src.launch itself, which runpy runs as __main__ (a copy imported before would be a second module)
PRELOAD = ("src.config", "src.pipeline", "src.pipeline.run", "hydra", "verl", "verl.utils.config", "verl.trainer.ppo.utils",
           "verl.workers.config")
READY = "launch server ready"


# ---------------------------------------------------------------------------------------------- client
class _Server:
    def __init__(self, env: dict):
        self.env = env
        self.log = tempfile.NamedTemporaryFile(prefix="launch-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.launch_server"], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     bufsize=1)
        line = self.proc.stdout.readline().strip()
        if line != READY:
            raise RuntimeError(f"the launch server did not start ({line!r}); log: {self.log.name}: "
                               f"{Path(self.log.name).read_text(errors='replace')[-3000:]}")
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        # a server that ended cleanly and said nothing leaves no file in /tmp (a second stop finds it gone)
        with contextlib.suppress(OSError):
            if self.proc.returncode == 0 and os.path.getsize(self.log.name) == 0:
                os.unlink(self.log.name)

    def run(self, module: str, argv: list[str], env: dict, cwd: str, timeout: float) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", module, *argv]
        with self.lock, tempfile.TemporaryDirectory(prefix="launch-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"module": module, "argv": argv, "env": env, "cwd": cwd, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = json.loads(self.proc.stdout.readline())["pid"]
            deadline = time.monotonic() + timeout
            while not select.select([self.proc.stdout], [], [], max(0.0, min(1.0, deadline - time.monotonic())))[0]:
                if time.monotonic() >= deadline:
                    # as subprocess.run does: kill the launch, then say it timed out
                    os.kill(pid, 9)
                    self.proc.stdout.readline()  # its exit, which the server reports after reaping it
                    raise subprocess.TimeoutExpired(args, timeout,
                                                    out.read_text(errors="replace"), err.read_text(errors="replace"))
            done = json.loads(self.proc.stdout.readline())
            assert done["pid"] == pid, (done, pid)
            return subprocess.CompletedProcess(args, done["returncode"],
                                               out.read_text(errors="replace"), err.read_text(errors="replace"))


_server: _Server | None = None
# variables that the preloaded modules (Python itself, torch, transformers, verl, Hydra) read at import
# time: a launch that sets one of them differently from the server's own environment gets a real process
READ_AT_IMPORT = ("PYTHON", "TORCH", "OMP_", "MKL_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "VERL_", "HYDRA_",
                  "RAY_", "CUDA_HOME", "LD_")
# ...but for these, which are read where they are used, not at import: the Hub token (huggingface_hub/utils/_auth.py
# _get_token_from_environment reads os.environ on each call), which the secret-redaction tests set for every launch
READ_WHEN_USED = ("HF_TOKEN",)


def launch_env() -> dict:
    """This process's environment as a launch gets it: no GPUs and no Slurm job of whatever allocation
    pytest runs in (a test adds its own)."""
    return {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES" and not k.startswith("SLURM_")}


def launch(argv: list[str], env: dict, cwd: str | Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m src.launch *argv` with exactly `env` in `cwd`, as subprocess.run(capture_output=True, text=True)."""
    return run_module("src.launch", argv, env, cwd, timeout)


def run_module(module: str, argv: list[str], env: dict, cwd: str | Path = REPO,
               timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m MODULE *argv` (one of this project's, under src/ or tests/), as `launch` runs the launcher."""
    global _server
    assert module.startswith(("src.", "tests.")), module
    here = launch_env()
    if _server is None or not _server.alive() or _read_at_import(_server.env) != _read_at_import(here):
        # this process's own environment moved since its server started: an import here set some (verl sets RAY_*
        # and TORCH* variables, its megatron engine TORCH_CUDA_ARCH_LIST), or a test did. A server started again
        # from it imports as a launch given that environment would; the old one would send every launch to a
        # real process
        if _server is not None:
            _server.stop()
        _server = _Server(here)
    if Path(cwd).resolve() != REPO or _read_at_import(env) != _read_at_import(_server.env):
        return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)
    return _server.run(module, list(argv), dict(env), str(cwd), timeout)


def _read_at_import(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_IMPORT) and k not in READ_WHEN_USED}


@atexit.register
def _stop_server() -> None:
    if _server is not None:
        _server.stop()


# ---------------------------------------------------------------------------------------------- server
def _exit_code(exc: SystemExit) -> int:
    """As the interpreter turns SystemExit into an exit status."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _become_launch(request: dict) -> None:
    """In the forked child: be `python -m MODULE ARGV`, then exit as the interpreter would."""
    import runpy
    import traceback

    code = 0
    try:
        os.setpgid(0, 0)  # its own process group, so a kill on timeout or a killpg reaches only it
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.argv = ["-m", *request["argv"]]  # runpy puts the module's path first, as `python -m` does
        # a fresh interpreter has not imported the module it runs as __main__; the server may have (a module
        # the launcher imports): forget that copy, as runpy would otherwise warn and run a second one
        if not hasattr(sys.modules.get(request["module"]), "__path__"):  # a package runs its __main__ instead
            sys.modules.pop(request["module"], None)
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001  (as the interpreter: print the traceback, exit 1)
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # the interpreter joins non-daemon threads before atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve() -> None:
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    # py3langid's model, which a launch loads to check reward.guards.wrong_language.languages against its labels
    # (src/rewards/lid.py known_languages): 0.3-0.5 s of every launch, the same model for all (it ships in the
    # wheel), kept per process as a launch keeps it
    importlib.import_module("src.rewards.lid").identifier()
    # the config files a launch composes (conf/, verl's trainer configs), each read once per process as a launch
    # reads them (src/config/hydra_internal.py remember_config_files): a fork finds them read, and reads again
    # only what changed since (each file is known by its path, inode, size, modification and change times)
    from src.config import CONF_DIR, hydra_internal, register
    from src.verl_config.ppo_trainer import verl_config_dir

    register()
    for config_dir in (CONF_DIR, verl_config_dir()):
        hydra_internal.read_config_files(str(config_dir))
    protocol_out = sys.stdout
    print(READY, file=protocol_out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_launch(request)
        print(json.dumps({"pid": pid}), file=protocol_out, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}), file=protocol_out,
              flush=True)


if __name__ == "__main__":
    serve()
