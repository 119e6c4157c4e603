"""Clients that send and never read are slowed, not buffered (docs/serve.md): a connection's unsent answers plus its
unanswered lines stay within a few MB for every kind of line, good and bad; --http's request bodies that stall are
bounded together (503 past the bound, 408 past the time). Each flood of the issue runs against a
fresh server subprocess (its memory is what is measured: /proc/PID/status VmRSS, sampled while the flood lasts) on
127.0.0.1 port 0; every loop is bounded in count and time."""

import json
import os
import re
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


def assert_answers_info(where) -> None:
    with socket.create_connection(where, timeout=60) as sock:
        sock.sendall(b'{"info": true}\n')
        assert b'"info"' in sock.recv(1 << 16)


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
        assert_answers_info(where)  # (and it still answers)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def test_unfinished_lines_on_many_connections_hold_the_servers_growth():
    """24 connections each send 15 MiB of one line and no newline (each under --max-line-bytes): the unfinished lines
    count, so the server stays within +200 MB of its rest (it held ~360 MB more before)."""
    proc, where = start()
    try:
        assert_answers_info(where)
        before = rss_mb(proc.pid)
        most = flood(where, b"x" * (15 << 20), 24, proc.pid, seconds=10.0)
        assert most - before < 200, (before, most)
        assert_answers_info(where)  # (and it still answers)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def read_line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        assert chunk, "closed before its answer"
        buf += chunk
    return buf


def test_a_long_line_waits_for_unfinished_ones_and_is_answered_when_they_end():
    """More long lines than the server holds at once (--max-line-bytes 32 MiB: two unfinished lines past 1 MiB): the
    ones that find no room wait, and are answered once the lines holding it end (their connections close)."""
    proc, address, _ = serve_process("--model-dir", LSTM, "--listen", "127.0.0.1:0", "--max-line-bytes", str(32 << 20))
    host, port = address.rsplit(":", 1)
    try:
        holders = [socket.create_connection((host, int(port)), timeout=60) for _ in range(2)]
        for sock in holders:
            sock.sendall(b"x" * (3 << 20))  # (unfinished: no newline)
        late = [socket.create_connection((host, int(port)), timeout=60) for _ in range(3)]
        for sock in late:
            sock.setblocking(False)
        pending = {sock: b"y" * (3 << 20) + b"\n" for sock in late}
        deadline, turns = time.monotonic() + 60, 0
        while (pending or holders) and time.monotonic() < deadline:
            turns += 1
            if turns == 50:  # (the late lines begun: the holders end theirs)
                for sock in holders:
                    sock.close()
                holders = []
            for sock, rest in list(pending.items()):
                try:
                    n = sock.send(rest)
                except BlockingIOError:
                    n = 0
                pending[sock] = rest[n:]
                if not pending[sock]:
                    del pending[sock]
            time.sleep(0.01)
        assert not pending
        for sock in late:
            sock.setblocking(True)
            sock.settimeout(60)
            assert json.loads(read_line(sock))["error"]  # (not JSON: its error answer, one per line)
            sock.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


# -- --http: bodies that come slowly, or stop coming
def stalled_posts(where, path: str, length: int, send: int, connections: int) -> list:
    """`connections` POSTs of `path` each saying Content-Length `length` and sending `send` bytes of it, then
    nothing (the sockets, open, for the caller to read and close)."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    socks, part = [], b"0" * send
    for _ in range(connections):
        sock = socket.create_connection(where, timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sock.sendall(head.encode())
        socks.append(sock)
    for sock in socks:  # (as much of its part as the server takes: one refused at once is not read at all)
        sock.setblocking(False)
    sent, deadline = [0] * connections, time.monotonic() + 8
    while time.monotonic() < deadline and min(sent) < send:
        moved = False
        for k, sock in enumerate(socks):
            try:
                n = sock.send(part[sent[k] : sent[k] + (1 << 20)]) if sent[k] < send else 0
            except BlockingIOError:
                n = 0
            except ConnectionError:  # (answered and closed: nothing more to send on it)
                n, sent[k] = 0, send
            sent[k] += n
            moved = moved or n > 0
        if not moved:
            time.sleep(0.05)
    return socks


def status_of(sock) -> tuple:
    """(status, body) of the answer waiting on `sock` (its whole answer, read within 15 s)."""
    sock.setblocking(True)
    sock.settimeout(15)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1 << 16)
        assert chunk, data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(1 << 16)
    return int(head.split()[1]), body


def test_stalled_http_bodies_hold_the_servers_growth():
    """The issue's flood, measured: 24 connections each send 15 MiB of a 16 MiB body and stop (the old server held
    about +365 MB for as long as they liked). Now the bodies in flight together are bounded (64 MiB): the others are
    answered 503 at once, in one line, their bodies unread; the server stays within +200 MB of its size at rest and
    answers a new request meanwhile."""
    proc, address, _ = serve_process("--model-dir", LSTM, "--http", "127.0.0.1:0", says="http")
    host, port = address.rsplit(":", 1)
    where, socks = (host, int(port)), []
    try:
        ok = b'{"obs": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]}'
        with socket.create_connection(where, timeout=60) as warm:
            warm.sendall(b"POST /v1/act HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(ok), ok))
            assert status_of(warm)[0] == 200
        before = rss_mb(proc.pid)
        socks = stalled_posts(where, "/v2/models/Memory/infer", 16 << 20, 15 << 20, 24)
        most = before
        for _ in range(20):
            most = max(most, rss_mb(proc.pid))
            time.sleep(0.1)
        assert most - before < 200, (before, most)
        refused = []
        for sock in socks[6:]:  # (at most 4 of 16 MiB fit in 64 MiB: these came after)
            status, body = status_of(sock)
            refused.append(status)
            assert b"\n" not in body.strip() and b"--http-in-flight-bytes" in body, body
        assert refused == [503] * len(refused)
        with socket.create_connection(where, timeout=60) as again:  # (GETs read no body: answered as ever)
            again.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status_of(again) == (200, b"ok\n")
    finally:
        for sock in socks:
            sock.close()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.parametrize("path", ["/v1/act", "/v2/models/Memory/infer"], ids=["json-lines", "v2"])
def test_a_body_that_stops_coming_is_answered_408_in_its_time(path):
    import inference as I
    from mlagents_inference.fronts.serve import serving
    from mlagents_inference.services.batcher import ServeOptions

    pytest.importorskip("aiohttp")
    with serving(I.load(LSTM), ServeOptions(body_timeout_s=1.0), http="127.0.0.1:0") as said:
        host, port = said["http"].rsplit(":", 1)
        (sock,) = stalled_posts((host, int(port)), path, 1000, 500, 1)
        started = time.monotonic()
        try:
            status, body = status_of(sock)
            took = time.monotonic() - started
            assert sock.recv(1) == b""  # (and the connection closed: its body's rest is not read)
        finally:
            sock.close()
    assert status == 408 and b"--body-timeout-s" in body and b"\n" not in body.strip(), (status, body)
    assert took < 10, took  # (within its 1 s and the loop's turns; the old server waited for ever)


@pytest.mark.parametrize("path", ["/v1/act", "/v2/models/Memory/infer"], ids=["json-lines", "v2"])
def test_a_body_past_the_bytes_in_flight_is_refused_at_once_unread(path):
    import inference as I
    from mlagents_inference.fronts.serve import serving
    from mlagents_inference.services.batcher import ServeOptions

    pytest.importorskip("aiohttp")
    with serving(I.load(LSTM), ServeOptions(http_in_flight_bytes=1 << 20), http="127.0.0.1:0") as said:
        host, port = said["http"].rsplit(":", 1)
        where = (host, int(port))
        first = stalled_posts(where, path, 900_000, 1000, 1)  # (held: 900,000 of the 1 MiB)
        second = stalled_posts(where, path, 500_000, 0, 1)  # (its headers alone: answered without its body)
        try:
            status, body = status_of(second[0])
        finally:
            for sock in first + second:
                sock.close()
    assert status == 503 and b"--http-in-flight-bytes" in body, (status, body)
    assert b"busy: 900,000 bytes of request bodies in flight (at most 1,048,576" in body, body  # (not "0 MiB")
    answer = json.loads(body)
    assert list(answer) == (["id", "error"] if path == "/v1/act" else ["error"]), answer
