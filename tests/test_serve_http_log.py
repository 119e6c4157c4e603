"""The server's log is not a peer's to fill: aiohttp's "Error handling request" traceback for a malformed HTTP
request becomes one line, at most one a second (the rest counted). A server subprocess with --http on 127.0.0.1
port 0; its stderr is what is tested. Every loop is bounded."""

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES, ROOT, child_env

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

MALFORMED = b"POST /v1/act HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"


def test_malformed_http_requests_are_one_line_each_second_not_tracebacks():
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "inference.py"),
            "--mode",
            "serve",
            "--model-dir",
            str(EXAMPLES / "vector"),
            "--http",
            "127.0.0.1:0",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        text, deadline = b"", time.monotonic() + 120
        while not (found := re.search(rb"http on (\S+):(\d+)\n", text)):
            assert time.monotonic() < deadline and proc.poll() is None, text
            if select.select([proc.stderr], [], [], 1)[0]:
                text += os.read(proc.stderr.fileno(), 4096)
        where = (found.group(1).decode(), int(found.group(2)))
        for _ in range(200):
            with socket.create_connection(where, timeout=30) as sock:
                sock.sendall(MALFORMED)
                assert b" 400 " in sock.recv(4096).split(b"\r\n")[0]  # (refused, as before)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = (text + err).decode(errors="replace")
    assert "Traceback" not in said and said.count("\n") <= 12, said[-3000:]
    assert "Error handling request" in said
