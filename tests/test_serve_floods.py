"""Clients that send and never read are slowed, not buffered (docs/serve.md): a connection's unsent answers plus its
unanswered lines stay within a few MB for every kind of line, good and bad. Each flood of the issue runs against a
fresh server subprocess (its memory is what is measured: /proc/PID/status VmRSS, sampled while the flood lasts) on
127.0.0.1 port 0; every loop is bounded in count and time."""

import json
import os
import signal
import socket
import time

import pytest
from conftest import EXAMPLES, rss_mb, serve_process

LSTM = EXAMPLES / "lstm"
pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/PID/status")


def start():
    proc, address, _ = serve_process("--model-dir", LSTM, "--listen", "127.0.0.1:0")
    host, port = address.rsplit(":", 1)
    return proc, (host, int(port))


def flood(where, payload: bytes, connections: int, pid: int, seconds: float = 8.0) -> float:
    """Each connection sends `payload` (as much of it as the server takes within `seconds`) and never reads; the
    server's largest RSS over those `seconds` (the connections open all along)."""
    socks = [socket.create_connection(where, timeout=30) for _ in range(connections)]
    for sock in socks:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)  # (large bursts: reads as large as they come)
        sock.setblocking(False)
    sent = [0] * connections
    most, deadline = 0.0, time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            moved = False
            for k, sock in enumerate(socks):
                if sent[k] < len(payload):
                    try:
                        n = sock.send(payload[sent[k] : sent[k] + (8 << 20)])  # (as much as the kernel takes)
                    except BlockingIOError:
                        n = 0
                    sent[k] += n
                    moved = moved or n > 0
            most = max(most, rss_mb(pid))
            if not moved:
                time.sleep(0.05)  # (the server reads no more, or is busy answering: its memory is still sampled)
        return max(most, rss_mb(pid))
    finally:
        for sock in socks:
            sock.close()


PAYLOADS = {  # (made when a test asks: 400,000 JSON lines take a second, which collection need not spend)
    "lstm": lambda: b"".join(json.dumps({"obs": [0.1] * 10, "id": k % 5000}).encode() + b"\n" for k in range(400_000)),
    "info": lambda: b'{"info": true}\n' * ((2 << 20) // 15),
    "x": lambda: b"x\n" * (1 << 20),
}


@pytest.mark.parametrize(
    "lines, connections, bound_mb",
    [
        ("lstm", 1, 40),  # was +266 MB
        ("info", 8, 80),  # 2 MiB of {"info": true} lines on each of 8 connections: was +487 MB
        ("x", 8, 80),  # 2 MiB of x lines on each of 8 connections: was +1,868 MB
    ],
    ids=["lstm-lines", "info-lines", "x-lines"],
)
def test_a_flood_that_never_reads_holds_the_servers_growth(lines, connections, bound_mb):
    payload = PAYLOADS[lines]()
    proc, where = start()
    try:
        with socket.create_connection(where, timeout=60) as warm:  # (the engine's first call made)
            warm.sendall(b'{"obs": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], "id": 1}\n')
            assert b"discrete_actions" in warm.recv(1 << 16)
        before = rss_mb(proc.pid)
        most = flood(where, payload, connections, proc.pid)
        assert most - before < bound_mb, (before, most)
        with socket.create_connection(where, timeout=60) as after:  # and it still answers
            after.sendall(b'{"info": true}\n')
            assert b'"info"' in after.recv(1 << 16)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
