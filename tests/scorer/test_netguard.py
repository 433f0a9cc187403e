"""The tests really are offline: non-loopback connections fail here and in service subprocesses."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.helpers.scorer_service import REPO, service_env

from .conftest import netguard


def test_non_loopback_connect_is_refused_in_process():
    with pytest.raises(netguard.NetworkBlocked):
        socket.create_connection(("198.51.100.7", 443), timeout=1)
    with pytest.raises(netguard.NetworkBlocked):
        socket.getaddrinfo("huggingface.co", 443)


def test_loopback_still_works():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        with socket.create_connection(srv.getsockname(), timeout=1):
            pass


def test_subprocesses_get_the_guard_too():
    code = ("import socket\n"
            "try:\n    socket.create_connection(('198.51.100.7', 443), timeout=1)\n"
            "except RuntimeError as e:\n    print('blocked' if 'blocked' in str(e) else e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=service_env(),
                         capture_output=True, text=True, timeout=30).stdout.strip()
    assert out == "blocked"
