#!/usr/bin/env python3
"""How long ML-Agents' Academy.EnvironmentStep takes with ServedCommunicator in the trainer's place (a benchmark, not
a test; docs/performance.md and docs/unity.md): the console harness of tests/test_unity_communicator.py (ML-Agents'
own runtime, com.unity.ml-agents 3.0.0, under Mono) steps AGENTS agents on examples/vector, one decision per step,
with 20 ms of "rest of the frame" between steps, against:

- bare: no communicator and no server (agents Heuristic Only, their Heuristic doing nothing): ML-Agents' own step;
- live: a `--mode serve` process;
- silent: a server that accepts and never answers;
- live wait 2, silent wait 2: the same with ServedCommunicator's waitMs at 2 (the most the first GetActions of a step
  waits for that step's answer; 0, the default, elsewhere);
- late: the live server behind a proxy that holds each answer 30 ms;
- killed: the live server, killed after a third of the steps.

Per scenario, per round (ROUNDS rounds, the scenarios interleaved): each step's wall time in ms, and the
communicator's own part of it (the harness' TimedCommunicator: its calls on the main thread, the sensors' writes
included; how many of its steps took over 1 ms, and in how many of those a garbage collection ran); reported: p50,
p99 and max, and the step's p50 as a ratio to bare's p50 in the same round. The first 5
steps (Mono's JIT of ML-Agents' code) are left out. --before REV: ServedCommunicator as it was at that git revision
runs too, built with the same harness, its scenarios taking turns with today's in each round.

    flock /tmp/bench.lock python tools/bench_unity_communicator.py [--agents 16] [--steps 300] [--rounds 2]
        [--before REV] [--json]
"""

import argparse
import contextlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "csharp"
PINNED = CLIENT / "Tests~" / "MLAgentsRuntime"
HARNESS = CLIENT / "Tests~" / "UnityCommunicator"
MCS_FLAGS = ["-langversion:7.2", "-warnaserror", "-warn:4", "-nologo", "-optimize+"]
WARMUP = 5


class BuildError(Exception):
    pass


def build(mcs: str, out: Path, communicator: Path | None = None) -> dict:
    """Compiles, into `out`: ML-Agents' pinned runtime (its own code as it is, its warnings not ours) against the
    UnityEngine and Sentis stand-ins; the client library; ServedCommunicator (from `communicator`, a folder, when
    given: another version of it); the sample; the harness (ours: warnings as errors). {"exe": the harness, "said":
    what mcs said about our code}."""

    def mcs_run(dll, sources, *extra, ours=True):
        flags = MCS_FLAGS if ours else ["-nologo", "-nowarn:1591", "-langversion:7.2"]
        r = subprocess.run(
            [mcs, *flags, *extra, f"-out:{dll}", *map(str, sources)], capture_output=True, text=True, timeout=300
        )
        if r.returncode != 0 or not Path(dll).exists():
            raise BuildError(f"mcs failed on {Path(dll).name}:\n{(r.stdout + r.stderr)[-5000:]}")
        return (r.stdout + r.stderr).strip() if ours else ""

    out.mkdir(parents=True, exist_ok=True)
    protobuf = out / "Google.Protobuf_Packed.dll"
    shutil.copyfile(PINNED / "Plugins" / protobuf.name, protobuf)
    messages = out / "Unity.ML-Agents.CommunicatorObjects.dll"
    grpc = sorted((PINNED / "Runtime" / "Grpc").rglob("*.cs"))
    mcs_run(messages, grpc, "-target:library", f"-r:{protobuf}", ours=False)
    said = ""
    engine = out / "UnityEngine.dll"
    said += mcs_run(engine, [HARNESS / "UnityEngineStandIns.cs"], "-target:library")
    sentis = out / "Unity.Sentis.dll"
    said += mcs_run(sentis, [HARNESS / "SentisStandIns.cs"], "-target:library", f"-r:{engine}")
    mla = out / "Unity.ML-Agents.dll"  # the name ML-Agents' InternalsVisibleTo expects
    runtime = sorted(p for p in (PINNED / "Runtime").rglob("*.cs") if "Grpc" not in p.parts)
    refs = [f"-r:{p}" for p in (protobuf, messages, engine, sentis)] + ["-r:System.Runtime.Serialization"]
    mcs_run(mla, runtime, "-target:library", *refs, "-r:System.Xml", ours=False)
    client = out / "MLAgentsInference.Client.dll"
    said += mcs_run(client, sorted((CLIENT / "Runtime").glob("*.cs")), "-target:library")
    served = out / "MLAgentsInference.Communicator.dll"
    refs = [f"-r:{p}" for p in (client, mla, engine)]
    sources = sorted((communicator or CLIENT / "Runtime" / "Communicator").glob("*.cs"))
    said += mcs_run(served, sources, "-target:library", *refs)
    sample = out / "Sample.dll"
    sources = sorted((CLIENT / "Samples~" / "ServedPolicy").glob("*.cs"))
    said += mcs_run(sample, sources, "-target:library", *refs, f"-r:{served}")
    exe = out / "Harness.exe"
    said += mcs_run(exe, [HARNESS / "Harness.cs"], *refs, f"-r:{served}", f"-r:{sample}")
    return {"exe": exe, "said": said}


def serve(model: Path):
    """A `--mode serve` process on 127.0.0.1:0 and the address it listens on."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "serve", "--model-dir", str(model)]
        + ["--listen", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    text, deadline = b"", time.monotonic() + 120
    while not (found := re.search(rb"listening on (\S+)", text)):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("serve did not start: " + text.decode(errors="replace")[-2000:])
        if select.select([proc.stderr], [], [], 1.0)[0]:
            text += os.read(proc.stderr.fileno(), 4096)
    return proc, found.group(1).decode()


@contextlib.contextmanager
def fake(upstream=None, delay_s=0.0):
    """A server on 127.0.0.1:0 that accepts and never answers (upstream None), or a proxy to `upstream` that holds
    each answer `delay_s` seconds."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stop, held = threading.Event(), []

    def pump(src, dst, delay):
        with contextlib.suppress(OSError):
            while not stop.is_set() and (data := src.recv(1 << 16)):
                time.sleep(delay)
                dst.sendall(data)

    def accept():
        while not stop.is_set():
            try:
                conn = listener.accept()[0]
            except OSError:
                continue
            held.append(conn)
            if upstream:
                host, port = upstream.rsplit(":", 1)
                up = socket.create_connection((host, int(port)))
                held.append(up)
                threading.Thread(target=pump, args=(conn, up, 0), daemon=True).start()
                threading.Thread(target=pump, args=(up, conn, delay_s), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        listener.close()


def run(mono, exe, head, agents, steps, out: Path, wait_ms: int = 0) -> dict:
    """{"step": each EnvironmentStep's ms, "comm": the communicator's own calls' ms in each (absent for bare)}."""
    args = ["v8", 2, "-", 0, agents, steps, 0, 0, wait_ms, out]
    r = subprocess.run([mono, str(exe), *head, *map(str, args)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    got: dict = {"step": [], "comm": [], "gc": []}
    for line in out.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind in ("STEP", "COMM"):
            got[kind.lower()].append(float(rest.split()[1]))
        if kind == "COMM":
            got["gc"].append(int(rest.split()[4]))
    return got


def scenarios(mono, exe, agents, steps, out: Path) -> dict:
    """One build's scenarios, one server of its own (killed in the last)."""
    proc, address = serve(ROOT / "examples" / "vector")
    times = {}
    try:
        times["live"] = run(mono, exe, ["--mlagents-port", "1", address], agents, steps, out)
        times["live wait 2"] = run(mono, exe, ["--mlagents-port", "1", address], agents, steps, out, wait_ms=2)
        with fake() as silent:
            times["silent"] = run(mono, exe, ["--mlagents-port", "1", silent], agents, steps, out)
            times["silent wait 2"] = run(mono, exe, ["--mlagents-port", "1", silent], agents, steps, out, wait_ms=2)
        with fake(address, 0.03) as late:
            times["late"] = run(mono, exe, ["--mlagents-port", "1", late], agents, steps, out)
        # the kill lands about a third of the way: steps take ~20 ms of rest plus their own time
        timer = threading.Timer(steps * 0.022 / 3 + 1.0, proc.kill)
        timer.start()
        times["killed"] = run(mono, exe, ["--mlagents-port", "1", address], agents, steps, out)
        timer.cancel()
    finally:
        proc.kill()
        proc.wait()
    return times


def stats(ms: list, bare_p50: float | None = None) -> dict:
    ms = np.array(ms[WARMUP:])
    row = {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)), "max": float(ms.max())}
    if bare_p50:
        row["x_bare"] = row["p50"] / bare_p50
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--before", metavar="REV", help="also run ServedCommunicator as it was at this git revision")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    mcs, mono = shutil.which("mcs"), shutil.which("mono")
    if not (mcs and mono):
        sys.exit("error: needs Mono's mcs and mono (Debian: apt-get install mono-mcs mono-runtime)")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-unity-") as tmp:
        builds = {"": build(mcs, Path(tmp) / "now")["exe"]}
        if a.before:
            old = Path(tmp) / "before-src"
            old.mkdir()
            path = "clients/csharp/Runtime/Communicator/ServedCommunicator.cs"
            shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{a.before}:{path}"], capture_output=True)
            if shown.returncode != 0:
                sys.exit(f"error: git show {a.before}:{path}: {shown.stderr.decode(errors='replace').strip()}")
            (old / "ServedCommunicator.cs").write_bytes(shown.stdout)
            builds[f" ({a.before})"] = build(mcs, Path(tmp) / "before", communicator=old)["exe"]
        out = Path(tmp) / "steps.txt"
        for _ in range(a.rounds):
            bare = run(mono, builds[""], ["--bare", "-", "-"], a.agents, a.steps, out)
            bare_p50 = stats(bare["step"])["p50"]
            results.setdefault("bare", []).append({"step": stats(bare["step"], bare_p50)})
            for suffix, exe in builds.items():  # the builds take turns within each round
                for name, got in scenarios(mono, exe, a.agents, a.steps, out).items():
                    row = {"step": stats(got["step"], bare_p50), "comm": stats(got["comm"])}
                    # the communicator's slow steps (over 1 ms), and how many of them had a garbage collection inside
                    slow = [gc for ms, gc in zip(got["comm"][WARMUP:], got["gc"][WARMUP:]) if ms > 1.0]
                    row["comm"].update(over_1ms=len(slow), over_1ms_with_gc=sum(1 for gc in slow if gc))
                    results.setdefault(name + suffix, []).append(row)
    if a.json:
        print(json.dumps({"agents": a.agents, "steps": a.steps, "results": results}, indent=2))
        return
    print(f"Academy.EnvironmentStep, {a.agents} agents, examples/vector, {a.steps} steps (first {WARMUP} left out);")
    print("comm: the communicator's own calls on the main thread in each step (the sensors' writes included)")
    head = f"{'scenario':26} {'round':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p50/bare':>9}"
    print(head + f" {'comm p50':>9} {'comm p99':>9} {'comm max':>9} {'>1ms':>5} {'w/ GC':>5}")
    for name, rows in results.items():
        for i, r in enumerate(rows):
            step, comm = r["step"], r.get("comm")
            line = f"{name:26} {i + 1:5d} {step['p50']:8.3f} {step['p99']:8.3f} {step['max']:8.3f}"
            line += f" {step['x_bare']:9.2f}"
            if comm:
                line += f" {comm['p50']:9.3f} {comm['p99']:9.3f} {comm['max']:9.3f}"
                line += f" {comm['over_1ms']:5d} {comm['over_1ms_with_gc']:5d}"
            print(line)


if __name__ == "__main__":
    main()
