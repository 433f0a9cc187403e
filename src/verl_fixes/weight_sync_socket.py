"""The socket of verl's colocated weight sync, made the launch's own.

verl 0.9.1 sends the trainer's weights to vLLM through a ZMQ socket at a fixed path in /tmp, named after the Ray job
id: `ipc:///tmp/rl-colocate-zmq-{job id}-replica-{r}-rank-{k}.sock` (the sender in verl/workers/rollout/vllm_rollout/
vllm_rollout.py ServerAdapter.__init__, the receiver in vllm_rollout/utils.py vLLMColocateWorkerExtension.
_get_zmq_handle; verl PR 6246 added the job id so that two jobs on one host would not share it). But a Ray cluster
numbers its jobs from 1, and every launch of this project starts a Ray cluster of its own, so the job id is 01000000
in every run: two runs on one host (two Slurm jobs sharing a node, a local run beside a job, two CI tests) use the
same path. The sender removes the path before it binds (bucketed_weight_transfer.py BucketedWeightSender.
_init_socket): the second run takes the socket over without an error, a vLLM worker of one run connects to the
other run's sender, and a weight sync waits for ever. Seen in CI (2026-12-05): a local learn_tiny run and a Slurm
job's run on the same machine both stalled in the weight sync; the stall guard stopped both after 600 s.

So both ends put the launch's tag ($QE_RL_WEIGHT_SYNC_TAG, a random one per launch: src/node/environment.py
run_env; a run variable, so every node's actors get node 0's: src/trainer/run_vars.py) before the job id. Without
the variable (verl run by hand) both ends keep verl's path. Both ends are in processes of the same raylet and runtime
env, so they read the same tag.
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Optional

from .after_import import when_imported

TAG_ENV = "QE_RL_WEIGHT_SYNC_TAG"
PREFIX = "ipc:///tmp/rl-colocate-zmq-"
# (module, class, method): the sender's path is an attribute its __init__ sets, the receiver's a method's result
SENDER = ("verl.workers.rollout.vllm_rollout.vllm_rollout", "ServerAdapter", "__init__")
RECEIVER = ("verl.workers.rollout.vllm_rollout.utils", "vLLMColocateWorkerExtension", "_get_zmq_handle")
MARK = "_qe_rl_weight_sync_tag"  # on each replacement: a second apply (a forked process) changes nothing


class WeightSyncSocketChanged(RuntimeError):
    """verl no longer names the weight sync's socket as this fix expects. One line."""


def tagged(handle: str, environ: Optional[dict] = None) -> str:
    """verl's socket path with the launch's tag before the job id; unchanged without a tag."""
    tag = (os.environ if environ is None else environ).get(TAG_ENV)
    if not tag:
        return handle
    if not handle.startswith(PREFIX):
        raise WeightSyncSocketChanged(
            f"verl's weight-sync socket is {handle!r}, not under {PREFIX}: the fix for two runs on one host "
            f"(src/verl_fixes/weight_sync_socket.py) no longer applies to this verl; update it")
    if handle.startswith(f"{PREFIX}{tag}-"):
        return handle
    return f"{PREFIX}{tag}-{handle[len(PREFIX):]}"


def _on_sender(cls) -> None:
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.zmq_handle = tagged(self.zmq_handle)
    setattr(__init__, MARK, True)
    cls.__init__ = __init__


def _on_receiver(cls) -> None:
    original = cls._get_zmq_handle

    def _get_zmq_handle(self) -> str:
        return tagged(original(self))
    setattr(_get_zmq_handle, MARK, True)
    cls._get_zmq_handle = _get_zmq_handle


def _patch(target: tuple, change) -> None:
    module_name, class_name, method = target

    def then(module: ModuleType) -> None:
        cls = getattr(module, class_name, None)
        if cls is None or not callable(getattr(cls, method, None)):
            raise WeightSyncSocketChanged(f"{module_name}.{class_name}.{method} is gone: the fix for two runs on one "
                                          f"host (src/verl_fixes/weight_sync_socket.py) no longer applies; update it")
        if not getattr(getattr(cls, method), MARK, False):
            change(cls)
    when_imported(module_name, then)


def apply() -> list[str]:
    """Both ends, now where their module is imported, else right after its first import. What was patched."""
    _patch(SENDER, _on_sender)
    _patch(RECEIVER, _on_receiver)
    return [".".join(SENDER), ".".join(RECEIVER)]
