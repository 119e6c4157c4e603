"""serve gathers the lines of many connections into one engine call (issue 46: 64 threads with one connect() each):
lock-step clients, one line each in flight, are answered together, read from serve's own stats (GET /metrics'
batch histogram), never from a clock. A real serve process: its loop and the clients' are apart, as in use."""

import json
import re
import socket
import urllib.request

import numpy as np
import pytest
from conftest import BUNDLED, BUNDLED_ONNX, huggy_obs, ort_deterministic, serve_process

CONNECTIONS, ROUNDS = 64, 12


def batch_lines(base: str) -> tuple:
    """(engine calls, lines) so far: serve's mlagents_serve_batch_lines histogram."""
    with urllib.request.urlopen(base + "/metrics", timeout=60) as response:
        text = response.read().decode()
    count = float(re.search(r"^mlagents_serve_batch_lines_count (\S+)$", text, re.M).group(1))
    total = float(re.search(r"^mlagents_serve_batch_lines_sum (\S+)$", text, re.M).group(1))
    return count, total


def test_lock_step_connections_with_one_line_each_share_engine_calls():
    """64 connections, each sending its next line as soon as its answer has come (what 64 threads with one connect()
    each do): their lines go into engine calls of many rows, where each turn of serve's loop took the few lines that
    had come by then before (8-9 rows a call measured with 64 threads). Every answer is still its own line's."""
    pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")
    obs = huggy_obs(CONNECTIONS * ROUNDS, seed=4).reshape(ROUNDS, CONNECTIONS, -1)
    want = ort_deterministic(BUNDLED_ONNX, obs.reshape(CONNECTIONS * ROUNDS, -1)).reshape(ROUNDS, CONNECTIONS, -1)
    proc, http, said = serve_process(
        "--model-dir", BUNDLED, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", says="http"
    )
    socks = []
    try:
        base = "http://" + http.rstrip(",")
        host, port = re.search(r"listening on (\S+)", said).group(1).rsplit(":", 1)
        for _ in range(CONNECTIONS):
            sock = socket.create_connection((host, int(port)), timeout=60)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append((sock, sock.makefile("rb")))

        def send(k: int, step: int) -> None:
            socks[k][0].sendall(json.dumps({"id": k, "obs": obs[step, k].tolist()}).encode() + b"\n")

        calls_before, lines_before = batch_lines(base)
        for k in range(CONNECTIONS):
            send(k, 0)
        answers = []
        for step in range(ROUNDS):
            for k in range(CONNECTIONS):  # each connection's next line right after its own answer
                answers.append(socks[k][1].readline())
                if step + 1 < ROUNDS:
                    send(k, step + 1)
        calls, lines = batch_lines(base)
    finally:
        for sock, reader in socks:
            reader.close()
            sock.close()
        proc.kill()
        proc.wait()
    for n, text in enumerate(answers):
        answer, (step, k) = json.loads(text), divmod(n, CONNECTIONS)
        assert answer["id"] == k and "error" not in answer, answer
        np.testing.assert_allclose(answer["continuous_actions"], want[step, k], rtol=1e-5, atol=1e-5)
    assert lines - lines_before == CONNECTIONS * ROUNDS
    rows_a_call = (lines - lines_before) / (calls - calls_before)
    assert rows_a_call >= CONNECTIONS / 2, f"{calls - calls_before:.0f} engine calls, {rows_a_call:.1f} rows a call"
