"""Hostile and unlucky input, round three (issue 20), where the process boundary is what is tested:
what reaches the real stderr (torch's, numpy's and onnxruntime's warnings), Ctrl-C while the
heavy modules import, a stream line that runs out of memory under a real limit, a FIFO given as
the ONNX, and the Hub's environment (a malformed HF_ENDPOINT, a dead proxy: only 127.0.0.1 is
ever contacted)."""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import BUNDLED, BUNDLED_PT, EXAMPLES, ROOT, child_env, cli
from test_hostile3 import one_line, wider_outputs


def refused(result, *words) -> str:
    """A finished process: exit 2 and one line on stderr naming `words`."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    return one_line(result.stderr, *words)


# --- 11. stderr is one line --------------------------------------------------------------------------

def test_a_zero_element_weight_is_one_line_without_torchs_warning(tmp_path):
    checkpoint = torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)
    state = dict(checkpoint["Policy"])
    state["network_body._body_endoder.seq_layers.0.weight"] = torch.zeros((0, 59))
    torch.save({**checkpoint, "Policy": state}, tmp_path / "zero.pt")
    line = refused(cli("--mode", "action", "--checkpoint", tmp_path / "zero.pt"), "zero.pt")
    assert "Warning" not in line


def test_an_empty_csv_is_one_line_without_numpys_warning(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    refused(cli("--mode", "batch", "--model-dir", BUNDLED, "--obs-file", tmp_path / "empty.csv"), "empty.csv")


def test_onnxruntime_says_nothing_of_a_misdeclared_output_shape(tmp_path):
    """A reference whose actions are declared [batch, 2] but computed [batch, 4]: onnxruntime would
    log a shape-merge warning; the result is "not this policy" (exit 1), nothing on stderr."""
    done = cli("--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", wider_outputs(tmp_path))
    assert done.returncode == 1 and "not this policy" in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize("signum,after", [(signal.SIGINT, 0.05), (signal.SIGINT, 0.3), (signal.SIGINT, 0.8),
                                          (signal.SIGINT, 1.5), (signal.SIGINT, 3.0), (signal.SIGTERM, 0.5)])
def test_a_signal_while_importing_is_one_line_and_128_plus_n(signum, after):
    """Wherever in start-up the signal lands (before main(), while torch imports inside a mode, inside a class body's
    __set_name__ that wraps the interrupt in a RuntimeError, or once the stream waits for lines): no traceback, no
    death by the signal itself, 128 + N and one line. The times spread over the start-up; each must hold wherever it
    lands on a loaded or an idle machine (test_cli_interrupts_and_stats holds the wrapped case without timing)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(BUNDLED)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env())
    try:
        time.sleep(after)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, (proc.returncode, err[-1500:])
    one_line(err, "interrupted")
    assert out == ""


# --- 3. a stream line that runs out of memory is that line's answer -----------------------------------

def test_a_stream_line_out_of_memory_under_a_real_limit(tmp_path):
    """The attention example answers a line; then its address space is capped at what it uses
    + 300 MiB (prlimit) and a 30,000-row line (about 1 GB inside onnxruntime) comes: that line
    is answered with an error, the next one normally, and the stream ends with exit 0."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir",
                             str(EXAMPLES / "attention")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    small = json.dumps({"obs_0": [[0.1] * 5], "obs_1": [0.2] * 8, "id": "small"})
    big = json.dumps({"obs_0": [[[0.5] * 5] * 6] * 30_000, "obs_1": [[0.2] * 8] * 30_000, "id": "big"})
    try:
        proc.stdin.write(small + "\n")
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())
        assert "discrete_actions" in first, first
        status = Path(f"/proc/{proc.pid}/status").read_text()
        used = next(int(l.split()[1]) * 1024 for l in status.splitlines() if l.startswith("VmSize:"))
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (used + (300 << 20), resource.RLIM_INFINITY))
        except (OSError, AttributeError) as exc:
            pytest.skip(f"cannot limit another process's memory here ({exc})")
        proc.stdin.write(big + "\n" + small + "\n")
        proc.stdin.flush()
        answers = [proc.stdout.readline(), proc.stdout.readline()]
        proc.stdin.close()
        code = proc.wait(timeout=120)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answers[0] and answers[1], (answers, err[-2000:])
    failed, after = json.loads(answers[0]), json.loads(answers[1])
    assert failed["id"] == "big" and "memory" in failed["error"], failed
    assert after == first, after
    assert code == 0 and "Traceback" not in err, (code, err[-2000:])


# --- 5. a FIFO as the ONNX never blocks --------------------------------------------------------------

def test_load_with_a_fifo_as_onnx_returns_at_once(tmp_path):
    fifo = tmp_path / "policy.onnx"
    os.mkfifo(fifo)
    program = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import inference\n"
               f"try:\n    inference.load({str(EXAMPLES / 'vector')!r}, onnx={str(fifo)!r})\n"
               f"except inference.UsageError as exc:\n    print('refused:', exc)\n")
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                              env=child_env())
    except subprocess.TimeoutExpired:  # (subprocess.run has killed it)
        raise AssertionError("load() blocked on the FIFO")
    assert "refused:" in done.stdout and "not a regular file" in done.stdout, (done.stdout, done.stderr)
    refused(cli("--mode", "info", "--model-dir", EXAMPLES / "vector", "--onnx", fifo, timeout=120),
            "not a regular file")


# --- 9. the Hub's environment ------------------------------------------------------------------------

def hub_env(tmp_path: Path, **extra) -> dict:
    """Online (no HF_HUB_OFFLINE), an empty Hugging Face cache, no proxy unless given."""
    env = {k: v for k, v in child_env().items() if k != "HF_HUB_OFFLINE" and k != "HF_ENDPOINT"
           and not k.lower().endswith("_proxy")}
    env.update(HF_HOME=str(tmp_path / "hf"), **extra)
    return env


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:99999", "http://[::1", "https://[zz::1]:80"])
def test_a_malformed_hf_endpoint_is_one_line(tmp_path, endpoint):
    env = hub_env(tmp_path, HF_ENDPOINT=endpoint)
    done = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--model", "someone/policy"],
                          capture_output=True, text=True, timeout=120, env=env)
    refused(done, "HF_ENDPOINT", "not a valid URL")
    done = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)  # no --model: the bundled sample
    assert done.returncode == 0 and "HF_ENDPOINT" in json.loads(done.stdout)["note"], done.stderr[-1500:]


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
def test_a_dead_proxy_fails_at_once_in_one_line(tmp_path, variable):
    env = hub_env(tmp_path, **{variable: f"http://127.0.0.1:{closed_port()}"})
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--model", "someone/policy"],
                          capture_output=True, text=True, timeout=120, env=env)
    took = time.monotonic() - t0
    refused(done, "someone/policy", "proxy", "127.0.0.1")
    assert took < 20, took  # (huggingface_hub alone: five retries, 26 s)


def test_no_proxy_sends_the_probe_to_the_endpoint(tmp_path):
    """A host in NO_PROXY is reached directly: the probe goes to the (closed, local) endpoint."""
    port = closed_port()
    env = hub_env(tmp_path, HTTPS_PROXY="http://127.0.0.1:1", NO_PROXY="127.0.0.1",
                  HF_ENDPOINT=f"https://127.0.0.1:{port}")
    done = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--model", "someone/policy"],
                          capture_output=True, text=True, timeout=120, env=env)
    line = refused(done, f"127.0.0.1:{port} is unreachable")
    assert "proxy" not in line


def test_a_proxy_that_hangs_up_costs_one_line(tmp_path):
    """A proxy that accepts and closes every connection passes the probe; huggingface_hub then
    retries five times (about 25 s): its retry warnings stay off stderr, one line tells."""
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
        env = hub_env(tmp_path, HTTPS_PROXY=f"http://127.0.0.1:{server.getsockname()[1]}")
        done = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--model",
                               "someone/policy"], capture_output=True, text=True, timeout=180, env=env)
    finally:
        server.close()
    refused(done, "someone/policy", "could not download")
