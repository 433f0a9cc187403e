"""Shared by both test environments (train and scorer): stdlib only.

Tests never reach the network: any connect to a non-loopback address raises. Models and data
used by tests are built locally by fixtures.
"""
import ipaddress
import os
import socket
import tempfile

import pytest

# how the suite is split across xdist workers, and the per-directory time table of every CI log
pytest_plugins = ("tests.scheduling", "tests.durations")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
# verl's composition and verdict cache (src/verl_config/cache.py): a fresh one per test session, so no
# verdict from a user's ~/.cache (or an earlier code version) decides a test; within the session a
# config verl passed once is reused, as on a user's second launch. Set here in the xdist controller
# before its workers start, so they inherit it and share one cache (entries are written atomically)
os.environ.setdefault("QE_RL_CACHE_DIR", tempfile.mkdtemp(prefix="qe_rl_test_cache-"))

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded(real):
    def connect(self, address, *args, **kwargs):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
            raise RuntimeError(f"test tried to reach the network: {address!r}")
        return real(self, address, *args, **kwargs)
    return connect


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    socket.socket.connect = _guarded(_real_connect)
    socket.socket.connect_ex = _guarded(_real_connect_ex)
    yield
    socket.socket.connect = _real_connect
    socket.socket.connect_ex = _real_connect_ex
