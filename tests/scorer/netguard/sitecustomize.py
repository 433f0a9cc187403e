"""Refuses every non-loopback network connection in this Python process.

Loaded two ways: by tests/scorer/conftest.py for the pytest process, and as `sitecustomize`
(PYTHONPATH=tests/scorer/netguard) for service subprocesses the tests start, so a code path
that tries to reach the Hugging Face hub fails loudly instead of hanging or passing by luck.
"""
import ipaddress
import socket

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class NetworkBlocked(RuntimeError):
    pass


def _is_local(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host is None or host in _LOCAL_NAMES or host == "":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(sock, address) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
        raise NetworkBlocked(f"network access blocked in tests: connect to {address!r}")


def install() -> None:
    if getattr(socket.socket, "_netguard", False):
        return
    orig_connect, orig_connect_ex = socket.socket.connect, socket.socket.connect_ex
    orig_getaddrinfo = socket.getaddrinfo

    def connect(self, address):
        _check(self, address)
        return orig_connect(self, address)

    def connect_ex(self, address):
        _check(self, address)
        return orig_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_local(host):
            raise NetworkBlocked(f"network access blocked in tests: resolve {host!r}")
        return orig_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo
    socket.socket._netguard = True


install()
