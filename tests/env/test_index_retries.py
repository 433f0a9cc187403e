"""The package-index client of envs/check_wheels.py (and envs/wheelhouse.py) retries what a flaky resolver or
an overloaded index does to a request, and nothing else: a full CI run once ended on one failed name lookup.
Served by a real HTTP server on loopback that answers as told, one answer per request."""
import json
import socket
import sys
import threading
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "envs"))
import check_wheels  # noqa: E402  (envs/ is not a package)

PAGE = {"files": [{"filename": "six-1.17.0-py2.py3-none-any.whl", "url": "https://example/six.whl"}]}


@pytest.fixture
def index(monkeypatch):
    """(base url, answers to give in order: an HTTP status each, 200 serves PAGE; requests seen)."""
    monkeypatch.setattr(check_wheels, "RETRY_WAITS_S", (0, 0, 0))  # three retries, no waiting
    answers: list[int] = []
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's name)
            seen.append(self.path)
            status = answers.pop(0)
            body = json.dumps(PAGE).encode() if status == 200 else b"no"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", answers, seen
    server.shutdown()
    server.server_close()


def test_an_overloaded_index_is_asked_again_until_it_answers(index):
    url, answers, seen = index
    answers += [503, 429, 502, 200]
    assert check_wheels.index_files("six", url) == PAGE["files"]
    assert seen == ["/simple/six/"] * 4


def test_retries_are_bounded_and_the_last_error_is_raised(index):
    url, answers, seen = index
    answers += [503] * 4
    with pytest.raises(urllib.error.HTTPError) as error:
        check_wheels.index_files("six", url)
    assert error.value.code == 503 and len(seen) == 4  # the first try and three retries


def test_an_answer_that_is_not_transient_fails_at_once(index):
    url, answers, seen = index
    answers += [404, 200]
    with pytest.raises(urllib.error.HTTPError) as error:
        check_wheels.index_files("no-such-package", url)
    assert error.value.code == 404 and len(seen) == 1


def test_a_refused_connection_is_retried_then_raised(monkeypatch):
    monkeypatch.setattr(check_wheels, "RETRY_WAITS_S", (0, 0))
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    tries = []
    real = check_wheels.urllib.request.urlopen

    def counted(*args, **kwargs):
        tries.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(check_wheels.urllib.request, "urlopen", counted)
    with pytest.raises(urllib.error.URLError):
        check_wheels.index_files("six", f"http://127.0.0.1:{port}/simple")
    assert len(tries) == 3
