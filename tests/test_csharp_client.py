"""The C# client of serve (clients/csharp/, docs/serve.md "From a Unity build (C#)"): the library and its console tests
compiled with Mono's `mcs` (warnings as errors), then run against live `--mode serve` servers on examples/ policies
(in this process, on a thread; the one that goes away is a process of its own, killed). The inputs and the answers
`inference.load(...).act(...)` gives for them are computed here and written to a file; the C# program sends the inputs
through PolicyClient and compares (discrete equal, continuous and memories within 1e-6), in the culture LANG gives its
process (de-DE), in fr-FR and in the invariant culture. Also: error answers, bad answers from a scripted fake server,
timeouts, a server that goes away, float formatting, the strict JSON reader, docs/serve.md's code.

Without `mcs`/`mono` the tests skip on a developer's machine and fail where CI is set (.ci/run installs Mono)."""

import base64
import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    EXAMPLES,
    MCS_FLAGS,
    ROOT,
    child_env,
    compile_cs,
    local_server,
    mono_or_skip,
    mono_tools,
    serve_process,
)

import inference
from mlagents_inference.fronts.serve import serving

CLIENT = ROOT / "clients" / "csharp"
START_S = 120.0
CULTURES = ["process", "fr-FR", ""]  # the process runs with LC_ALL=de_DE.UTF-8: de-DE, then fr-FR, then invariant
ANSWER_LINE = re.compile(r"^PASS .* step \d+ (\(ActMany of \d+\) )?agent -?\d+")


def test_without_mono_a_developer_machine_skips_and_ci_fails():
    assert mono_tools({}, lambda name: None) == (
        "skip",
        "mcs and mono not found: the C# client needs Mono (Debian: apt-get install mono-mcs mono-runtime)",
    )
    assert mono_tools({"CI": "true"}, lambda name: None)[0] == "fail"
    assert mono_tools({"CI": "true"}, lambda name: None if name == "mono" else "/usr/bin/mcs") == (
        "fail",
        "mono not found: the C# client needs Mono (Debian: apt-get install mono-mcs mono-runtime)",
    )
    assert mono_tools({}, lambda name: "/usr/bin/" + name) == ("/usr/bin/mcs", "/usr/bin/mono")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The library (Runtime/*.cs) and the console tests, compiled once: {"mcs", "mono", "dll", "tests", "said"}."""
    mcs, mono = mono_or_skip()
    out = tmp_path_factory.mktemp("csharp")
    dll = out / "MLAgentsInference.Client.dll"
    said = compile_cs(mcs, dll, sorted((CLIENT / "Runtime").glob("*.cs")), "-target:library")
    said += compile_cs(mcs, out / "ClientTests.exe", [CLIENT / "Tests~" / "ClientTests.cs"], f"-r:{dll}")
    return {"mcs": mcs, "mono": mono, "dll": dll, "tests": out / "ClientTests.exe", "dir": out, "said": said}


def run_cs(built, *args, env=None, timeout=600, input=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [built["mono"], str(built["tests"]), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(LC_ALL="de_DE.UTF-8", LANG="de_DE.UTF-8"),
        input=input,
    )


def results(r: subprocess.CompletedProcess) -> tuple:
    """(PASS lines, FAIL lines) of the console tests; its last line must be its RESULT."""
    lines = r.stdout.splitlines()
    assert lines and lines[-1].startswith("RESULT "), (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    passed, failed = [x for x in lines if x.startswith("PASS ")], [x for x in lines if x.startswith("FAIL ")]
    assert lines[-1] == f"RESULT passed={len(passed)} failed={len(failed)}"
    return passed, failed


def test_the_library_and_tests_compile_without_warnings_and_reference_nothing_beyond_the_base_library(built):
    assert "warning" not in built["said"].lower(), built["said"]
    r = run_cs(built, "refs", built["dll"])
    assert r.returncode == 0, r.stderr
    refs = {line[4:] for line in r.stdout.splitlines() if line.startswith("REF ")}
    # the base class library only (HashSet<T> is System.Core's on Mono and .NET Framework): no Mono.Posix, no
    # UnityEngine
    assert refs and refs <= {"mscorlib", "System", "System.Core"}, refs


def test_mcs_refuses_a_warning_so_warnings_as_errors_holds(built, tmp_path):
    bad = tmp_path / "Warns.cs"
    bad.write_text("class Warns { static void Main() { int unused = 1; } }\n")
    r = subprocess.run(
        [built["mcs"], *MCS_FLAGS, f"-out:{tmp_path / 'w.exe'}", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode != 0 and "CS0219" in r.stdout + r.stderr


# -- live servers


def start_server(model: Path, listen: str = "127.0.0.1:0"):
    """A `--mode serve` subprocess and the address it says it listens on (HOST:PORT or unix:PATH)."""
    proc, address, _ = serve_process("--model-dir", model, "--listen", listen, timeout=START_S)
    return proc, address


def stop_server(proc) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)
    proc.stderr.close()


@contextlib.contextmanager
def live_server(model: Path, listen: str = "127.0.0.1:0"):
    """`--mode serve` on `model` in this process (conftest.local_server: fronts.serve.serving on a thread, the
    command line's options), where the server process itself is not what is tested: the address it listens on."""
    with local_server(model, listen) as (_, said):
        yield said["listen"]


LOCAL: dict = {}


def local(name: str):
    if name not in LOCAL:
        LOCAL[name] = inference.load(EXAMPLES / name)
    return LOCAL[name]


def f32(values) -> list:
    """float32 values as JSON numbers (repr of the float32 widened to a double: exact)."""
    return [float(v) for v in np.asarray(values, np.float32).ravel()]


def expectation(out: dict) -> dict:
    want = {}
    if "continuous_actions" in out:
        want["continuous"] = f32(out["continuous_actions"])
    if "discrete_actions" in out:
        want["discrete"] = [int(v) for v in np.asarray(out["discrete_actions"]).ravel()]
    if "memory" in out:
        want["memory"] = f32(out["memory"])
    return want


def random_mask(rng, branches: list) -> list:
    mask = []
    for size in branches:
        part = [int(rng.rand() < 0.6) for _ in range(size)]
        part[rng.randint(size)] = 1
        mask += part
    return mask


class Agents:
    """Builds one policy's steps: the inputs as the C# program reads them and what inference.load(...).act(...) answers,
    each agent's memory carried as the server carries it (per connection and id; zeros after a reset)."""

    def __init__(self, name: str, seed: int = 0):
        self.name, self.policy, self.rng = name, local(name), np.random.RandomState(seed)
        self.info = self.policy.info
        self.memory: dict = {}

    def observation(self, agent: int, pixels: str = "") -> tuple:
        """(the C# program's inputs, the local policy's observations) for one agent."""
        sent, arrays = [], []
        for k, spec in enumerate(self.info["inputs"]):
            shape = tuple(spec["shape"])
            if spec["kind"] == "visual":
                if pixels:
                    frame = self.rng.randint(0, 256, shape).astype(np.uint8)  # [C, H, W]
                    if pixels == "interleaved":  # as a texture holds it: [H, W, C], the bottom row first
                        hwc = frame.transpose(1, 2, 0)[::-1]
                        sent.append({"pixels": hwc.ravel().tolist(), "interleaved": [shape[1], shape[2], shape[0]]})
                    else:
                        sent.append({"pixels": frame.ravel().tolist()})
                    arrays.append(frame)  # the local policy scales a uint8 frame by 1/255 itself
                    continue
                value = self.rng.rand(*shape).astype(np.float32)
            elif spec["kind"] == "entities":
                value = self.rng.randn(self.rng.randint(0, shape[0] + 1), shape[1]).astype(np.float32)
                sent.append({"rows": [f32(row) for row in value]})
                arrays.append(value)
                continue
            else:
                value = self.rng.randn(*shape).astype(np.float32) * np.float32(2)
                if agent % 5 == 1:  # numbers whose text is unusual: tiny, huge, negative zero, a subnormal
                    value.ravel()[: min(4, value.size)] = np.array([1e-30, -0.0, 12345.678, 1e-40], np.float32)[
                        : min(4, value.size)
                    ]
            sent.append({"floats": f32(value)})
            arrays.append(value)
        return sent, arrays

    def step(
        self,
        agent: int,
        masks: bool = False,
        reset: bool = False,
        seed=None,
        pixels: str = "",
        error_mask: bool = False,
    ) -> dict:
        sent, arrays = self.observation(agent, pixels)
        line = {"agent": agent, "obs": sent}
        if reset:
            line["reset"] = True
            self.memory.pop(agent, None)
        branches = self.info["discrete_branches"]
        mask = None
        if error_mask:  # a first branch that allows nothing: the server answers with an error
            mask = [0] * branches[0] + [1] * (sum(branches) - branches[0])
            line["masks"], line["expect"] = mask, {"error": "allows no action"}
            return line
        if masks and branches:
            mask = random_mask(self.rng, branches)
            line["masks"] = mask
        if seed is not None:
            line["seed"] = seed
        observations = arrays[0] if len(arrays) == 1 else arrays
        out = self.policy.act(
            observations, action_masks=mask, deterministic=seed is None, seed=seed or 0, memory=self.memory.get(agent)
        )
        if self.info["memory_size"]:
            self.memory[agent] = out["memory"]
        line["expect"] = expectation(out)
        return line

    def cases(self, address: str, sequences: list) -> dict:
        keys = ("behavior", "inputs", "continuous_size", "discrete_branches", "memory_size")
        return {
            "address": address,
            "policy": self.name,
            "cultures": CULTURES,
            "sequences": sequences,
            "info": json.loads(json.dumps({k: self.info[k] for k in keys})),
        }


def cases_for(name: str, address: str) -> dict:
    """Per culture the C# program opens a fresh connection, so every culture replays the same steps from zero
    memories."""
    a = Agents(name)
    seq = []
    if name == "vector":
        seq.append({"name": "act", "call": "act", "steps": [[a.step(i) for i in (0, 1, -7)] for _ in range(3)]})
        seq.append({"name": "many", "call": "many", "steps": [[a.step(i) for i in range(16)] for _ in range(3)]})
    elif name == "discrete-multi":
        seq.append(
            {
                "name": "act",
                "call": "act",
                "steps": [[a.step(i, masks=True) for i in range(4)] + [a.step(9, error_mask=True)] for _ in range(2)],
            }
        )
        seq.append(
            {
                "name": "many",
                "call": "many",
                "steps": [[a.step(i, masks=i % 3 != 2, error_mask=i == 5) for i in range(12)] for _ in range(3)],
            }
        )
    elif name == "hybrid":
        seq.append(
            {
                "name": "act",
                "call": "act",
                "steps": [
                    [a.step(0, masks=True), a.step(1), a.step(2, masks=True, seed=3), a.step(3, seed=2**63 - 1)]
                    for _ in range(2)
                ],
            }
        )
        seq.append(
            {
                "name": "many",
                "call": "many",
                "steps": [
                    [a.step(i, masks=i % 2 == 0, seed=17 * i if i % 4 == 3 else None) for i in range(10)]
                    for _ in range(2)
                ],
            }
        )
    elif name == "lstm":  # memory across 20 steps for 8 agents, then half of them reset, then 3 steps more
        steps = [[a.step(i, masks=i % 2 == 1) for i in range(8)] for _ in range(20)]
        # agent 7's reset line is answered with an error: the server keeps its old memory, so the client sends the reset
        # again with its next line (which the case does not mark), and that line starts from zeros
        steps += [
            [a.step(i, reset=(k == 0 and i in (0, 1, 2, 3, 7)), error_mask=(k == 0 and i == 7)) for i in range(8)]
            for k in range(3)
        ]
        seq.append({"name": "memory", "call": "many", "steps": steps})
        seq.append({"name": "act", "call": "act", "steps": [[a.step(i) for i in (2, 6)] for _ in range(3)]})
    elif name == "visual-simple":
        seq.append(
            {
                "name": "frames",
                "call": "many",
                "steps": [
                    [a.step(0), a.step(1, pixels="chw"), a.step(2, pixels="interleaved"), a.step(3)] for _ in range(2)
                ],
            }
        )
        seq.append({"name": "act", "call": "act", "steps": [[a.step(4, pixels="chw"), a.step(5)]]})
    elif name == "attention":
        seq.append(
            {"name": "entities", "call": "many", "steps": [[a.step(i, masks=True) for i in range(6)] for _ in range(2)]}
        )
        seq.append({"name": "act", "call": "act", "steps": [[a.step(i) for i in range(3)]]})
    return a.cases(address, seq)


def answers_in(cases: dict) -> int:
    return len(cases["cultures"]) * sum(len(step) for s in cases["sequences"] for step in s["steps"])


# examples/hybrid is served on a Unix socket (ConnectUnix); the others on 127.0.0.1, port 0
POLICIES = ["vector", "discrete-multi", "hybrid", "lstm", "visual-simple", "attention"]


@pytest.mark.parametrize("name", POLICIES)
def test_answers_equal_the_local_policys_in_three_cultures(built, name, tmp_path):
    listen = f"unix:{tmp_path / 'p.sock'}" if name == "hybrid" else "127.0.0.1:0"
    with live_server(EXAMPLES / name, listen) as address:
        cases = cases_for(name, address)
        (tmp_path / "cases.json").write_text(json.dumps(cases))
        r = run_cs(built, "policy", tmp_path / "cases.json")
    passed, failed = results(r)
    assert not failed and r.returncode == 0, "\n".join(failed[:20])
    assert sum(bool(ANSWER_LINE.match(line)) for line in passed) == answers_in(cases), "not every answer was checked"
    assert sum("the thread's culture writes 1.5 as 1,5" in line for line in passed) == 2  # de-DE (from LANG) and fr-FR
    assert sum("the connection goes on after the caller's mistakes" in line for line in passed) == len(CULTURES)
    if name != "attention":  # (its last input is an entity buffer) +-infinity refused, naming the value's index
        assert sum("Infinity last: ArgumentException" in line for line in passed) == 2 * len(CULTURES)
    if name == "lstm":
        assert sum("step 20 (ActMany of 8) agent 7: answered with an error" in line for line in passed) == len(CULTURES)
    if name == "discrete-multi":  # the error answers were checked too, by Act and by ActMany
        assert sum(
            "ErrorAnswer: agent 9: action_masks: branch 0 allows no action" in line for line in passed
        ) == 2 * len(CULTURES)
        assert sum("the error names a failing agent in one line: agent 5:" in line for line in passed) == 3 * len(
            CULTURES
        )


def test_a_wrong_expectation_fails_the_console_tests(built, tmp_path):
    """The comparison can fail: one continuous value moved by 1e-5, one discrete action changed."""
    with live_server(EXAMPLES / "hybrid") as address:
        cases = cases_for("hybrid", address)
        cases["cultures"] = [""]
        want = cases["sequences"][0]["steps"][0][0]["expect"]
        want["continuous"][1] += 1e-5
        cases["sequences"][1]["steps"][1][3]["expect"]["discrete"][0] ^= 1
        (tmp_path / "cases.json").write_text(json.dumps(cases))
        r = run_cs(built, "policy", tmp_path / "cases.json")
    passed, failed = results(r)
    assert r.returncode == 1 and len(failed) == 2, failed
    assert "continuous[1]" in failed[0] and "> 1e-6" in failed[0] and "discrete[0]" in failed[1]


# -- a scripted fake server: bad answers, closed connections, silence

FAKE_INFO = {
    "behavior": "Fake",
    "inputs": [{"name": "obs_0", "kind": "vector", "shape": [2]}],
    "continuous_size": 2,
    "discrete_branches": [],
    "memory_size": 0,
}
FAKE = {  # scenario: (the answer to the info line, the answer to the act line); None: say nothing; "close": close
    "garbage": (None, b"not json\n"),
    "wrong_id": (None, b'{"id": 2, "continuous_actions": [0.5, 0.25]}\n'),
    "string_id": (None, b'{"id": "1", "continuous_actions": [0.5, 0.25]}\n'),
    "nan": (None, b'{"id": 1, "continuous_actions": [NaN, 0.25]}\n'),
    "short": (None, b'{"id": 1, "continuous_actions": [0.5]}\n'),
    "duplicate": (None, b'{"id": 1, "continuous_actions": [0.5, 0.25], "continuous_actions": [0, 0]}\n'),
    "trailing": (None, b'{"id": 1, "continuous_actions": [0.5, 0.25]} x\n'),
    "closes": (None, "close"),
    "truncated": (None, b'{"id": 1, "continuous_act'),
    "silent": (None, None),
    "error": (None, b'{"id": 1, "error": "obs: expected 2 numbers"}\n'),
    "extra_keys": (
        None,
        b'{"id": 1, "continuous_actions": [0.5, -0.25], "actions": [0.5, -0.25], "later": {"x": [1, 2.5e-3]}}\n',
    ),
    # a line is an answer up to its newline, however it arrives: white space before it, in pieces, or a newline inside
    "crlf": (None, b'{"id": 1, "continuous_actions": [0.5, 0.25], "actions": [0.5, 0.25]} \t\r\n'),
    "in_pieces": (None, b'{"id": 1, "continuous_actions": [0.5, 0.25], "actions": [0.5, 0.25], "version": "3"}\n'),
    "newline_inside": (None, b'{"id": 1,\n "continuous_actions": [0.5, 0.25]}\n'),
    # "actions" as long as the continuous actions' text but not a copy: read as JSON, a bad byte refused wherever it is
    "actions_other": (
        None,
        b'{"id": 1, "continuous_actions": [0.5, 0.25000000000001], "actions": [0.5, 0.25000000000002]}\n',
    ),
    "actions_bad_head": (
        None,
        b'{"id": 1, "continuous_actions": [0.5, 0.25000000000001], "actions": [0.x, 0.25000000000001]}\n',
    ),
    "actions_bad_tail": (
        None,
        b'{"id": 1, "continuous_actions": [0.5, 0.25000000000001], "actions": [0.5, 0.2500000000000x]}\n',
    ),
    "info_error": (b'{"id": null, "error": "unknown key \\"info\\""}\n', None),
    "info_silent": (None, None),
    # sizes past C#'s int: each a PolicyException naming its field, never cut to its low bits
    "info_continuous_past_int": (FAKE_INFO | {"continuous_size": (1 << 32) + 2}, None),
    "info_memory_past_int": (FAKE_INFO | {"memory_size": 1 << 31}, None),
    "info_shape_past_int": (
        FAKE_INFO | {"inputs": [{"name": "obs_0", "kind": "visual", "shape": [3, 1 << 15, 1 << 15]}]},
        None,
    ),
    "info_branches_past_int": (FAKE_INFO | {"discrete_branches": [(1 << 31) - 1, 2]}, None),
}


def fake_server(scenario: str, stop: threading.Event) -> tuple:
    """A listening socket on 127.0.0.1 and the thread that plays `scenario` to every connection."""
    info_answer, act_answer = FAKE[scenario]
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)

    def play():
        held = []
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            held.append(conn)
            reader = conn.makefile("rb")
            try:
                if reader.readline().strip() != b'{"info":true}':
                    continue
                if scenario == "info_silent":
                    continue
                info = info_answer if isinstance(info_answer, dict) else FAKE_INFO  # (a dict: an info of its own)
                if isinstance(info_answer, bytes):
                    conn.sendall(info_answer)
                else:
                    conn.sendall(json.dumps({"id": None, "info": info}).encode() + b"\n")
                if reader.readline() and act_answer is not None:
                    if scenario == "in_pieces":  # (a few bytes at a time)
                        for k in range(0, len(act_answer), 7):
                            conn.sendall(act_answer[k : k + 7])
                            time.sleep(0.002)
                    elif act_answer != "close":
                        conn.sendall(act_answer)
                    if act_answer == "close" or scenario == "truncated":
                        conn.shutdown(socket.SHUT_RDWR)  # (close() alone waits for the reader's reference to go)
            except OSError:
                pass
        for conn in held:
            conn.close()
        listener.close()

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_bad_answers_closed_connections_timeouts_and_refusals_raise_one_line_policy_exceptions(built, tmp_path):
    stop, threads, faults, stack = threading.Event(), [], [], contextlib.ExitStack()
    expected = {  # scenario: (PolicyFailure, a phrase of its message, extra)
        "garbage": ("BadAnswer", "bad answer from 127.0.0.1:", {}),
        "wrong_id": ("BadAnswer", "the answer is for id 2, the line was agent 1's", {}),
        "string_id": ("BadAnswer", 'the answer is for id "1"', {}),
        "nan": ("BadAnswer", "bad answer from", {}),
        "short": ("BadAnswer", '"continuous_actions" holds 1 values, the policy has 2', {}),
        "duplicate": ("BadAnswer", 'duplicate key "continuous_actions"', {}),
        "trailing": ("BadAnswer", "unexpected text after the value", {}),
        "closes": ("Closed", "closed the connection", {}),
        "truncated": ("Closed", "closed the connection", {}),
        "silent": ("Timeout", "within 300 ms", {"read_ms": 300, "within_s": 10}),
        "error": ("ErrorAnswer", "agent 1: obs: expected 2 numbers", {}),
        "extra_keys": ("none", "", {}),
        "crlf": ("none", "", {}),
        "in_pieces": ("none", "", {}),
        "newline_inside": ("BadAnswer", "expected a key at byte 9", {}),
        "actions_other": ("none", "", {}),
        "actions_bad_head": ("BadAnswer", "a digit must follow the decimal point", {}),
        "actions_bad_tail": ("BadAnswer", "expected ']'", {}),
        "info_error": ("BadAnswer", "is it python inference.py --mode serve?", {"at_connect": True}),
        "info_silent": ("Timeout", "within 300 ms", {"at_connect": True, "read_ms": 300, "within_s": 10}),
        "info_continuous_past_int": (
            "BadAnswer",
            '"continuous_size" is 4294967298, outside 0 to',
            {"at_connect": True},
        ),
        "info_memory_past_int": ("BadAnswer", '"memory_size" is 2147483648, outside 0 to', {"at_connect": True}),
        "info_shape_past_int": ("BadAnswer", 'input obs_0\'s "shape" holds more than 2147483647', {"at_connect": True}),
        "info_branches_past_int": ("BadAnswer", '"discrete_branches" add up to more than', {"at_connect": True}),
    }
    try:
        for scenario, (failure, says, extra) in expected.items():
            port, thread = fake_server(scenario, stop)
            threads.append(thread)
            faults.append(
                {
                    "name": scenario,
                    "address": f"127.0.0.1:{port}",
                    "failure": failure,
                    "says": says,
                    "read_ms": 10_000,
                    **extra,
                }
            )
        with socket.create_server(("127.0.0.1", 0)) as gone:
            refused = gone.getsockname()[1]
        faults.append(
            {
                "name": "refused",
                "address": f"127.0.0.1:{refused}",
                "failure": "Connect",
                "says": "nothing listens there",
                "at_connect": True,
            }
        )
        faults.append(
            {
                "name": "no_socket_file",
                "address": f"unix:{tmp_path / 'none.sock'}",
                "failure": "Connect",
                "says": "cannot connect to unix:",
                "at_connect": True,
            }
        )
        full = socket.create_server(("127.0.0.1", 0), backlog=0)  # a full accept queue: the next connect hangs
        fillers = []
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(full.getsockname())
            fillers.append(s)
        faults.append(
            {
                "name": "connect_timeout",
                "address": f"127.0.0.1:{full.getsockname()[1]}",
                "failure": "Connect",
                "says": "no connection within 500 ms",
                "connect_ms": 500,
                "within_s": 10,
                "at_connect": True,
            }
        )
        http = stack.enter_context(serving(inference.load(EXAMPLES / "vector"), http="127.0.0.1:0"))["http"]
        faults.append(  # serve's --http port given for --listen's: said so, not "expected '{'"
            {
                "name": "http_port",
                "address": http,
                "failure": "BadAnswer",
                "says": 'an HTTP server answered ("HTTP/1.',
                "at_connect": True,
            }
        )
        (tmp_path / "faults.json").write_text(json.dumps({"cases": faults}))
        r = run_cs(built, "faults", tmp_path / "faults.json", timeout=300)
    finally:
        stack.close()
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    for s in [full, *fillers]:
        s.close()
    passed, failed = results(r)
    assert not failed, "\n".join(failed)
    for fault in faults:  # each scenario checked (and a closed client refusing the next call where it closed)
        assert any(line.startswith(f"PASS {fault['name']}: ") for line in passed), fault["name"]
    closing = [
        f["name"] for f in faults if f["failure"] in ("BadAnswer", "Closed", "Timeout") and not f.get("at_connect")
    ]
    assert sum(": then the connection to" in line and "is closed" in line for line in passed) == len(closing)


def test_a_server_that_goes_away_raises_closed_then_connect_fails(built):
    proc, address = start_server(EXAMPLES / "vector")
    client = subprocess.Popen(
        [built["mono"], str(built["tests"]), "goaway", address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        seen = []
        while True:
            line = client.stdout.readline()
            assert line, (seen, client.stderr.read() if client.poll() is not None else "")
            seen.append(line)
            if line.strip() == "READY":
                break
        proc.send_signal(signal.SIGKILL)  # gone at once: no drain, no goodbye
        proc.wait(timeout=30)
        out, err = client.communicate("go\n", timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
        stop_server(proc)
    r = subprocess.CompletedProcess(client.args, client.returncode, "".join(seen) + out, err)
    passed, failed = results(r)
    assert not failed and r.returncode == 0, failed
    assert (
        len(passed) == 4 and sum(": Closed: " in line for line in passed) == 2 and "nothing listens there" in passed[-1]
    )


# -- float text, the strict reader


def test_floats_are_written_shortest_and_read_back_exactly_in_any_culture(built, tmp_path):
    rng = np.random.RandomState(5)
    bits = list(rng.randint(-(2**31), 2**31, 60_000, dtype=np.int64))  # any pattern...
    bits += list(rng.randint(0, 2**23, 2_000))  # ...subnormals
    bits += list(rng.randint(1, 255, 500) << 23)  # powers of two
    bits += [e << 23 | m for e in range(255) for m in (1, 2, 0x7FFFFE, 0x7FFFFF)]  # beside each power of two
    bits += list(np.arange(1, 1 << 15, dtype=np.float32).view(np.int32))  # integers
    specials = np.array(
        [0.1, 1 / 3, 1.0, -1.0, 123456789.0, 1e7, 1e-7, 3.4028235e38, 1.1754944e-38, 1e-45, 0.0, -0.0, 16777217.0],
        np.float32,
    )
    bits += list(specials.view(np.int32).astype(np.int64))
    # numpy's shortest "7.038531e-26" is 3e-17 inside its interval's end: read as a double first (as serve does), it is
    # the end exactly, and float32 rounding (half to even) takes the neighbour; the writer takes a digit more
    bits += [363742205]
    bits = [int(b) for b in bits if (b >> 23) & 0xFF != 0xFF]
    not_finite = [0x7F800000, -0x800000, 0x7FC00000, 0x7F800001, -1]  # +inf, -inf, NaNs (JSON has no text for them)
    (tmp_path / "bits.txt").write_text("\n".join(map(str, bits + not_finite)) + "\n")
    values = np.array(bits, np.int64).astype(np.int32).view(np.float32)
    for culture in ("de-DE", "fr-FR"):
        r = run_cs(built, "floats", tmp_path / "bits.txt", culture, timeout=300)
        assert r.returncode == 0, r.stderr
        texts = r.stdout.split("\n")[:-1]
        assert len(texts) == len(bits) + len(not_finite)
        assert texts[len(bits) :] == ["refused"] * len(not_finite)
        texts = texts[: len(bits)]
        assert all(
            re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?(e-?[0-9]+)?", t) for t in texts
        )  # JSON numbers, no decimal comma
        back = np.array([json.loads(t) for t in texts], np.float64).astype(np.float32)  # as the server reads them
        assert np.array_equal(back.view(np.int32), values.view(np.int32)), "a float did not read back bit for bit"
        # at most 9 significant digits, and as few as numpy's shortest float32 repr (Dragon4) but where that repr lies
        # exactly half an ulp away (read back by round-half-even only) or within 1e-15 of it (a reader going through a
        # double may land on the half): there the writer takes more digits, safely inside
        digits = [len(re.sub(r"e.*|[-.]", "", t).strip("0")) for t in texts]
        reprs = [np.format_float_scientific(v, unique=True, trim="-") for v in values]
        shortest = [len(re.sub(r"e.*|[-.]", "", r).strip("0")) for r in reprs]
        assert all(s <= d <= 9 for d, s in zip(digits, shortest))
        longer = [(r, v) for d, s, r, v in zip(digits, shortest, reprs, values) if d > s]
        assert len(longer) < 0.01 * len(texts)
        for r, v in longer:
            a = abs(v)
            halves = {Fraction(float(np.spacing(a))) / 2, Fraction(float(a - np.nextafter(a, np.float32(0)))) / 2}
            off = abs(Fraction(r) - Fraction(float(v)))
            assert min(abs(off - h) for h in halves) <= Fraction(1e-15) * Fraction(float(a)), (r, v)
    assert texts[-14:] == [
        "0.1",
        "0.33333334",
        "1",
        "-1",
        "123456790",
        "10000000",
        "1e-7",
        "3.4028235e38",
        "1.1754944e-38",
        "1e-45",
        "0",
        "-0.0",
        "16777216",
        "7.0385307e-26",
    ]


def observation_bits() -> np.ndarray:
    """130,831 finite float32 patterns as int64 bits: random bits, subnormals of either sign, powers of two and their
    neighbours, integers, halves and the edges (+-0, the least subnormal, the greatest and least normal, ...)."""
    rng = np.random.RandomState(43)
    parts = [
        rng.randint(-(2**31), 2**31, 120_000, dtype=np.int64),  # any pattern...
        rng.randint(0, 2**23, 4_000) | rng.randint(0, 2, 4_000) << 31,  # ...subnormals, either sign
        np.arange(1, 255) << 23,  # powers of two, and beside them
        np.array([e << 23 | m for e in range(255) for m in (1, 2, 0x7FFFFE, 0x7FFFFF)]),
        np.arange(-2000, 2000, dtype=np.float32).view(np.int32),  # integers
        (rng.randint(-(2**23), 2**23, 2_000).astype(np.float32) + np.float32(0.5)).view(np.int32),  # halves
        np.array(  # edges: +-0, the least subnormal, the greatest and least normal, integers past 2^24 and 1e9
            [
                0.0,
                -0.0,
                1e-45,
                -1e-45,
                3.4028235e38,
                -3.4028235e38,
                1.1754944e-38,
                1.1754942e-38,
                0.1,
                1 / 3,
                16777216,
                16777218,
                123456789,
                999999999,
                1e9,
                2**31,
                4294967296,
                1e15,
                1e16,
                1e-5,
                1e-6,
                1e-7,
                8388607.5,
            ],
            np.float32,
        ).view(np.int32),
    ]
    bits = np.concatenate([np.asarray(x, np.int64) for x in parts]).astype(np.int64)
    return bits[(bits >> 23) & 0xFF != 0xFF]  # finite only (ActMany refuses NaN and infinities before sending)


def sent_lines(built, tmp_path, values: np.ndarray, size: int, agents: int, *mode) -> list:
    """The lines the C# client's ActMany sends (`agents` a call, one vector input of `size`) for `values` (float32, a
    multiple of size x agents) to a scripted server that answers each with two zero actions (`mode`: "text" for
    BinaryObservations off)."""
    (tmp_path / "bits.txt").write_text("\n".join(map(str, values.view(np.int32).tolist())) + "\n")
    info = FAKE_INFO | {"inputs": [{"name": "obs_0", "kind": "vector", "shape": [size]}]}
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    lines: list = []

    def play():
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn, conn.makefile("rb") as reader:
                reader.readline()
                conn.sendall(json.dumps({"id": None, "info": info}).encode() + b"\n")
                while line := reader.readline():
                    lines.append(line)
                    conn.sendall(b'{"id": %d, "continuous_actions": [0, 0]}\n' % json.loads(line)["id"])

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    try:
        r = run_cs(built, "sends", f"127.0.0.1:{listener.getsockname()[1]}", tmp_path / "bits.txt", agents, *mode)
    finally:
        listener.close()
        thread.join(timeout=60)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(lines) * size == len(values)
    return lines


def test_observations_go_out_as_nine_digits_and_a_power_of_ten_and_read_back_bit_for_bit(built, tmp_path):
    """With BinaryObservations off, ActMany writes each observation float32 as 9 significant digits and a power of ten
    ("123456789e-9", no decimal
    point; integers below 1e9 whole), not the shortest text: as serve reads a line (a JSON number as a double, then
    float32), every float32 comes back bit for bit, and each text lies within 5.1e-9 relative of its float (half a
    unit of the 9th digit, and the double scaling's 2.3e-7 units: docs/performance.md); 8 digits would miss by up to
    5e-8, the shortest text by half an ulp."""
    bits = observation_bits()
    size, agents = 250, 16
    bits = np.concatenate([bits, np.zeros(-len(bits) % (size * agents), np.int64)])
    values = bits.astype(np.uint32).view(np.int32).view(np.float32)
    lines = sent_lines(built, tmp_path, values, size, agents, "text")
    texts = [
        t
        for line in lines
        for t in re.fullmatch(rb'\{"id":\d+,"obs":\[(.*)\],"answer_b64":true\}\n', line).group(1).split(b",")
    ]
    assert all(re.fullmatch(rb"-?(0|[1-9][0-9]*)(\.[0-9]+)?(e-?[0-9]+)?", t) for t in texts)  # JSON, no decimal comma
    whole = (values == np.trunc(values)) & (np.abs(values) < 1e9)  # integers below 1e9: whole
    assert all(re.fullmatch(rb"-?[1-9][0-9]{8}e-?[0-9]{1,2}", t) for t, w in zip(texts, whole.tolist()) if not w)
    assert all(re.fullmatch(rb"-?(0|[1-9][0-9]*)(\.0)?", t) for t, w in zip(texts, whole.tolist()) if w)
    back = np.array([v for line in lines for v in json.loads(line)["obs"]], np.float64).astype(np.float32)
    wrong = np.flatnonzero(back.view(np.int32) != values.view(np.int32))
    assert not len(wrong), [(texts[i], float(values[i])) for i in wrong[:10]]
    assert all(len(re.sub(rb"e.*|[-.]", b"", t).strip(b"0")) <= 9 for t in texts)
    bound = Fraction(51, 10**10)
    far = [
        (t, v)
        for t, v in zip(texts, values.tolist())
        if abs(Fraction(t.decode()) - Fraction(v)) > bound * abs(Fraction(v))
    ]
    assert not far, far[:10]
    text = dict(zip(values.view(np.int32).tolist(), texts))
    shown = [
        text[int(b)]
        for b in np.array([0.1, -0.0, 0.0, 1e-45, 3.4028235e38, 1e-7, 16777218, 1e9], np.float32).view(np.int32)
    ]
    assert shown == [
        b"100000001e-9",
        b"-0.0",
        b"0",
        b"140129846e-53",
        b"340282347e30",
        b"100000001e-15",
        b"16777218",
        b"100000000e1",
    ]


def test_observations_go_out_as_base64_of_their_float32_bytes_and_read_back_bit_for_bit(built, tmp_path):
    """By default (BinaryObservations) ActMany sends each observation as {"b64": "..."}, the base64 (RFC 4648, padded)
    of its little-endian float32 bytes: the 130,831 patterns of the nine-digit test, of every padding (rows of 59 and
    of 250 floats: 236 and 1,000 bytes), come back bit for bit, through serve's own reader too."""
    from mlagents_inference.core.spec import InputSpec
    from mlagents_inference.services.protocol import binary_input

    for size, agents in ((250, 16), (59, 64)):
        bits = observation_bits()
        bits = np.concatenate([bits, np.zeros(-len(bits) % (size * agents), np.int64)])
        values = bits.astype(np.uint32).view(np.int32).view(np.float32)
        lines = sent_lines(built, tmp_path, values, size, agents)
        texts = [
            re.fullmatch(rb'\{"id":\d+,"obs":\{"b64":"([A-Za-z0-9+/]*={0,2})"\},"answer_b64":true\}\n', line)
            for line in lines
        ]
        assert all(texts), lines[0][:200]
        back = np.frombuffer(b"".join(base64.b64decode(t.group(1), validate=True) for t in texts), "<f4")
        wrong = np.flatnonzero(back.view(np.int32) != values.view(np.int32))
        assert not len(wrong), [(float(back[i]), float(values[i])) for i in wrong[:10]]
        spec = InputSpec("obs_0", "vector", (size,))
        for k in (0, len(lines) // 2, len(lines) - 1):  # as serve reads them
            got = binary_input(spec, json.loads(lines[k])["obs"], '"obs"')
            assert np.array_equal(got.view(np.int32), values[k * size : (k + 1) * size].view(np.int32))


def test_the_base64_writer_pads_every_length_reads_back_bit_for_bit_and_refuses_nan(built, tmp_path):
    """The library's float32 base64 writer, on runs of 1 to 7 floats (every padding, and runs both whole and cut in
    the writer's and the reader's groups of three floats): the little-endian bytes' base64 (the bytes are taken from
    each float's bits by shifts, so this holds on a host of either byte order); a run holding NaN or an infinity is
    refused at that float. Each text also reads back bit for bit through the library's reader of answers (the program
    marks a text that does not)."""
    bits = observation_bits()[:4000]
    bits[[100, 2000, 3001]] = [0x7FC00000, 0x7F800000, -0x800000]  # NaN, +inf, -inf
    values = bits.astype(np.uint32).view(np.int32).view(np.float32)
    (tmp_path / "bits.txt").write_text("\n".join(map(str, values.view(np.int32).tolist())) + "\n")
    r = run_cs(built, "base64", tmp_path / "bits.txt")
    assert r.returncode == 0, r.stderr
    got = r.stdout.split("\n")[:-1]
    runs, start, count = [], 0, 1
    while start < len(values):
        runs.append(values[start : start + count])
        start, count = start + count, count % 7 + 1
    assert len(got) == len(runs)
    for run, text in zip(runs, got):
        bad = np.flatnonzero(~np.isfinite(run))
        if len(bad):
            assert text == f"refused {bad[0]}", (run, text)
        else:
            assert text == base64.b64encode(run.astype("<f4").tobytes()).decode(), (run, text)
    assert sum(t.startswith("refused") for t in got) == 3


def scripted(built, mode: str, info: dict, lines: list) -> subprocess.CompletedProcess:
    """The C# program in `mode` against a scripted server on 127.0.0.1: it answers the info line with `info`, then
    each line the client sends with the next of `lines` (bytes, without their newline), and stops when the client
    goes; the program's result."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)

    def play():
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn, conn.makefile("rb") as reader:
                reader.readline()
                conn.sendall(json.dumps({"id": None, "info": info}).encode() + b"\n")
                for line in lines:
                    if not reader.readline():
                        return
                    conn.sendall(line + b"\n")

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    try:
        return run_cs(built, mode, f"127.0.0.1:{listener.getsockname()[1]}", len(lines))
    finally:
        listener.close()
        thread.join(timeout=30)


def answered(built, texts: list, width: int = 250) -> np.ndarray:
    """A scripted server answers the C# program's Act calls with `texts` as continuous actions, `width` an answer;
    the float32s the client read from them (ContinuousActions), as int32 bits."""
    padded = texts + ["0"] * (-len(texts) % width)
    rows = [padded[i : i + width] for i in range(0, len(padded), width)]
    lines = [b'{"id": %d, "continuous_actions": [%s]}' % (k, ", ".join(row).encode()) for k, row in enumerate(rows)]
    r = scripted(built, "answers", FAKE_INFO | {"continuous_size": width}, lines)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = np.array([int(x) for line in r.stdout.split("\n")[:-1] for x in line.split()], np.int64).astype(np.int32)
    assert len(got) == len(padded), (len(got), len(padded))
    return got[: len(texts)]


@pytest.mark.parametrize("width", [249, 250, 251])
def test_answers_floats_given_as_base64_float32_bytes_read_back_bit_for_bit_and_bad_ones_are_refused(built, width):
    """An answer's continuous actions as {"b64": ...} (what serve writes to a line with "answer_b64": true, which the
    client asks for by default), in serve's compact form and spaced, `width` floats an answer (a whole number of the
    reader's groups of three floats, one more, two more): the 130,831 patterns read back bit for bit; a string that is
    not base64, a length that is not whole floats, NaN or infinite bits (in a group of three and after the last one),
    or another key beside "b64" is a BadAnswer naming it."""
    bits = observation_bits()
    bits = np.concatenate([bits, np.zeros(-len(bits) % width, np.int64)])
    values = bits.astype(np.uint32).view(np.int32).view(np.float32)
    rows = values.reshape(-1, width)
    forms = (b'{"id":%d,"continuous_actions":{"b64":"%s"}}', b'{"id": %d, "continuous_actions": {"b64": "%s"} }')
    lines = [forms[k % 2] % (k, base64.b64encode(row.astype("<f4").tobytes())) for k, row in enumerate(rows)]
    r = scripted(built, "answers", FAKE_INFO | {"continuous_size": width}, lines)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = np.array([int(x) for line in r.stdout.split("\n")[:-1] for x in line.split()], np.int64).astype(np.int32)
    assert np.array_equal(got, values.view(np.int32))
    if width != 250:
        return
    two = np.array([1.5, -0.0], "<f4").tobytes()
    four = np.array([1.5, -0.0, 2.0, 3.0], "<f4")
    bad = {
        b'{"b64": "%s"}' % base64.b64encode(two)[:-4]: "not a whole number of float32",
        b'{"b64": "%s"}' % base64.b64encode(two).replace(b"A", b"-"): "is not base64",
        b'{"b64":"%s"}' % base64.b64encode(four.tobytes()).replace(b"A", b"*", 1): "is not base64",
        b'{"b64":"%s"}' % base64.b64encode(four.tobytes()).replace(b"A", b"=", 1): "is not base64",
        b'{"b64": "%s"}' % base64.b64encode(two)[:-1]: "is not base64",
        b'{"b64": "%s"}' % base64.b64encode(np.array([1.5, np.nan], "<f4").tobytes()): "NaN or an infinity",
        b'{"b64": "%s"}' % base64.b64encode(np.array([np.inf, 1], "<f4").tobytes()): "NaN or an infinity",
        b'{"b64":"%s"}' % base64.b64encode(np.array([1, 2, -np.inf, 4], "<f4").tobytes()): "NaN or an infinity",
        b'{"b64":"%s"}' % base64.b64encode(np.array([1, 2, 3, np.nan], "<f4").tobytes()): "NaN or an infinity",
        b'{"b64": "%s", "dtype": "f4"}' % base64.b64encode(two): "and nothing else",
        b'{"b64":"%s","dtype":"f4"}' % base64.b64encode(two): "and nothing else",
        b'{"b64":"%s","b64":"%s"}' % (base64.b64encode(two), base64.b64encode(two)): "and nothing else",
        b'{"values": [1, 2]}': 'expected {"b64"',
    }
    assert b"-" in list(bad)[1] and b"*" in list(bad)[2]
    for value, words in bad.items():
        r = scripted(
            built, "answers", FAKE_INFO | {"continuous_size": 2}, [b'{"id": 0, "continuous_actions": %s}' % value]
        )
        assert r.returncode != 0 and "bad answer from" in r.stdout and words in r.stdout, (
            value,
            r.stdout[-1000:] + r.stderr[-1000:],
        )


def test_each_answers_model_and_version_are_read_as_their_text_says_and_a_wrong_model_is_refused(built):
    """The client takes an answer's "model" and "version" that repeat the expected (or the previous) text byte for byte
    without decoding them again: every other text is still read as JSON says (escapes, a longer version that starts
    with the previous one, other spacing), each answer keeps its own version, and an answer from another model, or a
    version beside the one asked for, is refused as before."""
    answers = [
        (b'"model": "Fake", "version": "3"', '"Fake" "3" "3"'),
        (b'"model": "Fake", "version": "3"', '"Fake" "3" "3"'),  # (the same text again)
        (b'"model":"Fake","version":"30"', '"Fake" "30" "30"'),  # (the previous version's text, and more)
        (b'"model": "F\\u0061ke", "version": "3"', '"Fake" "3" "3"'),  # (the model with an escape)
        (b'"version": "3\\u0031"', '"Fake" "31" "31"'),  # (no model: the connection's; an escaped version)
        (b'"model": "Fake"', '"Fake" null "31"'),  # (no version: none on the answer)
        (b'"model": "Fake", "version": "3"', '"Fake" "3" "3"'),
        # serve's compact form, whose keys the client expects in the previous answer's order: that order, another,
        # a key that extends the expected one, white space before a colon
        (b'"model":"Fake","version":"3"', '"Fake" "3" "3"'),
        (b'"model":"Fake","version":"3"', '"Fake" "3" "3"'),
        (b'"version":"4","model":"Fake"', '"Fake" "4" "4"'),
        (b'"versions":"5","model":"Fake"', '"Fake" null "4"'),
        (b'"model" :"Fake","version":"3"', '"Fake" "3" "3"'),
        (b'"model": "Fakes", "version": "3"', "BadAnswer: bad answer from 127.0.0.1:"),
    ]
    lines = [
        (
            b'{"id":%d,"continuous_actions":[0.5,0.25],%s}'
            if b'":"' in route
            else b'{"id": %d, "continuous_actions": [0.5, 0.25], %s}'
        )
        % (k, route)
        for k, (route, _) in enumerate(answers)
    ]
    r = scripted(built, "routes", FAKE_INFO, lines)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = r.stdout.split("\n")[:-1]
    assert got[:-1] == [want for _, want in answers[:-1]]
    assert got[-1].startswith(answers[-1][1]) and 'an answer from model "Fakes" to a line for model "Fake"' in got[-1]


def test_answers_floats_are_read_bit_for_bit_in_every_form_a_server_may_write(built, tmp_path):
    """A scripted server answers with float32 values as serve writes them (json.dumps of the double: up to 17
    digits), as numpy's shortest text (positional and scientific, "e+05") and with 9 significant digits; the client's
    ContinuousActions hold exactly those float32s, bit for bit."""
    rng = np.random.RandomState(11)
    bits = rng.randint(-(2**31), 2**31, 6_000, dtype=np.int64)
    bits = np.concatenate([bits, rng.randint(0, 2**23, 300), rng.randint(1, 255, 200) << 23])  # subnormals, 2^k
    specials = np.array([0.0, -0.0, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38, 1.1754944e-38, 0.1, 1.0], np.float32)
    bits = np.concatenate([bits, specials.view(np.int32)]).astype(np.int64)
    values = bits[(bits >> 23) & 0xFF != 0xFF].astype(np.int32).view(np.float32)
    forms = [
        lambda v: json.dumps(float(v)),
        lambda v: np.format_float_positional(v, unique=True, trim="-"),
        lambda v: np.format_float_scientific(v, unique=True, trim="-"),
        lambda v: f"{float(v):.8e}",
    ]
    texts = [form(v) for form in forms for v in values]
    got = answered(built, texts)
    want = np.tile(values.view(np.int32), len(forms))
    wrong = np.flatnonzero(got != want)
    assert not len(wrong), [(texts[i], int(got[i]), int(want[i])) for i in wrong[:10]]


def test_decimals_beside_a_rounding_midpoint_read_as_the_float32_on_their_side(built):
    """Texts of 20 significant digits, 1e-14 (relative) beyond or short of the midpoint between a float32 and its
    neighbour away from zero, read as the float32 on their side of it: the reader keeps 17 significant digits
    (within 5e-16 of the text); 12 would put many of the texts beyond the midpoint on its near side."""
    rng = np.random.RandomState(12)
    near = (rng.rand(3000) + 0.5).astype(np.float32) * (np.float32(10) ** rng.randint(-20, 21, 3000)).astype(np.float32)
    near *= np.where(rng.rand(3000) < 0.5, -1, 1).astype(np.float32)
    far = np.nextafter(near, near * np.float32(2))  # the neighbour away from zero
    texts, want = [], []
    with localcontext() as context:
        context.prec = 20
        for a, b in zip(near.tolist(), far.tolist()):
            mid = (Fraction(a) + Fraction(b)) / 2
            for side, expected in ((1, b), (-1, a)):
                off = mid * (1 + side * Fraction(1, 10**14))
                texts.append(str(+(Decimal(off.numerator) / Decimal(off.denominator))))
                want.append(expected)
    got = answered(built, texts)
    want = np.array(want, np.float32).view(np.int32)
    wrong = np.flatnonzero(got != want)
    assert not len(wrong), [(texts[i], int(got[i]), int(want[i])) for i in wrong[:10]]


JSON_CASES = [  # (text, valid, how the reader shows it)
    (
        '{"a": [1, -2.5e3, true, false, null, "x\\u00e9\\n"]}',
        True,
        '{"a":[long:1,double:-2500,true,false,null,string:"xé\\n"]}',
    ),
    ("[]", True, "[]"),
    ("{}", True, "{}"),
    (" 0 ", True, "long:0"),
    ("-0.0", True, "double:-0"),
    ("1E+2", True, "double:100"),
    ('"\\ud83d\\ude00"', True, 'string:"😀"'),
    ("9223372036854775807", True, "long:9223372036854775807"),
    ("9223372036854775808", True, "double:9.2233720368547758E+18"),
    ("[[[[1]]]]", True, "[[[[long:1]]]]"),
    ("NaN", False, None),
    ("Infinity", False, None),
    ("-Infinity", False, None),
    ("[1,]", False, None),
    ("{,}", False, None),
    ("01", False, None),
    ("1.", False, None),
    (".5", False, None),
    ("1e", False, None),
    ("+1", False, None),
    ("-", False, None),
    ('{"a":1,"a":2}', False, None),
    ('"\\ud83d"', False, None),
    ('"\\x"', False, None),
    ('"a\tb"', False, None),
    ("[1] 2", False, None),
    ("", False, None),
    ("[1", False, None),
    ('{"a" 1}', False, None),
    ("tru", False, None),
    ("// c\n1", False, None),
    ("1e400", False, None),
    ("[" * 70 + "]" * 70, False, None),
    ("'a'", False, None),
]


def test_the_strict_json_reader_takes_json_and_refuses_the_rest(built, tmp_path):
    (tmp_path / "json.json").write_text(
        json.dumps({"cases": [{"text": t, "valid": v, **({"shows": s} if s else {})} for t, v, s in JSON_CASES]})
    )
    r = run_cs(built, "json", tmp_path / "json.json")
    passed, failed = results(r)
    assert not failed and len(passed) == len(JSON_CASES), "\n".join(failed)


# -- docs/serve.md's C#, compiled and run


def serve_md_csharp() -> str:
    text = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    section = text.split("## From a Unity build (C#)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```csharp\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "docs/serve.md's C# section holds one csharp block"
    return blocks[0]


def test_the_csharp_in_docs_serve_md_compiles_and_drives_a_live_server(built, tmp_path):
    source = tmp_path / "ServeMdExample.cs"
    source.write_text(serve_md_csharp())
    exe = tmp_path / "ServeMdExample.exe"
    said = compile_cs(built["mcs"], exe, [source], f"-r:{built['dll']}")
    assert "warning" not in said.lower()
    shutil.copy(built["dll"], tmp_path)
    with live_server(EXAMPLES / "vector") as address:
        r = subprocess.run(
            [built["mono"], str(exe), address],
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(LC_ALL="de_DE.UTF-8"),
        )
    gone = subprocess.run(
        [built["mono"], str(exe), "127.0.0.1:1"], capture_output=True, text=True, timeout=120, env=child_env()
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0] == "Vector: 1 input(s), 2 continuous action(s), 0 discrete branch(es), memory 0", lines
    assert lines[-1] == "100 steps of 8 agents", lines
    assert gone.returncode == 1 and gone.stderr.startswith("policy server: cannot connect to 127.0.0.1:1"), gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1


def test_frames_reorders_a_texture_into_channel_first_rows_top_first(built, tmp_path):
    """Frames.ChannelFirst against numpy's transpose, through the policy test's own path (visual-simple above checks
    the policy's answers for such a frame); here the helper alone, on a non-square 3-channel frame."""
    source = tmp_path / "FramesCheck.cs"
    source.write_text("""using System; using MLAgentsInference;
class FramesCheck { static void Main() {
    var hwc = new byte[2 * 3 * 4]; for (int i = 0; i < hwc.Length; i++) hwc[i] = (byte)i;
    Console.WriteLine(string.Join(",", Frames.ChannelFirst(hwc, 2, 3, 4, true)));
    Console.WriteLine(string.Join(",", Frames.ChannelFirst(hwc, 2, 3, 4, false)));
} }
""")
    exe = tmp_path / "FramesCheck.exe"
    compile_cs(built["mcs"], exe, [source], f"-r:{built['dll']}")
    shutil.copy(built["dll"], tmp_path)
    r = subprocess.run([built["mono"], str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hwc = np.arange(24).reshape(2, 3, 4)
    flipped, straight = (list(map(int, line.split(","))) for line in r.stdout.splitlines())
    assert flipped == hwc[::-1].transpose(2, 0, 1).ravel().tolist()
    assert straight == hwc.transpose(2, 0, 1).ravel().tolist()


def test_the_unity_package_is_laid_out_as_unity_reads_it():
    package = json.loads((CLIENT / "package.json").read_text())
    assert re.fullmatch(r"[a-z0-9.-]+", package["name"]) and package["name"].startswith("com.")
    assert re.fullmatch(r"\d+\.\d+\.\d+", package["version"]) and re.fullmatch(r"\d{4}\.\d", package["unity"])
    for sample in package["samples"]:
        assert (CLIENT / sample["path"]).is_dir() and sample["path"].startswith("Samples~/")
    asmdefs = list((CLIENT / "Runtime").glob("*.asmdef"))
    assert len(asmdefs) == 1
    asmdef = json.loads(asmdefs[0].read_text())
    assert asmdef["name"] == asmdefs[0].stem and asmdef["references"] == [] and asmdef.get("noEngineReferences") is True
    # every file and folder Unity imports from the package (not Samples~ and Tests~: Unity skips names ending in ~) has
    # its .meta, each GUID unique
    imported = [
        p
        for p in CLIENT.rglob("*")
        if not any(part.endswith("~") for part in p.relative_to(CLIENT).parts) and p.suffix != ".meta"
    ]
    missing = [str(p.relative_to(CLIENT)) for p in imported if not p.with_name(p.name + ".meta").exists()]
    assert not missing, missing
    guids = [re.search(r"^guid: ([0-9a-f]{32})$", m.read_text(), re.M).group(1) for m in CLIENT.rglob("*.meta")]
    assert len(guids) == len(set(guids))


def test_the_ci_script_installs_mono_before_the_first_test_run():
    text = (ROOT / ".ci" / "run").read_text()
    install = text.find("apt-get install -y --no-install-recommends mono-mcs mono-runtime")
    assert 0 < install < text.find("python -m pytest"), "Mono is installed before the first pytest run"


def test_the_benchs_csharp_side_compiles_and_its_tool_parses_its_arguments(built, tmp_path):
    """tools/bench_csharp.py is a benchmark, not a test (its run takes minutes; its figures live in
    docs/performance.md):
    here its C# side compiles without warnings, and the tool answers --help."""
    said = compile_cs(built["mcs"], tmp_path / "Bench.exe", [CLIENT / "Tests~" / "Bench.cs"], f"-r:{built['dll']}")
    assert "warning" not in said.lower()
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_csharp.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert r.returncode == 0 and "--repeat" in r.stdout and "ActMany" in r.stdout, r.stderr


def test_the_docs_never_give_http_or_grpc_the_port_the_csharp_client_dials_by_default():
    """The C# client speaks --listen's JSON lines: an address its code or its sample dials by default is never one
    the docs give --http or --grpc (together they failed with "bad answer ... expected '{'")."""
    sources = [*CLIENT.rglob("*.cs"), *(ROOT / "docs").glob("*.md")]
    dialled = set()
    for path in sources:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".md":  # (the C# blocks of the docs)
            text = "\n".join(re.findall(r"```csharp\n(.*?)```", text, re.S))
        dialled |= {int(port) for port in re.findall(r'"(?:127\.0\.0\.1|localhost):(\d+)"', text)}
    assert 8000 in dialled, dialled  # (the sample's default, read: the check below has something to hold)
    pages = [ROOT / "README.md", CLIENT / "README.md", *(ROOT / "docs").glob("*.md"), *CLIENT.rglob("README.md")]
    given = {
        (path.name, int(port))
        for path in pages
        for port in re.findall(r"--(?:http|grpc)[ =](?:[\w.]+|\[[\w:]+\]):(\d+)", path.read_text(encoding="utf-8"))
    }
    assert given, "no --http address found in the docs"
    assert not {(name, port) for name, port in given if port in dialled}, (given, dialled)
