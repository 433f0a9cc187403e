"""Another run on this host, as verl 0.9.1's weight sync sees it: its sender holds the socket path verl names after
the Ray job id, which is 01000000 in every run that starts its own Ray cluster (src/verl_fixes/weight_sync_socket.py),
and takes the path back whenever it is not its own, as the other run's sender does before each of its weight syncs
(it removes the path, then binds: verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py
BucketedWeightSender._init_socket). A run whose vLLM worker connects there waits for ever in its weight sync."""
from __future__ import annotations

import glob
import os
import threading
from pathlib import Path

import zmq

# verl's path for the first job of a Ray cluster, replica 0, rank 0 (the CPU loop's one worker)
VERL_PATH = "/tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock"
POLL_S = 0.01


class OtherRunsSocket:
    """Holds VERL_PATH for as long as the `with` lasts; `seen`: the other weight-sync sockets that appeared in /tmp
    meanwhile (a run with the fix: the same path with its launch's tag before the job id)."""

    def __init__(self, path: str = VERL_PATH):
        self.path, self.seen, self.takeovers = path, set(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="other-run-socket", daemon=True)

    def __enter__(self) -> "OtherRunsSocket":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _inode(self) -> int | None:
        try:
            return os.stat(self.path).st_ino
        except FileNotFoundError:
            return None

    def _hold(self) -> None:
        context, socket, ours = zmq.Context(), None, None
        try:
            while not self._stop.is_set():
                if ours is None or self._inode() != ours:
                    if socket is not None:
                        socket.close(linger=0)
                    Path(self.path).unlink(missing_ok=True)
                    socket = context.socket(zmq.REQ)
                    socket.bind(f"ipc://{self.path}")
                    ours, self.takeovers = self._inode(), self.takeovers + 1
                self.seen |= set(glob.glob("/tmp/rl-colocate-zmq-*.sock")) - {self.path}
                self._stop.wait(POLL_S)
        finally:
            if socket is not None:
                socket.close(linger=0)
            Path(self.path).unlink(missing_ok=True)
            context.term()
