"""POST /v1/act timings against a running `serve --ray` (docs/serve.md#ray-serve): one client's per-line latency, then
CLIENTS clients at once (lines/s), then the same lines PER_REQUEST to a request. Huggy-shaped lines (59 random numbers)
unless --obs-size says otherwise.
  python tools/bench_ray_serve.py http://127.0.0.1:9000/v1/act [--lines 2000] [--clients 16] [--obs-size 59]
      [--per-request 64]
--start: how long `serve --ray local` takes from the command's start to its first answer (RUNS times; the machine's
load average beside each), the server stopped after each:
  python tools/bench_ray_serve.py --start [--runs 3] [--model-dir examples/vector] [--obs-size 8]"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def post(url: str, body: bytes, timeout: float = 60) -> float:
    t0 = time.perf_counter()
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        assert b'"error"' not in answer.read()
    return (time.perf_counter() - t0) * 1e3


def start_times(a) -> None:
    """The command started, a line POSTed every 0.1 s until one is answered; then SIGTERM."""
    line = json.dumps({"id": 1, "obs": [0.0] * a.obs_size}).encode()
    for run in range(a.runs):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/act"
        command = [sys.executable, str(ROOT / "inference.py"), "--mode", "serve", "--ray", "local"]
        command += ["--http", f"127.0.0.1:{port}", "--model-dir", a.model_dir]
        with tempfile.TemporaryFile() as err:
            t0 = time.time()
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
            try:
                while True:
                    try:
                        post(url, line, timeout=5)
                        break
                    except OSError:
                        if proc.poll() is not None:
                            err.seek(0)
                            sys.exit(err.read().decode())
                        time.sleep(0.1)
                first = time.time() - t0
                load = os.getloadavg()[0]
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
        print(f"run {run + 1}: first answer {first:.1f} s after the start (load average {load:.1f})", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url", nargs="?")
    p.add_argument("--lines", type=int, default=2000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--obs-size", type=int, default=59)
    p.add_argument("--per-request", type=int, default=64)
    p.add_argument("--start", action="store_true")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--model-dir", default=str(ROOT / "examples" / "vector"))
    a = p.parse_args()
    if a.start:
        return start_times(a)
    rng = np.random.RandomState(0)
    lines = [json.dumps({"id": i, "obs": rng.randn(a.obs_size).round(5).tolist()}).encode() for i in range(a.lines)]
    for body in lines[:50]:  # warm
        post(a.url, body)
    one = [post(a.url, body) for body in lines[: a.lines // 4]]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.clients) as pool:
        many = list(pool.map(lambda body: post(a.url, body), lines))
    seconds = time.perf_counter() - t0
    print(
        f"one client: p50 {np.percentile(one, 50):.2f} ms p99 {np.percentile(one, 99):.2f} ms ({len(one)} lines) | "
        f"{a.clients} clients: {len(lines) / seconds:,.0f} lines/s, p50 {np.percentile(many, 50):.2f} ms "
        f"p99 {np.percentile(many, 99):.2f} ms ({len(lines)} lines)"
    )
    k = a.per_request
    bodies = [b"\n".join(lines[i : i + k]) + b"\n" for i in range(0, len(lines), k)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.clients) as pool:
        list(pool.map(lambda body: post(a.url, body), bodies))
    seconds = time.perf_counter() - t0
    print(f"{k} lines a request, {a.clients} clients: {len(lines) / seconds:,.0f} lines/s ({len(bodies)} requests)")


if __name__ == "__main__":
    main()
