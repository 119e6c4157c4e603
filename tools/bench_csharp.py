#!/usr/bin/env python3
"""The C# client (clients/csharp/) beside Python raw-socket clients, on one `--mode serve` server in one run (a
benchmark, not a test; docs/performance.md): the bundled Huggy (59 inputs, 21 continuous actions), serve's default
--spin off.

1. a lone agent: one line, wait for its answer, repeat; round-trip p50 and p99 (ms);
2. 64 agents, one connection: every agent's line in one write, the 64 answers read, repeated; agent-steps/s, and the
   client's own CPU time per step (user + system).

Clients, alternating on the same server, each measurement `--repeat` times (medians):
- C#: PolicyClient.Act and PolicyClient.ActMany under Mono (formats the float32 observations, parses and checks every
  answer), one `mono` process per measurement, its warm-up rounds untimed;
- Python raw: a socket with lines encoded before the clock starts (as bench_serve.py's clients; each float32 in its
  shortest text), counting newlines: no client work, the floor;
- Python raw b64: the same, its lines' observations as {"b64": ...} (base64 of the float32 bytes), answers as text;
- Python raw b64 answers: the same again, each line also asking for its answer's floats as {"b64": ...}
  ("answer_b64": true): what the C# client sends by default (issue 43's fifth attempt), the floor that sends what C#
  sends;
- Python json: the raw socket of docs/serve.md, json.dumps of each line and json.loads of each answer, timed;
- with --before DIR: also C# built from DIR/clients/csharp (a checkout of the code before, e.g. a git worktree), in
  the same turns.
Each repetition runs every client once, in an order rotated by one each time, so that each is first in turn.

    python tools/bench_csharp.py [--rounds 3000] [--steps 1000] [--warmup-steps 200] [--repeat 5] [--before DIR]
        [--json]
"""

import argparse
import base64
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HUGGY = ROOT / "assets" / "ppo-Huggy-sample"
CLIENT = ROOT / "clients" / "csharp"
AGENTS = 64
WARMUP = 200
# 64-agent steps each client makes before its clock starts. Mono's first few hundred ActMany steps after start-up ran
# slower than its later ones (docs/performance.md), which Python's floors, encoded before the clock, do not show.
MANY_WARMUP = 200


def build(out: Path, client: Path = CLIENT) -> Path:
    """The library (client/Runtime) and client/Tests~/Bench.cs compiled with mcs (-optimize+) into out; the Bench.exe
    path."""
    mcs = shutil.which("mcs")
    if not mcs or not shutil.which("mono"):
        raise SystemExit("mcs and mono are needed (Debian: apt-get install mono-mcs mono-runtime)")
    flags = ["-langversion:7.2", "-warnaserror", "-nologo", "-optimize+"]
    dll = out / "MLAgentsInference.Client.dll"
    for target, sources in (
        (["-target:library", f"-out:{dll}"], sorted((client / "Runtime").glob("*.cs"))),
        ([f"-r:{dll}", f"-out:{out / 'Bench.exe'}"], [client / "Tests~" / "Bench.cs"]),
    ):
        r = subprocess.run([mcs, *flags, *target, *map(str, sources)], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"mcs failed:\n{r.stdout}{r.stderr}")
    return out / "Bench.exe"


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
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    text, deadline = b"", time.monotonic() + 120
    while not (found := re.search(rb"listening on 127\.0\.0\.1:(\d+)", text)):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"serve did not start: {text.decode()}")
        if select.select([proc.stderr], [], [], 1)[0]:
            text += os.read(proc.stderr.fileno(), 4096)
    return proc, int(found.group(1))


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def percentiles(times: list) -> tuple:
    return float(np.percentile(times, 50)) * 1e3, float(np.percentile(times, 99)) * 1e3


def raw_line(agent: int, values: np.ndarray) -> bytes:
    """A line with each float32 in its shortest text: the bytes the C# client wrote before it took 9 fixed digits
    (issue 43), whose lines are 11 % longer; serve's parse of either costs the same (docs/performance.md)."""
    return b'{"id":%d,"obs":[%s]}\n' % (
        agent,
        ",".join(np.format_float_positional(v, unique=True, trim="-") for v in values).encode(),
    )


def b64_line(agent: int, values: np.ndarray, answer: bool = False) -> bytes:
    """A line with the observation as {"b64": base64 of its little-endian float32 bytes} (PolicyClient's
    BinaryObservations); `answer`: asking for the answer's floats so too (BinaryActions): the bytes the C# client
    writes by default."""
    ask = b',"answer_b64":true' if answer else b""
    return b'{"id":%d,"obs":{"b64":"%s"}%s}\n' % (agent, base64.b64encode(values.astype("<f4").tobytes()), ask)


def b64a_line(agent: int, values: np.ndarray) -> bytes:
    return b64_line(agent, values, answer=True)


def python_raw_lone(port: int, obs: np.ndarray, rounds: int, line=raw_line) -> tuple:
    lines = [line(0, obs[i % len(obs), 0]) for i in range(WARMUP + rounds)]
    times = []
    with connect(port) as sock:
        for line in lines:
            t0 = time.perf_counter()
            sock.sendall(line)
            while not sock.recv(1 << 16).endswith(b"\n"):
                pass
            times.append(time.perf_counter() - t0)
    return percentiles(times[WARMUP:])


def python_json_lone(port: int, obs: np.ndarray, rounds: int) -> tuple:
    times = []
    with connect(port) as sock, sock.makefile("rb") as answers:
        for i in range(WARMUP + rounds):
            values = obs[i % len(obs), 0]
            t0 = time.perf_counter()
            sock.sendall(json.dumps({"id": 0, "obs": list(map(float, values))}).encode() + b"\n")
            answer = json.loads(answers.readline())
            if "error" in answer or answer["id"] != 0:
                raise SystemExit(f"bad answer {answer}")
            times.append(time.perf_counter() - t0)
    return percentiles(times[WARMUP:])


def python_raw_many(port: int, obs: np.ndarray, steps: int, line=raw_line, warmup: int = MANY_WARMUP) -> tuple:
    """(agent-steps/s, this process's CPU ms per step)"""
    payloads = [b"".join(line(a, obs[s % len(obs), a]) for a in range(AGENTS)) for s in range(warmup + steps)]
    with connect(port) as sock:
        for s, payload in enumerate(payloads):
            if s == warmup:
                t0, cpu = time.perf_counter(), time.process_time()
            sock.sendall(payload)
            seen = 0
            while seen < AGENTS:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise SystemExit("serve closed the connection")
                seen += chunk.count(b"\n")
        return AGENTS * steps / (time.perf_counter() - t0), (time.process_time() - cpu) / steps * 1e3


def python_json_many(port: int, obs: np.ndarray, steps: int, warmup: int = MANY_WARMUP) -> tuple:
    with connect(port) as sock, sock.makefile("rb") as answers:
        for s in range(warmup + steps):
            if s == warmup:
                t0, cpu = time.perf_counter(), time.process_time()
            step = obs[s % len(obs)]
            sock.sendall(
                b"".join(
                    json.dumps({"id": a, "obs": list(map(float, step[a]))}).encode() + b"\n" for a in range(AGENTS)
                )
            )
            for a in range(AGENTS):
                answer = json.loads(answers.readline())
                if "error" in answer or answer["id"] != a:
                    raise SystemExit(f"bad answer {answer}")
        return AGENTS * steps / (time.perf_counter() - t0), (time.process_time() - cpu) / steps * 1e3


def csharp(bench: Path, port: int, obs_file: Path, mode: str, rounds: int, warmup: int = MANY_WARMUP) -> dict:
    warmup = WARMUP if mode == "lone" else warmup
    r = subprocess.run(
        ["mono", str(bench), f"127.0.0.1:{port}", mode, str(obs_file), str(AGENTS), str(rounds), str(warmup)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode:
        raise SystemExit(f"Bench.exe {mode} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return json.loads(r.stdout)


def csharp_lone(bench: Path, port: int, obs_file: Path, rounds: int) -> tuple:
    """(p50, p99) of the C# client's lone round trips, in ms."""
    got = csharp(bench, port, obs_file, "lone", rounds)
    return got["p50_ms"], got["p99_ms"]


def csharp_many(bench: Path, port: int, obs_file: Path, steps: int, warmup: int) -> tuple:
    """(agent-steps/s, the client's CPU ms per step) of the C# client's ActMany."""
    got = csharp(bench, port, obs_file, "many", steps, warmup)
    return got["agent_steps_per_s"], got["cpu_ms_per_step"]


def rotated(clients: list, turn: int) -> list:
    """The clients in the order of repetition `turn`: rotated by it, so that each is first in turn."""
    k = turn % len(clients)
    return clients[k:] + clients[:k]


def paired(ours: list, theirs: list) -> list:
    """Each repetition's ratio (the two measured minutes apart at most; on a shared machine they swing together)."""
    return [round(a / b, 3) for a, b in zip(ours, theirs)]


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " C# lone p50/p99 and 64-agent ActMany agent-steps/s "
        "beside Python raw-socket clients."
    )
    p.add_argument("--rounds", type=int, default=3000, help="lone round trips timed per measurement (default 3000)")
    p.add_argument("--steps", type=int, default=1000, help="64-agent steps timed per measurement (default 1000)")
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=MANY_WARMUP,
        help=f"64-agent steps each client makes before its clock starts (default {MANY_WARMUP}; "
        "issue 43's earlier runs: 10, with --steps 300)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="each measurement this many times, the clients alternating; medians reported (default 5)",
    )
    p.add_argument(
        "--before",
        type=Path,
        help="a checkout of the code before (e.g. a git worktree of main): its C# client measured too, same turns",
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    a = p.parse_args()
    obs = np.random.RandomState(0).randn(64, AGENTS, 59).astype(np.float32)  # 64 steps of 64 agents, reused in turn
    with tempfile.TemporaryDirectory() as tmp:
        bench = build(Path(tmp))
        before = None
        if a.before:
            (Path(tmp) / "before").mkdir()
            before = build(Path(tmp) / "before", a.before.resolve() / "clients" / "csharp")
        obs_file = Path(tmp) / "obs.f32"
        obs_file.write_bytes(obs.astype("<f4").tobytes())
        server, port = start_serve()
        w = a.warmup_steps
        builds = [("cs", bench), *((("before", before),) if before else ())]
        lone = [(name, partial(csharp_lone, exe, port, obs_file, a.rounds)) for name, exe in builds] + [
            ("raw", partial(python_raw_lone, port, obs, a.rounds)),
            ("b64", partial(python_raw_lone, port, obs, a.rounds, line=b64_line)),
            ("b64a", partial(python_raw_lone, port, obs, a.rounds, line=b64a_line)),
            ("json", partial(python_json_lone, port, obs, a.rounds)),
        ]
        many = [(name, partial(csharp_many, exe, port, obs_file, a.steps, w)) for name, exe in builds] + [
            ("raw", partial(python_raw_many, port, obs, a.steps, warmup=w)),
            ("b64", partial(python_raw_many, port, obs, a.steps, line=b64_line, warmup=w)),
            ("b64a", partial(python_raw_many, port, obs, a.steps, line=b64a_line, warmup=w)),
            ("json", partial(python_json_many, port, obs, a.steps, warmup=w)),
        ]
        r: dict = {f"{name}_{k}": [] for name, _ in lone for k in ("lone_p50", "lone_p99", "many", "many_cpu_ms")}
        try:
            python_raw_lone(port, obs, 200)  # warm the server up
            for turn in range(a.repeat):
                for name, fn in rotated(lone, turn):
                    p50, p99 = fn()
                    r[f"{name}_lone_p50"].append(p50)
                    r[f"{name}_lone_p99"].append(p99)
                for name, fn in rotated(many, turn):
                    rate, cpu_ms = fn()
                    r[f"{name}_many"].append(rate)
                    r[f"{name}_many_cpu_ms"].append(cpu_ms)
        finally:
            server.kill()
            server.wait()
    m = {k: float(np.median(v)) for k, v in r.items()}
    out = {
        "cpus": os.cpu_count(),
        "repeat": a.repeat,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "mono": subprocess.run(["mono", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "lone": {
            "rounds": a.rounds,
            "cs_p50_ms": round(m["cs_lone_p50"], 4),
            "cs_p99_ms": round(m["cs_lone_p99"], 4),
            "python_raw_p50_ms": round(m["raw_lone_p50"], 4),
            "python_raw_p99_ms": round(m["raw_lone_p99"], 4),
            "python_raw_b64_p50_ms": round(m["b64_lone_p50"], 4),
            "python_raw_b64_p99_ms": round(m["b64_lone_p99"], 4),
            "python_raw_b64_answers_p50_ms": round(m["b64a_lone_p50"], 4),
            "python_raw_b64_answers_p99_ms": round(m["b64a_lone_p99"], 4),
            "python_json_p50_ms": round(m["json_lone_p50"], 4),
            "python_json_p99_ms": round(m["json_lone_p99"], 4),
            "cs_p50_over_python_raw": round(m["cs_lone_p50"] / m["raw_lone_p50"], 3),
            "cs_p50_over_python_json": round(m["cs_lone_p50"] / m["json_lone_p50"], 3),
            "cs_p50_over_python_raw_per_repeat": paired(r["cs_lone_p50"], r["raw_lone_p50"]),
            "cs_p50_over_python_raw_b64_per_repeat": paired(r["cs_lone_p50"], r["b64_lone_p50"]),
            "cs_p50_over_python_raw_b64_answers_per_repeat": paired(r["cs_lone_p50"], r["b64a_lone_p50"]),
        },
        "agents_64": {
            "steps": a.steps,
            "warmup_steps": a.warmup_steps,
            "cs_agent_steps_per_s": round(m["cs_many"]),
            "python_raw_agent_steps_per_s": round(m["raw_many"]),
            "python_raw_b64_agent_steps_per_s": round(m["b64_many"]),
            "python_raw_b64_answers_agent_steps_per_s": round(m["b64a_many"]),
            "python_json_agent_steps_per_s": round(m["json_many"]),
            "cs_over_python_raw": round(m["cs_many"] / m["raw_many"], 3),
            "cs_over_python_raw_b64": round(m["cs_many"] / m["b64_many"], 3),
            "cs_over_python_raw_b64_answers": round(m["cs_many"] / m["b64a_many"], 3),
            "cs_over_python_json": round(m["cs_many"] / m["json_many"], 3),
            "client_cpu_ms_per_step": {
                "cs": round(m["cs_many_cpu_ms"], 3),
                "python_raw": round(m["raw_many_cpu_ms"], 3),
                "python_raw_b64": round(m["b64_many_cpu_ms"], 3),
                "python_raw_b64_answers": round(m["b64a_many_cpu_ms"], 3),
                "python_json": round(m["json_many_cpu_ms"], 3),
            },
            "cs_over_python_raw_per_repeat": paired(r["cs_many"], r["raw_many"]),
            "cs_over_python_raw_b64_per_repeat": paired(r["cs_many"], r["b64_many"]),
            "cs_over_python_raw_b64_answers_per_repeat": paired(r["cs_many"], r["b64a_many"]),
            "cs_over_python_json_per_repeat": paired(r["cs_many"], r["json_many"]),
        },
        "raw": {k: [round(x, 4) for x in v] for k, v in r.items()},
    }
    if before:
        out["before"] = {
            "dir": str(a.before),
            "lone_p50_ms": round(m["before_lone_p50"], 4),
            "lone_p99_ms": round(m["before_lone_p99"], 4),
            "lone_p50_over_python_raw_per_repeat": paired(r["before_lone_p50"], r["raw_lone_p50"]),
            "agent_steps_per_s": round(m["before_many"]),
            "over_python_raw": round(m["before_many"] / m["raw_many"], 3),
            "over_python_raw_per_repeat": paired(r["before_many"], r["raw_many"]),
            "over_python_raw_b64_per_repeat": paired(r["before_many"], r["b64_many"]),
            "over_python_raw_b64_answers_per_repeat": paired(r["before_many"], r["b64a_many"]),
            "cs_over_before_per_repeat": paired(r["cs_many"], r["before_many"]),
            "client_cpu_ms_per_step": round(m["before_many_cpu_ms"], 3),
        }
    if a.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
