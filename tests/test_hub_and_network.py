"""The Hugging Face Hub and the network: nothing is contacted with a local model or when told offline; the default
tries the Hub, then falls back to the bundled sample; HF_ENDPOINT and the proxies of the environment, malformed,
dead or hanging up, are one line (only 127.0.0.1 is ever contacted). The program reads them from the environment
when it runs: in this process; huggingface_hub reads its own (HF_HOME, its retries' warnings) when imported: the
proxy that hangs up runs in a process of its own."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BUNDLED, BUNDLED_PT, ROOT, call, child_env, refused, run

# --- no network when told so --------------------------------------------------------------------------------


@pytest.fixture()
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError(f"network touched: {a[:2]}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_no_network_with_model_dir_or_checkpoint(capsys, monkeypatch, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert call(capsys, "--mode", "info", "--model-dir", BUNDLED)[0] == 0
    assert call(capsys, "--mode", "action", "--checkpoint", BUNDLED_PT)[0] == 0


def test_no_network_when_offline(capsys, no_network):
    code, out, _ = call(capsys, "--mode", "info")  # HF_HUB_OFFLINE=1 from conftest
    assert code == 0 and out["source"] == "bundled sample"


def test_default_tries_the_hub_then_falls_back(capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a closed local port: fails at once
    code, out, _ = call(capsys, "--mode", "info")
    assert code == 0 and out["source"] == "bundled sample" and "127.0.0.1:9" in out["note"]


# --- the Hub's environment ----------------------------------------------------------------------------------


def online(monkeypatch, **extra) -> None:
    """This process online (no HF_HUB_OFFLINE), no HF_ENDPOINT, no proxy unless given."""
    for name in list(os.environ):
        if name in ("HF_HUB_OFFLINE", "HF_ENDPOINT") or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)


def hub_env(tmp_path: Path, **extra) -> dict:
    """For a process: online (no HF_HUB_OFFLINE), an empty Hugging Face cache, no proxy unless given."""
    env = {
        k: v
        for k, v in child_env().items()
        if k != "HF_HUB_OFFLINE" and k != "HF_ENDPOINT" and not k.lower().endswith("_proxy")
    }
    env.update(HF_HOME=str(tmp_path / "hf"), **extra)
    return env


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:99999", "http://[::1", "https://[zz::1]:80"])
def test_a_malformed_hf_endpoint_is_one_line(capsys, monkeypatch, endpoint):
    online(monkeypatch, HF_ENDPOINT=endpoint)
    refused(run(capsys, "--mode", "info", "--model", "someone/policy"), "HF_ENDPOINT", "not a valid URL")
    code, out, err = call(capsys, "--mode", "info")  # no --model: the bundled sample
    assert code == 0 and out["source"] == "bundled sample" and "HF_ENDPOINT" in out["note"], err


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
def test_a_dead_proxy_fails_at_once_in_one_line(capsys, monkeypatch, variable):
    online(monkeypatch, **{variable: f"http://127.0.0.1:{closed_port()}"})
    t0 = time.monotonic()
    done = run(capsys, "--mode", "info", "--model", "someone/policy")
    took = time.monotonic() - t0
    refused(done, "someone/policy", "proxy", "127.0.0.1")
    assert took < 20, took  # (huggingface_hub alone: five retries, 26 s)


def test_no_proxy_sends_the_probe_to_the_endpoint(capsys, monkeypatch):
    """A host in NO_PROXY is reached directly: the probe goes to the (closed, local) endpoint."""
    port = closed_port()
    online(monkeypatch, HTTPS_PROXY="http://127.0.0.1:1", NO_PROXY="127.0.0.1", HF_ENDPOINT=f"https://127.0.0.1:{port}")
    line = refused(run(capsys, "--mode", "info", "--model", "someone/policy"), f"127.0.0.1:{port} is unreachable")
    assert "proxy" not in line


# The program as `python inference.py ARGS` runs it, with huggingface_hub's waits between retries shortened to 20 ms
# (1, 2, 4, 8, 8 s: 23 s of the test's time otherwise), each wait counted into the file $WAITS_COUNTED.
SHORT_WAITS = """
import atexit, os, runpy, sys, time
wait, waits = time.sleep, []
def short(seconds):
    waits.append(seconds)
    wait(min(seconds, 0.02))
time.sleep = short
atexit.register(lambda: open(os.environ["WAITS_COUNTED"], "w").write(str(len(waits))))
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_proxy_that_hangs_up_costs_one_line(tmp_path):
    """A proxy that accepts and closes every connection passes the probe; huggingface_hub then
    retries five times (about 25 s; here with its waits shortened): its retry warnings stay off stderr, one line
    tells."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def hang_up():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            connection.close()

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        counted = tmp_path / "waits"
        env = hub_env(tmp_path, HTTPS_PROXY=f"http://127.0.0.1:{server.getsockname()[1]}", WAITS_COUNTED=str(counted))
        done = subprocess.run(
            [sys.executable, "-c", SHORT_WAITS, ROOT / "inference.py", "--mode", "info", "--model", "someone/policy"],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
    finally:
        server.close()
    refused(done, "someone/policy", "could not download")
    assert int(counted.read_text()) >= 5, "huggingface_hub did not retry: the warnings this test is about never came"
