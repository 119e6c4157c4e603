#!/usr/bin/env python3
"""serve mode's speed beside the stream's, in one run, on the bundled Huggy (a benchmark, not a test; docs/serve.md),
both at one --spin setting (default off, serve's own; the stream is measured at its own default, on, beside):

1. piped: N Huggy lines written at once, answers read as they come: the stream (a pipe) and serve (one TCP
   connection on 127.0.0.1); lines/s from the first answer to the last;
2. 64 agents: the stream with 64 lines written per step (one per agent id), their 64 answers read, repeated; serve
   with 64 connections in lock-step (each sends its next line when its answer has come); lines/s, serve's p99;
3. a lone client: send one line, wait for its answer, repeat; round-trip p50 (stream and serve).

    python tools/bench_serve.py [--lines 50000] [--steps 300] [--rounds 3000] [--json] [--spin on|off]
"""

import argparse
import json
import os
import re
import select
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HUGGY = ROOT / "assets" / "ppo-Huggy-sample"
SPIN = ["--spin", "off"]  # (--spin: the stream's and serve's alike, so that a ratio measures serve's own costs)


def huggy_lines(n: int, seed: int, ids=None) -> list:
    obs = np.random.RandomState(seed).randn(n, 59).astype(np.float32)
    return [
        json.dumps({"id": i if ids is None else ids[i % len(ids)], "obs": obs[i].tolist()}).encode() + b"\n"
        for i in range(n)
    ]


def start_stream(spin: Optional[list] = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "inference.py"),
            "--mode",
            "stream",
            "--model-dir",
            str(HUGGY),
            *(SPIN if spin is None else spin),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    proc.stdin.write(huggy_lines(1, 99)[0])  # warm up: the first answer
    proc.stdin.flush()
    proc.stdout.readline()
    return proc


def start_serve() -> tuple:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "inference.py"),
            "--mode",
            "serve",
            "--model-dir",
            str(HUGGY),
            "--listen",
            "127.0.0.1:0",
            *SPIN,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    text, deadline = b"", time.monotonic() + 120
    while not (found := re.search(rb"listening on 127\.0\.0\.1:(\d+)", text)):
        if time.monotonic() > deadline or proc.poll() is not None or not select.select([proc.stderr], [], [], 1)[0]:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"serve did not start: {text.decode()}")
            continue
        text += os.read(proc.stderr.fileno(), 4096)
    port = int(found.group(1))
    with socket.create_connection(("127.0.0.1", port)) as sock:  # warm up
        sock.sendall(huggy_lines(1, 99)[0])
        sock.recv(1 << 16)
    return proc, port


def read_answers(recv, n: int) -> float:
    """Read n answer lines; the time of the first one."""
    first, seen = None, 0
    while seen < n:
        chunk = recv(1 << 20)
        if not chunk:
            raise SystemExit(f"closed after {seen} answers")
        first = first or time.perf_counter()
        seen += chunk.count(b"\n")
    return first


def stream_piped(payload: bytes, n: int, spin: Optional[list] = None) -> float:
    proc = start_stream(spin)
    writer = threading.Thread(target=lambda: (proc.stdin.write(payload), proc.stdin.flush()))
    writer.start()
    first = read_answers(proc.stdout.read1, n)
    rate = (n - 1) / (time.perf_counter() - first)
    writer.join()
    proc.stdin.close()
    proc.wait(timeout=60)
    return rate


def serve_piped(payload: bytes, n: int) -> float:
    server, port = start_serve()
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            writer = threading.Thread(target=sock.sendall, args=(payload,))
            writer.start()
            first = read_answers(sock.recv, n)
            rate = (n - 1) / (time.perf_counter() - first)
            writer.join()
    finally:
        server.kill()
        server.wait()
    return rate


def stream_64(per_step: list, steps: int, agents: int = 64, spin: Optional[list] = None) -> float:
    proc = start_stream(spin)
    t0 = None
    for s, step in enumerate(per_step):
        if s == 10:
            t0 = time.perf_counter()
        proc.stdin.write(b"".join(step))
        proc.stdin.flush()
        read_answers(proc.stdout.read1, agents)
    rate = agents * steps / (time.perf_counter() - t0)
    proc.stdin.close()
    proc.wait(timeout=60)
    return rate


def serve_64(per_step: list, steps: int, agents: int = 64) -> tuple:
    server, port = start_serve()
    try:
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(agents)]
        sel = selectors.DefaultSelector()
        for i, sock in enumerate(socks):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ, i)
        sent_at, done, latencies, t0 = [0.0] * agents, [0] * agents, [], None
        for i, sock in enumerate(socks):
            sent_at[i] = time.perf_counter()
            sock.send(per_step[0][i])
        total, answered = agents * (steps + 10), 0
        while answered < total:
            for key, _ in sel.select(30):
                i = key.data
                chunk = key.fileobj.recv(1 << 16)
                if not chunk:
                    raise SystemExit("serve closed a connection")
                now = time.perf_counter()
                for _ in range(chunk.count(b"\n")):
                    answered += 1
                    done[i] += 1
                    if done[i] > 10:
                        latencies.append(now - sent_at[i])
                    if answered == agents * 10:
                        t0 = now
                    if done[i] < steps + 10:
                        sent_at[i] = time.perf_counter()
                        key.fileobj.send(per_step[done[i]][i])
        rate = agents * steps / (time.perf_counter() - t0)
        for sock in socks:
            sock.close()
    finally:
        server.kill()
        server.wait()
    return rate, float(np.percentile(latencies, 50)) * 1e3, float(np.percentile(latencies, 99)) * 1e3


def stream_lone(lines: list, spin: Optional[list] = None) -> float:
    proc = start_stream(spin)
    times = []
    for i, line in enumerate(lines):
        t0 = time.perf_counter()
        proc.stdin.write(line)
        proc.stdin.flush()
        proc.stdout.readline()
        times.append(time.perf_counter() - t0)
    proc.stdin.close()
    proc.wait(timeout=60)
    return float(np.percentile(times[200:], 50)) * 1e3


def serve_lone(lines: list) -> tuple:
    server, port = start_serve()
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = []
            for line in lines:
                t0 = time.perf_counter()
                sock.sendall(line)
                while not sock.recv(1 << 16).endswith(b"\n"):
                    pass
                times.append(time.perf_counter() - t0)
    finally:
        server.kill()
        server.wait()
    return float(np.percentile(times[200:], 50)) * 1e3, float(np.percentile(times[200:], 99)) * 1e3


def median(values: list) -> float:
    return float(np.median(values))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=50_000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3000)
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="each pair measured this many times, stream and serve alternating; medians reported (default 3)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.add_argument(
        "--spin",
        choices=("on", "off"),
        default="off",
        help="onnxruntime's threads spin-wait between calls "
        "in the stream and serve alike (their --spin; default off, serve's default); the stream is measured at "
        "its own default (on) too, in the same repetitions",
    )
    a = p.parse_args()
    SPIN[1] = a.spin
    own = a.spin != "on"  # (the stream at its own default, spin on, beside)
    lines = huggy_lines(a.lines, 0)
    payload = b"".join(lines)
    per_step = [huggy_lines(64, 1000 + s, ids=list(range(64))) for s in range(a.steps + 10)]
    lone_lines = huggy_lines(a.rounds + 200, 7, ids=["a"])
    r: dict = {
        k: []
        for k in (
            "stream_piped",
            "serve_piped",
            "stream_64",
            "serve_64",
            "serve_64_p50",
            "serve_64_p99",
            "stream_lone_p50",
            "serve_lone_p50",
            "serve_lone_p99",
        )
    }
    r.update({k: [] for k in ("stream_piped_spin_on", "stream_64_spin_on", "stream_lone_p50_spin_on")} if own else {})
    for _ in range(a.repeat):
        r["stream_piped"].append(stream_piped(payload, len(lines)))
        r["serve_piped"].append(serve_piped(payload, len(lines)))
        if own:
            r["stream_piped_spin_on"].append(stream_piped(payload, len(lines), ["--spin", "on"]))
        r["stream_64"].append(stream_64(per_step, a.steps))
        if own:
            r["stream_64_spin_on"].append(stream_64(per_step, a.steps, spin=["--spin", "on"]))
        rate, p50, p99 = serve_64(per_step, a.steps)
        r["serve_64"].append(rate)
        r["serve_64_p50"].append(p50)
        r["serve_64_p99"].append(p99)
        r["stream_lone_p50"].append(stream_lone(lone_lines))
        if own:
            r["stream_lone_p50_spin_on"].append(stream_lone(lone_lines, ["--spin", "on"]))
        p50, p99 = serve_lone(lone_lines)
        r["serve_lone_p50"].append(p50)
        r["serve_lone_p99"].append(p99)
    m = {k: median(v) for k, v in r.items()}
    out = {
        "cpus": os.cpu_count(),
        "repeat": a.repeat,
        "spin": a.spin,
        "load_average_1m": os.getloadavg()[0],
        "piped": {
            "lines": a.lines,
            "stream_lines_per_s": round(m["stream_piped"]),
            "serve_one_connection_lines_per_s": round(m["serve_piped"]),
            "ratio": round(m["serve_piped"] / m["stream_piped"], 3),
            **(
                {
                    "stream_spin_on_lines_per_s": round(m["stream_piped_spin_on"]),
                    "ratio_to_stream_spin_on": round(m["serve_piped"] / m["stream_piped_spin_on"], 3),
                }
                if own
                else {}
            ),
        },
        "agents_64": {
            "steps": a.steps,
            "stream_64_in_one_pipe_lines_per_s": round(m["stream_64"]),
            "serve_64_connections_lines_per_s": round(m["serve_64"]),
            "ratio": round(m["serve_64"] / m["stream_64"], 3),
            "serve_p50_ms": round(m["serve_64_p50"], 3),
            "serve_p99_ms": round(m["serve_64_p99"], 3),
            **(
                {
                    "stream_spin_on_lines_per_s": round(m["stream_64_spin_on"]),
                    "ratio_to_stream_spin_on": round(m["serve_64"] / m["stream_64_spin_on"], 3),
                }
                if own
                else {}
            ),
        },
        "lone": {
            "rounds": a.rounds,
            "stream_p50_ms": round(m["stream_lone_p50"], 4),
            "serve_p50_ms": round(m["serve_lone_p50"], 4),
            "ratio": round(m["serve_lone_p50"] / m["stream_lone_p50"], 3),
            "serve_p99_ms": round(m["serve_lone_p99"], 4),
            **({"stream_spin_on_p50_ms": round(m["stream_lone_p50_spin_on"], 4)} if own else {}),
        },
        "raw": {k: [round(x, 4) for x in v] for k, v in r.items()},
    }
    if a.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
