#!/usr/bin/env python3
"""Stream mode's speed, measured as a controller sees it (a benchmark, not a test):

1. piped: N single-observation Huggy lines written at once; lines/s from the first answer to the last;
2. one at a time: send a line, wait for its answer, repeat; round-trip p50/p99;
3. 64 LSTM agents (examples/lstm), one line per agent id per step, memory kept per id by the
   stream; agent-steps/s;
1 and 3 also for the floor (issue 27): the simplest correct loop a Python server can be, in its own
process, driven by the same harness (FLOOR below: read what is waiting, orjson.loads each line, one
onnxruntime call on ML-Agents' own ONNX, orjson.dumps each answer, a dict of memories by id for the
LSTM; its session's threads spin or sleep between calls as the stream's: --spin), and the stream's
rate as a ratio of the floor's, both measured in this run; beside a bare
onnxruntime session on ML-Agents' own ONNX (batch 1 per call, and batch 64).

    python tools/bench_stream.py [--lines 50000] [--steps 300] [--inference path/to/inference.py] [--rounds N]
                                 [--before path/to/earlier/inference.py] [--spin on|off]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


FLOOR = r"""
import sys
import numpy as np
import onnxruntime as ort
import orjson
onnx, lstm, spin = sys.argv[1], sys.argv[2] == "lstm", sys.argv[3] == "on"
options = ort.SessionOptions()  # (the stream's session options: its threads spin or sleep between calls as the
stream's)
options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
session = ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
read, write, flush = sys.stdin.buffer.read1, sys.stdout.buffer.write, sys.stdout.buffer.flush
memories, zeros, pending = {}, np.zeros((1, 32), np.float32), b""
while True:
    data = read(1 << 16)
    if not data:
        break
    *lines, pending = (pending + data).split(b"\n")
    msgs = [orjson.loads(line) for line in lines if line]
    out = []
    while msgs:
        if lstm:  # one engine call per run of distinct ids (an id's next line needs its memory)
            seen = set()
            n = next((j for j, m in enumerate(msgs) if m["id"] in seen or seen.add(m["id"])), len(msgs))
            group, msgs = msgs[:n], msgs[n:]
            ids = [m["id"] for m in group]
            actions, memory = session.run(["deterministic_discrete_actions", "recurrent_out"], {
                "obs_0": np.array([m["obs"] for m in group], np.float32),
                "action_masks": np.ones((n, 4), np.float32),
                "recurrent_in": np.stack([memories.get(i, zeros) for i in ids])})
            for i, m in zip(ids, memory):
                memories[i] = m
            out += [orjson.dumps({"id": i, "discrete_actions": a, "memory": m[0]})
                    for i, a, m in zip(ids, actions.tolist(), memory.tolist())]
        else:
            group, msgs = msgs, []
            actions, = session.run(["deterministic_continuous_actions"],
                                   {"obs_0": np.array([m["obs"] for m in group], np.float32)})
            out += [orjson.dumps({"id": m["id"], "continuous_actions": a, "actions": a})
                    for m, a in zip(group, actions.tolist())]
    if out:
        write(b"\n".join(out) + b"\n")
        flush()
"""


SPIN = "on"  # --spin: the stream's and the floor's alike


def start(inference: str, model_dir: Path) -> subprocess.Popen:
    """The stream (inference.py --mode stream), or the floor when `inference` is a (floor script, onnx) pair."""
    if isinstance(inference, tuple):
        script, onnx = inference
        command = [sys.executable, script, str(onnx), "lstm" if model_dir.name == "lstm" else "huggy", SPIN]
    else:
        command = [sys.executable, inference, "--mode", "stream", "--model-dir", str(model_dir), "--spin", SPIN]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def cpu_seconds(proc: subprocess.Popen) -> float:
    """The process's CPU time so far, all its threads (Linux: /proc; nan elsewhere): on a shared machine, what the
    lines cost it whatever else ran meanwhile."""
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def piped(inference: str, lines: int) -> tuple:
    obs = np.random.RandomState(0).randn(lines, 59).astype(np.float32)
    payload = b"".join(json.dumps({"id": i, "obs": obs[i].tolist()}).encode() + b"\n" for i in range(lines))
    proc = start(inference, ROOT / "assets" / "ppo-Huggy-sample")
    proc.stdin.write(json.dumps({"id": -1, "obs": [0.0] * 59}).encode() + b"\n")  # warm up: the first answer
    proc.stdin.flush()
    reader = proc.stdout
    reader.readline()
    writer = threading.Thread(target=lambda: (proc.stdin.write(payload), proc.stdin.close()))
    writer.start()
    first = cpu = None
    for n in range(lines):
        line = reader.readline()
        if first is None:
            first, cpu = time.perf_counter(), cpu_seconds(proc)
        assert b"error" not in line, line
    seconds, cpu = time.perf_counter() - first, cpu_seconds(proc) - cpu
    writer.join()
    proc.wait(timeout=60)
    return (lines - 1) / seconds, cpu / (lines - 1) * 1e6


def one_at_a_time(inference: str, n: int) -> dict:
    proc = start(inference, ROOT / "assets" / "ppo-Huggy-sample")
    obs = np.random.RandomState(1).randn(n + 200, 59).astype(np.float32)
    times = []
    for i in range(n + 200):
        line = json.dumps({"id": "a", "obs": obs[i].tolist()}).encode() + b"\n"
        t0 = time.perf_counter()
        proc.stdin.write(line)
        proc.stdin.flush()
        answer = proc.stdout.readline()
        if i >= 200:  # after warm-up
            times.append((time.perf_counter() - t0) * 1e3)
        assert b"error" not in answer, answer
    proc.stdin.close()
    proc.wait(timeout=60)
    return {"p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99))}


def lstm_agents(inference: str, steps: int, agents: int = 64) -> tuple:
    proc = start(inference, ROOT / "examples" / "lstm")
    rng = np.random.RandomState(2)
    t0 = None
    for step in range(steps + 20):
        if step == 20:
            t0, cpu = time.perf_counter(), cpu_seconds(proc)
        obs = rng.randn(agents, 10).astype(np.float32)
        proc.stdin.write(
            b"".join(json.dumps({"id": a, "obs": obs[a].tolist()}).encode() + b"\n" for a in range(agents))
        )
        proc.stdin.flush()
        for _ in range(agents):
            answer = proc.stdout.readline()
            assert b"error" not in answer, answer
    seconds, cpu = time.perf_counter() - t0, cpu_seconds(proc) - cpu
    proc.stdin.close()
    proc.wait(timeout=60)
    return steps * agents / seconds, cpu / (steps * agents) * 1e6


def bare(onnx: Path, feeds, n: int) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs() if o.name.startswith("deterministic") or o.name == "recurrent_out"]
    for _ in range(50):
        session.run(names, feeds)
    t0 = time.perf_counter()
    for _ in range(n):
        session.run(names, feeds)
    return n * len(next(iter(feeds.values()))) / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=50_000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--inference", default=str(ROOT / "inference.py"))
    p.add_argument("--rounds", type=int, default=1, help="stream and floor alternated this many times (medians)")
    p.add_argument(
        "--before", help="another inference.py (an earlier checkout, which must know --spin), run in the same rounds"
    )
    p.add_argument(
        "--spin",
        choices=("on", "off"),
        default="on",
        help="onnxruntime's threads spin-wait between calls "
        "(the stream's --spin) in the stream and the floor alike (default on: the stream's own default)",
    )
    args = p.parse_args()
    global SPIN
    SPIN = args.spin
    huggy = ROOT / "assets" / "ppo-Huggy-sample" / "Huggy.onnx"
    if not huggy.exists():
        huggy = ROOT / "assets" / "ppo-Huggy-sample" / "Huggy" / "Huggy-600017.onnx"
    lstm = ROOT / "examples" / "lstm" / "Memory.onnx"
    x1 = {"obs_0": np.zeros((1, 59), np.float32)}
    lstm64 = {
        "obs_0": np.zeros((64, 10), np.float32),
        "action_masks": np.ones((64, 4), np.float32),
        "recurrent_in": np.zeros((64, 1, 32), np.float32),
    }
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(FLOOR)
    floor_huggy, floor_lstm = (f.name, huggy), (f.name, lstm)
    runs: dict = {"piped": [], "floor_piped": [], "lstm": [], "floor_lstm": []}
    runs.update({"before_piped": [], "before_lstm": []} if args.before else {})
    try:
        for _ in range(args.rounds):  # alternated, so that a busy spell on a shared machine hits both
            runs["piped"].append(piped(args.inference, args.lines))
            runs["floor_piped"].append(piped(floor_huggy, args.lines))
            if args.before:
                runs["before_piped"].append(piped(args.before, args.lines))
            runs["lstm"].append(lstm_agents(args.inference, args.steps))
            runs["floor_lstm"].append(lstm_agents(floor_lstm, args.steps))
            if args.before:
                runs["before_lstm"].append(lstm_agents(args.before, args.steps))
    finally:
        Path(f.name).unlink()
    med = {k: float(np.median([rate for rate, _ in v])) for k, v in runs.items()}
    cpu = {k: float(np.median([us for _, us in v])) for k, v in runs.items()}
    result = {
        "piped_lines_per_s": med["piped"],
        "floor_piped_lines_per_s": med["floor_piped"],
        "piped_vs_floor": round(med["piped"] / med["floor_piped"], 3),
        "lstm_64_agent_steps_per_s": med["lstm"],
        "floor_lstm_64_agent_steps_per_s": med["floor_lstm"],
        "lstm_vs_floor": round(med["lstm"] / med["floor_lstm"], 3),
        "cpu_us_per_line": {k: round(v, 2) for k, v in cpu.items()},  # (the server process's, all its threads)
        "cpu_piped_vs_floor": round(cpu["floor_piped"] / cpu["piped"], 3),
        "cpu_lstm_vs_floor": round(cpu["floor_lstm"] / cpu["lstm"], 3),
        **(
            {
                "before": {
                    "piped_vs_floor": round(med["before_piped"] / med["floor_piped"], 3),
                    "lstm_vs_floor": round(med["before_lstm"] / med["floor_lstm"], 3),
                    "cpu_piped_vs_floor": round(cpu["floor_piped"] / cpu["before_piped"], 3),
                    "cpu_lstm_vs_floor": round(cpu["floor_lstm"] / cpu["before_lstm"], 3),
                }
            }
            if args.before
            else {}
        ),
        "rounds": {k: [round(rate) for rate, _ in v] for k, v in runs.items()} if args.rounds > 1 else None,
        "round_ratios": {
            case: [round(a[0] / b[0], 3) for a, b in zip(runs[case], runs["floor_" + case.split("_")[-1]])]
            for case in runs
            if not case.startswith("floor")
        }
        if args.rounds > 1
        else None,
        "one_at_a_time": one_at_a_time(args.inference, 2000),
        "bare_onnxruntime_huggy_batch1_per_s": bare(huggy, x1, 5000),
        "bare_onnxruntime_lstm_batch64_agent_steps_per_s": bare(lstm, lstm64, 2000),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
