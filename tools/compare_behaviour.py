#!/usr/bin/env python3
"""Prove that two checkouts behave the same: the same command lines through `python DIR/inference.py ...` in each
give the same exit codes, stdout and stderr bytes, output files, stream answers and serve answers.

    python tools/compare_behaviour.py --old /path/to/old-checkout --new .            # the whole battery
    python tools/compare_behaviour.py --old ../old --new . --filter stream/ --jobs 2  # a subset
    python tools/compare_behaviour.py --list                                         # the battery, one line each

Every run gets a fresh temporary folder as its working directory, the same environment (PYTHONHASHSEED=0,
HF_HUB_OFFLINE=1, an empty HF_HOME, no HUGGY_MODEL_DIR) and this interpreter. Before comparing, each tree's own path,
the run's folder, the harness's fixture folder and a server's port are replaced with placeholders (<TREE>, <CWD>,
<FIX>, <PORT>). Whatever still varies from run to run (timings, memory figures, ...) is found, not assumed: when the
first old run and the new run differ, the old tree is run again, and only the numbers (or lines) that differ between
the old runs are masked; the report lists them. The benchmark mode's numbers are always masked (its lines and exit code
are compared). Exit status: 0 when every case is the same, 1 when any differs, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import difflib
import hashlib
import http.client
import io
import json
import math
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

TREE = "{T}"  # replaced by the checkout under test in every argument
FIX = "{F}"  # replaced by the harness's fixture folder
VECTOR_SHA256 = "439a33755624e641a913f96aaf92e42bb534800cc5b65b8de828fdb5ca25ad6c"  # examples/vector's default .pt
RUN_TIMEOUT_S = 300.0
SERVE_START_S = 120.0
SOCKET_TIMEOUT_S = 60.0
MAX_OLD_RUNS = 3
DIFF_LINES = 40
# a number not glued to a word ("p50", "obs_0" are words); "2,292" (thousands grouped) is one number
NUMBER = re.compile(rb"(?<![A-Za-z0-9_.])-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
NUMBER_HOLE = b"\x00"
ANNOUNCE = re.compile(rb"\[serve\] (listening|http) on (\S+)\n")
EVERY_LINE = "^"


# ----------------------------------------------------------------------------------------------------------------------
# The battery
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One command line: its arguments after inference.py ({T}: the tree, {F}: the fixtures), what goes to stdin
    (stream), the socket conversations and HTTP requests (serve), and the exit code the battery expects, if any."""

    name: str
    args: tuple
    stdin: Optional[bytes] = None
    conversations: Optional[tuple] = None  # serve: ((line, ...), ...), one connection each, in turn
    http: tuple = ()  # serve: ((method, path, body), ...)
    timing: Optional[str] = None  # a regex: the lines whose numbers are timings, always masked (benchmark: EVERY_LINE)
    expect_rc: Optional[int] = None
    timeout: float = RUN_TIMEOUT_S

    @property
    def group(self) -> str:
        return self.name.split("/")[0]

    def shown(self) -> str:
        words = ["python", f"{TREE}/inference.py", *self.args]
        text = " ".join(w if w and not re.search(r"[\s;'\"*?$&|<>()]", w) else repr(w) for w in words)
        text = text.replace(TREE, "TREE").replace(FIX, "FIX")
        if self.stdin is not None:
            text += f"  < {len(self.stdin.splitlines())} stdin lines"
        if self.conversations is not None:
            lines = sum(map(len, self.conversations))
            text += f"  [serve: {lines} socket lines, {len(self.http)} HTTP requests, SIGTERM]"
        return text


# input shapes, discrete branches and memory size of the examples the battery runs on ("": the bundled Huggy sample)
KINDS = {
    "vector": ([(8,)], [], 0),
    "discrete-multi": ([(20,), (6,)], [3, 2, 5], 0),
    "hybrid": ([(12,)], [2], 0),
    "lstm": ([(10,)], [4], 32),
    "attention": ([(6, 5), (8,)], [3, 3], 0),
    "visual-simple": ([(3, 36, 36), (5,)], [], 0),
    "sac-continuous": ([(16,)], [], 0),
    "goal-hyper": ([(12,), (3,)], [5], 0),
    "poca-discrete": ([(14,)], [3, 3, 3], 0),
    "": ([(59,)], [], 0),
}
INTERFACES = f"{TREE}/examples/onnx-interfaces"


def model(kind: str) -> tuple:
    return ("--model-dir", f"{TREE}/examples/{kind}") if kind else ()


def label(kind: str) -> str:
    return kind or "bundled"


def _nested(flat: list, shape: tuple) -> list:
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0]
    return [_nested(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def observation(shape: tuple, k: int, fill: Optional[float] = None) -> list:
    """A fixed observation of `shape` (images in [0, 1], vectors in [-1, 1]); `fill`: every value."""
    image = len(shape) == 3
    scale, shift = (22, 0) if image else (11, 1)
    flat = [
        fill if fill is not None else round(((i * 7 + k * 13) % 23) / scale - shift, 4) for i in range(math.prod(shape))
    ]
    return _nested(flat, shape)


def inputs(kind: str, k: int, rows: int = 0, fill: Optional[float] = None) -> dict:
    """A stream line's observation keys: "obs" for a one-input policy, else "obs_0" ... ; `rows`: a batch."""
    shapes = KINDS[kind][0]
    keys = ["obs"] if len(shapes) == 1 else [f"obs_{n}" for n in range(len(shapes))]
    one = {key: observation(shape, k, fill if n == 0 else None) for n, (key, shape) in enumerate(zip(keys, shapes))}
    if rows:
        return {key: [observation(shape, k + r) for r in range(rows)] for key, shape in zip(keys, shapes)}
    return one


def line(obj) -> bytes:
    return json.dumps(obj).encode()


def stream_lines(kind: str) -> list:
    """Good lines (plain, a batch, sampled, masked, LSTM memory carried and reset) and bad ones, then a good one."""
    shapes, branches, memory = KINDS[kind]
    lines = [
        line({"id": 1, **inputs(kind, 0)}),
        line({"id": 2, **inputs(kind, 1)}),
        line({"id": "two-rows", **inputs(kind, 2, rows=2)}),
        line({"id": 3, **inputs(kind, 3), "stochastic": True, "seed": 3}),
        line({"id": 4, **inputs(kind, 4), "stochastic": True}),
    ]
    if branches:
        mask = [v for size in branches for v in [0] + [1] * (size - 1)]
        lines += [
            line({"id": 5, **inputs(kind, 5), "action_masks": mask}),
            line({"id": 6, **inputs(kind, 5), "action_masks": [1]}),
        ]
    if memory:
        lines += [
            line({"id": "m", **inputs(kind, 6), "reset": True}),
            line({"id": "m", **inputs(kind, 7)}),
            line({"id": "m", **inputs(kind, 8)}),
            line({"id": "m", **inputs(kind, 8), "reset": True}),
            line({"id": "n", **inputs(kind, 6), "memory": [0.25] * memory}),
            line({"id": "n", **inputs(kind, 6), "memory": [1.0]}),
        ]
    if len(shapes[0]) == 2:  # an entity buffer: fewer entities than its size
        lines.append(line({"id": "ragged", **inputs(kind, 9), "obs_0": observation((2, shapes[0][1]), 9)}))
    lines += [
        b"not json",
        b"",
        b"[]",
        b'{"info": true}',
        b'{"id": 7}',
        line({"id": 8, "obs": [1, 2]}),
        line({"id": 9, **inputs(kind, 0, fill=float("nan"))}),
        line({"id": [1], **inputs(kind, 0)}),
        line({"id": 10, **inputs(kind, 0), "colour": "red"}),
        line({"id": 11, **inputs(kind, 0), "stochastic": True, "seed": -1}),
        line({"id": "x" * 300, **inputs(kind, 0)}),
        line({"id": 12, **inputs(kind, 10)}),
    ]
    return lines


def stdin_of(lines: list) -> bytes:
    return b"".join(text + b"\n" for text in lines)


def c(name: str, mode: str, *args: str, **kwargs) -> Case:
    """A case running --mode `mode` (mode "": no --mode at all)."""
    return Case(name, (("--mode", mode) if mode else ()) + args, **kwargs)


def kinds_for(*names: str) -> tuple:
    return tuple(k for k in KINDS if label(k) in names)


ALL_KINDS = tuple(KINDS)


def per_example_cases() -> Iterator[Case]:
    """The modes on the examples, --json (human lines are in human_cases)."""
    every_mode = {  # mode: (the kinds it runs on, its options)
        "info": (kinds_for("vector", "discrete-multi", "lstm", "attention", "visual-simple", "bundled"), ()),
        "action": (ALL_KINDS, ()),
        "sample": (
            kinds_for(
                "vector", "discrete-multi", "hybrid", "lstm", "attention", "visual-simple", "sac-continuous", "bundled"
            ),
            ("--seed", "1"),
        ),
        "batch": (
            kinds_for("vector", "discrete-multi", "hybrid", "lstm", "attention", "visual-simple"),
            ("--batch", "8", "--seed", "2"),
        ),
        "onnx-compare": (
            kinds_for("discrete-multi", "hybrid", "attention", "visual-simple", "bundled"),
            ("--batch", "16"),
        ),
        "export-onnx": (
            kinds_for("discrete-multi", "hybrid", "lstm", "attention", "visual-simple", "bundled"),
            ("--output", "rebuilt.onnx"),
        ),
        "fingerprint": (
            kinds_for("vector", "hybrid", "lstm", "attention", "bundled"),
            ("--steps", "16", "--seed", "7"),
        ),
        "stats": (kinds_for("lstm", "attention", "bundled"), ("--rollouts", "2", "--steps", "8")),
        "precision": (
            kinds_for("discrete-multi", "lstm", "attention", "visual-simple", "bundled"),
            ("--samples", "16"),
        ),
    }
    for mode, (kinds, extra) in every_mode.items():
        for kind in kinds:
            yield c(f"{mode}/{label(kind)}/json", mode, *model(kind), *extra, "--json")
    for kind in ALL_KINDS:
        yield c(f"stream/{label(kind)}", "stream", *model(kind), stdin=stdin_of(stream_lines(kind)))


def human_cases() -> Iterator[Case]:
    """Text output, every mode at least once."""
    v, lstm, hybrid = model("vector"), model("lstm"), model("hybrid")
    yield c("info/bundled/no-arguments", "")
    yield Case("help", ("--help",))
    yield Case("version", ("--version",))
    yield c("info/vector/text", "info", *v)
    yield c("info/lstm/text", "info", *lstm)
    yield c("checkpoints/vector/text", "checkpoints", *v)
    yield c("checkpoints/lstm/text", "checkpoints", *lstm)
    yield c("checkpoints/vector/json", "checkpoints", *v, "--json")
    yield c("checkpoints/lstm/json", "checkpoints", *lstm, "--json")
    yield c("checkpoints/hybrid/json", "checkpoints", *hybrid, "--json")
    yield c("checkpoints/bundled/json", "checkpoints", "--json")
    yield c("sample/hybrid/text", "sample", *hybrid, "--obs", "random", "--seed", "1")
    yield c("sample/bundled/text", "sample", "--seed", "0")
    yield c("batch/vector/text", "batch", *v, "--batch", "4")
    yield c("precision/hybrid/text", "precision", *hybrid, "--samples", "10")
    yield c("onnx-compare/lstm/text", "onnx-compare", *lstm, "--batch", "64", "--seed", "7", "--steps", "8")
    yield c("export-onnx/visual-resnet/text", "export-onnx", *model("visual-resnet"), "--output", "resnet.onnx")
    yield c("fingerprint/hybrid/text", "fingerprint", *hybrid, "--steps", "8")
    yield c("fingerprint/bundled/text", "fingerprint", "--seed", "0")
    yield c("stats/visual-simple/text", "stats", *model("visual-simple"), "--rollouts", "2", "--steps", "6")


def input_cases() -> Iterator[Case]:
    """--obs words, numbers, per-input values and files; --mask, --memory, seeds, --expect-sha256, --goal-input."""
    v, dm, lstm = model("vector"), model("discrete-multi"), model("lstm")
    dm_mask = "1,0,1,1,1,0,0,1,1,1"
    yield c("action/vector/zeros", "action", *v, "--obs", "zeros")
    yield c("action/hybrid/ones-mask", "action", *model("hybrid"), "--obs", "ones", "--mask", "1,0")
    yield c("action/sac-continuous/ones_neg", "action", *model("sac-continuous"), "--obs", "ones_neg")
    yield c("action/discrete-multi/boundary", "action", *dm, "--obs", "boundary", "--json")
    yield c("action/poca-discrete/number", "action", *model("poca-discrete"), "--obs", "0.5", "--json")
    yield c("action/discrete-multi/per-input-mask", "action", *dm, "--obs", "obs_0=zeros;obs_1=0.5", "--mask", dm_mask)
    yield c("action/vector/list", "action", *v, "--obs", "-2.0,-1.5,-1,-0.5,0,0.5,1,2.5", "--json")
    yield c("action/vector/npy", "action", *v, "--obs", f"{FIX}/vec8_one.npy", "--json")
    yield c(
        "action/visual-simple/png-npy",
        "action",
        *model("visual-simple"),
        "--obs",
        f"obs_0={FIX}/cam.png;obs_1={FIX}/vec5.npy",
    )
    yield c("action/lstm/mask-memory", "action", *lstm, "--obs", "zeros", "--mask", "1,1,0,1", "--memory", "zeros")
    yield c("action/lstm/memory-list", "action", *lstm, "--memory", ",".join(["0.1"] * 32), "--json")
    yield c(
        "action/goal-hyper/boundary-seed", "action", *model("goal-hyper"), "--obs", "boundary", "--seed", "5", "--json"
    )
    yield c("action/attention/seed", "action", *model("attention"), "--seed", "3")
    yield c("action/bundled/seed-max", "action", "--seed", "4294967295", "--json")
    yield c("action/bundled/negative-number", "action", "--obs", "-0.5", "--json")
    yield c("sample/discrete-multi/mask", "sample", *dm, "--mask", dm_mask, "--json")
    yield c("sample/lstm/memory", "sample", *lstm, "--memory", "zeros", "--seed", "4", "--json")
    yield c(
        "batch/poca-discrete/mask",
        "batch",
        *model("poca-discrete"),
        "--batch",
        "6",
        "--mask",
        "1,1,0,1,1,1,0,1,1",
        "--json",
    )
    yield c("fingerprint/lstm/deterministic", "fingerprint", *lstm, "--deterministic", "--steps", "8", "--json")
    yield c("stats/vector/deterministic", "stats", *v, "--deterministic", "--rollouts", "1", "--steps", "5", "--json")
    yield c("info/vector/expect-sha256", "info", *v, "--expect-sha256", VECTOR_SHA256.upper(), "--json")
    yield c("info/goal-hyper/goal-input", "info", *model("goal-hyper"), "--goal-input", "1", "--json")
    yield c("info/hub-offline", "info", "--model", "nobody/no-such-policy", "--json", expect_rc=2)


def engine_cases() -> Iterator[Case]:
    """--engine, --dtype, --device cpu, --providers, --spin, --checkpoint, --onnx beside a checkpoint."""
    v, hybrid = model("vector"), model("hybrid")
    vector_50000 = f"{TREE}/examples/vector/Vector/Vector-50000.pt"
    torch = ("--engine", "torch")
    yield c("action/vector/torch", "action", *v, *torch, "--json")
    yield c("action/lstm/torch", "action", *model("lstm"), *torch, "--json")
    yield c("action/hybrid/torch-float16", "action", *hybrid, *torch, "--dtype", "float16", "--json")
    yield c("action/bundled/bfloat16", "action", "--dtype", "bfloat16", "--json")
    yield c(
        "action/vector/onnxruntime-cpu",
        "action",
        *v,
        "--engine",
        "onnxruntime",
        "--device",
        "cpu",
        "--providers",
        "cpu",
        "--spin",
        "off",
        "--json",
    )
    yield c("action/vector/checkpoint", "action", "--checkpoint", vector_50000, "--json")
    yield c("sample/hybrid/torch", "sample", *hybrid, *torch, "--json")
    yield c("batch/discrete-multi/torch", "batch", *model("discrete-multi"), *torch, "--batch", "5", "--json")
    yield c("precision/bundled/float16", "precision", "--dtype", "float16", "--samples", "20", "--json")
    yield c("precision/lstm/torch", "precision", *model("lstm"), *torch, "--samples", "10", "--json")
    yield c("onnx-compare/vector/torch", "onnx-compare", *v, *torch, "--json")
    yield c("onnx-compare/lstm/rollout", "onnx-compare", *model("lstm"), "--batch", "16", "--steps", "8", "--json")
    yield c("onnx-compare/vector/checkpoint-50000", "onnx-compare", "--checkpoint", vector_50000, "--json")
    yield c(
        "onnx-compare/multi-continuous/legacy-1x",
        "onnx-compare",
        *model("multi-continuous"),
        "--onnx",
        f"{INTERFACES}/Crawlerish-1x.onnx",
        "--json",
    )
    yield c("export-onnx/visual-match3/json", "export-onnx", *model("visual-match3"), "--output", "m3.onnx", "--json")


def onnx_alone_cases() -> Iterator[Case]:
    """A policy given as its ML-Agents ONNX alone, older interfaces included."""
    hybrid = ("--onnx", f"{INTERFACES}/Hybrid-2x.onnx")
    crawler = ("--onnx", f"{INTERFACES}/Crawlerish-1x.onnx")
    vector = ("--onnx", f"{TREE}/examples/vector/Vector.onnx")
    yield c("onnx-alone/info/hybrid-2x", "info", *hybrid)
    yield c("onnx-alone/action/hybrid-2x", "action", *hybrid, "--mask", "1,0", "--json")
    yield c("onnx-alone/sample/hybrid-2x", "sample", *hybrid, "--seed", "3", "--json")
    yield c("onnx-alone/batch/hybrid-2x", "batch", *hybrid, "--batch", "6", "--output", "h.npz", "--json")
    yield c("onnx-alone/stream/hybrid-2x", "stream", *hybrid, stdin=stdin_of(stream_lines("hybrid")))
    yield c("onnx-alone/onnx-compare/hybrid-2x", "onnx-compare", *hybrid, "--json")
    yield c("onnx-alone/info/crawlerish-1x", "info", *crawler, "--json")
    yield c("onnx-alone/info/lstmcam-1x", "info", "--onnx", f"{INTERFACES}/LstmCam-1x.onnx", "--json")
    yield c(
        "onnx-alone/action/visualsimple-channels-last",
        "action",
        "--onnx",
        f"{INTERFACES}/VisualSimple-1x-channels-last.onnx",
        "--json",
    )
    yield c("onnx-alone/export-onnx/crawlerish-1x", "export-onnx", *crawler, "--output", "crawler.onnx", "--json")
    yield c(
        "onnx-alone/fingerprint/memory",
        "fingerprint",
        "--onnx",
        f"{TREE}/examples/lstm/Memory.onnx",
        "--steps",
        "8",
        "--json",
    )
    yield c("onnx-alone/stats/vector", "stats", *vector, "--rollouts", "1", "--steps", "5", "--json")
    yield c("onnx-alone/precision/vector-torch", "precision", *vector, "--engine", "torch", "--samples", "10", "--json")


def file_cases() -> Iterator[Case]:
    """batch --output in every format, and --obs-file in every format."""
    v, hybrid, lstm = model("vector"), model("hybrid"), model("lstm")
    yield c("batch-file/vector/npy-out", "batch", *v, "--batch", "8", "--output", "out.npy", "--json")
    yield c(
        "batch-file/poca-discrete/npz-out", "batch", *model("poca-discrete"), "--batch", "8", "--output", "poca.npz"
    )
    yield c("batch-file/lstm/npz-out", "batch", *lstm, "--batch", "4", "--output", "lstm.npz", "--json")
    yield c("batch-file/hybrid/parquet-out", "batch", *hybrid, "--batch", "5", "--output", "h.parquet", "--json")
    yield c("batch-file/vector/csv-out", "batch", *v, "--batch", "3", "--output", "out.csv", "--json", expect_rc=2)
    yield c("batch-file/vector/csv-in", "batch", *v, "--obs-file", f"{FIX}/vec8.csv", "--output", "vec8_out.npy")
    yield c(
        "batch-file/vector/npy-in-chunk",
        "batch",
        *v,
        "--obs-file",
        f"{FIX}/vec8.npy",
        "--chunk",
        "7",
        "--output",
        "o.npz",
        "--json",
    )
    yield c(
        "batch-file/vector/npy-in-progress",
        "batch",
        *v,
        "--obs-file",
        f"{FIX}/vec8.npy",
        "--chunk",
        "16",
        "--progress",
        "--output",
        "p.npy",
        "--json",
    )
    yield c(
        "batch-file/lstm/npz-memory",
        "batch",
        *lstm,
        "--obs-file",
        f"{FIX}/lstm_mem.npz",
        "--output",
        "mem.npz",
        "--json",
    )
    yield c(
        "batch-file/discrete-multi/npz-masks-parquet",
        "batch",
        *model("discrete-multi"),
        "--obs-file",
        f"{FIX}/dm.npz",
        "--output",
        "dm.parquet",
        "--json",
    )
    yield c(
        "batch-file/hybrid/parquet-keep",
        "batch",
        *hybrid,
        "--obs-file",
        f"{FIX}/hybrid.parquet",
        "--keep-columns",
        "id",
        "--chunk",
        "10",
        "--output",
        "kept.parquet",
        "--json",
    )
    yield c(
        "batch-file/visual-simple/npz",
        "batch",
        *model("visual-simple"),
        "--obs-file",
        f"{FIX}/vis.npz",
        "--output",
        "vis_out.npz",
        "--json",
    )
    yield c("batch-file/bundled/npy", "batch", "--obs-file", f"{FIX}/huggy.npy", "--output", "huggy_out.npy", "--json")


def stream_serve_cases() -> Iterator[Case]:
    """Stream options, serve over TCP, a Unix socket and HTTP (SIGTERM at the end), benchmark (timings masked)."""
    v, lstm = model("vector"), model("lstm")
    yield c("stream/lstm/stream-stats", "stream", *lstm, "--stream-stats", stdin=stdin_of(stream_lines("lstm")))
    yield c(
        "stream/vector/max-line-bytes", "stream", *v, "--max-line-bytes", "64", stdin=stdin_of(stream_lines("vector"))
    )
    yield c(
        "stream/hybrid/torch", "stream", *model("hybrid"), "--engine", "torch", stdin=stdin_of(stream_lines("hybrid"))
    )
    yield c("stream/vector/empty-input", "stream", *v, stdin=b"")
    tcp = ("--listen", "127.0.0.1:0")
    yield c("serve/vector/tcp", "serve", *v, *tcp, conversations=(tuple(stream_lines("vector")),))
    memory = tuple(stream_lines("lstm"))
    yield c("serve/lstm/two-connections", "serve", *lstm, *tcp, "--stream-stats", conversations=(memory, memory[:9]))
    yield c(
        "serve/hybrid/unix",
        "serve",
        *model("hybrid"),
        "--listen",
        "unix:policy.sock",
        conversations=(tuple(stream_lines("hybrid")),),
    )
    yield c(
        "serve/discrete-multi/max-batch",
        "serve",
        *model("discrete-multi"),
        *tcp,
        "--max-batch",
        "2",
        "--max-wait-us",
        "100",
        conversations=(tuple(stream_lines("discrete-multi")),),
    )
    act = line({"id": 7, **inputs("vector", 0)})
    requests = (
        ("GET", "/healthz", None),
        ("POST", "/v1/act", act),
        ("POST", "/v1/act", b"not json"),
        ("GET", "/nowhere", None),
        ("GET", "/metrics", None),
    )
    yield c(
        "serve/vector/http",
        "serve",
        *v,
        *tcp,
        "--http",
        "127.0.0.1:0",
        conversations=((act, b'{"info": true}'),),
        http=requests,
        timing=r"^mlagents_serve_(latency_seconds|batch_lines)_",
    )  # (histograms of timings)
    yield c("benchmark/vector/json", "benchmark", *v, "--runs", "20", "--json", timing=EVERY_LINE)
    yield c("benchmark/bundled/text", "benchmark", "--runs", "20", timing=EVERY_LINE)


def _error(name: str, *args: str, rc: int = 2) -> Case:
    return Case(f"error/{name}", tuple(args), expect_rc=rc)


def usage_error_cases() -> Iterator[Case]:
    """Refused while the command line is parsed: exit 2, one line on stderr."""
    v = model("vector")
    yield _error("unknown-mode", "--mode", "bogus")
    yield _error("unknown-option", "--mode", "info", "--frobnicate")
    yield _error("option-without-value", "--mode", "action", "--seed")
    yield _error("seed-negative", "--mode", "action", *v, "--seed", "-3")
    yield _error("seed-too-large", "--mode", "action", *v, "--seed", "4294967296")
    yield _error("seed-not-a-number", "--mode", "action", *v, "--seed", "abc")
    yield _error("batch-zero", "--mode", "batch", *v, "--batch", "0")
    yield _error("runs-negative", "--mode", "benchmark", *v, "--runs", "-5")
    yield _error("steps-negative", "--mode", "fingerprint", *v, "--steps", "-1")
    yield _error("tol-nan", "--mode", "precision", *v, "--tol", "nan")
    yield _error("dtype-int8", "--mode", "action", *v, "--dtype", "int8")
    yield _error("sha256-malformed", "--mode", "info", *v, "--expect-sha256", "xyz")
    yield _error("mask-wrong-mode", "--mode", "onnx-compare", *v, "--mask", "1,0")
    yield _error("obs-wrong-mode", "--mode", "batch", *v, "--obs", "zeros")
    yield _error("keep-columns-without-obs-file", "--mode", "batch", *v, "--keep-columns", "id")
    yield _error("chunk-without-obs-file", "--mode", "batch", *v, "--chunk", "8")
    yield _error("ray-without-obs-file", "--mode", "batch", *v, "--batch", "10", "--ray", "local")
    yield _error("batch-with-obs-file", "--mode", "batch", *v, "--batch", "8", "--obs-file", f"{FIX}/vec8.npy")
    yield _error("empty-output", "--mode", "batch", *v, "--output", "")
    yield _error("stream-json", "--mode", "stream", *v, "--json")
    yield _error("max-line-bytes-small", "--mode", "stream", *v, "--max-line-bytes", "10")
    yield _error("providers-unknown", "--mode", "action", *v, "--providers", "bogus")
    yield _error("serve-port-out-of-range", "--mode", "serve", *v, "--listen", "127.0.0.1:70000")
    yield _error("serve-no-port", "--mode", "serve", *v, "--listen", "127.0.0.1")


def input_error_cases() -> Iterator[Case]:
    """Refused once the policy is known: bad --obs, --mask, --memory, devices, files, sources."""
    v, dm, lstm, vis = model("vector"), model("discrete-multi"), model("lstm"), model("visual-simple")
    yield _error("obs-count", "--mode", "action", *v, "--obs", "1,2,3")
    yield _error("obs-nan", "--mode", "action", *v, "--obs", "nan")
    yield _error("obs-word", "--mode", "action", *v, "--obs", "dog")
    yield _error("obs-several-inputs", "--mode", "action", *dm, "--obs", "1,2,3")
    yield _error("obs-unknown-input", "--mode", "action", *dm, "--obs", "obs_0=zeros;obs_7=1")
    yield _error("obs-missing-npy", "--mode", "action", *v, "--obs", "obs_0=missing.npy")
    yield _error("obs-image-size", "--mode", "action", *vis, "--obs", f"obs_0={FIX}/cam6.png;obs_1=zeros")
    yield _error("obs-image-for-vector", "--mode", "action", *v, "--obs", f"{FIX}/cam.png")
    yield _error("mask-count", "--mode", "action", *dm, "--mask", "1,1,1")
    yield _error("mask-branch-forbidden", "--mode", "action", *dm, "--mask", "0,0,0,1,1,1,1,1,1,1")
    yield _error("mask-not-binary", "--mode", "sample", *model("hybrid"), "--mask", "1,2")
    yield _error("mask-no-discrete", "--mode", "action", *v, "--mask", "1,0")
    yield _error("memory-count", "--mode", "action", *lstm, "--memory", ",".join(["0"] * 31))
    yield _error("memory-not-lstm", "--mode", "action", *v, "--memory", "zeros")
    yield _error("device-npu", "--mode", "action", *v, "--device", "npu")
    yield _error("device-cuda-3", "--mode", "action", *v, "--device", "cuda:3")
    yield _error("device-gpu", "--mode", "action", *v, "--device", "gpu")
    yield _error("onnxruntime-float16", "--mode", "action", *v, "--engine", "onnxruntime", "--dtype", "float16")
    yield _error("batch-huge", "--mode", "batch", *v, "--batch", str(10**12))
    yield _error("sha256-mismatch", "--mode", "info", *v, "--expect-sha256", "0" * 64)
    yield _error("goal-input-out-of-range", "--mode", "info", *model("goal-hyper"), "--goal-input", "5")
    yield _error("checkpoint-missing", "--mode", "info", "--checkpoint", "nope.pt")
    yield _error("checkpoint-folder", "--mode", "info", "--checkpoint", f"{FIX}/empty")
    yield _error("model-dir-missing", "--mode", "info", "--model-dir", "nowhere")
    yield _error("model-dir-empty", "--mode", "action", "--model-dir", f"{FIX}/empty")
    yield _error("onnx-missing", "--mode", "info", "--onnx", "missing.onnx")
    yield _error(
        "onnx-other-policy",
        "--mode",
        "onnx-compare",
        *v,
        "--onnx",
        f"{TREE}/examples/hybrid/Hybrid.onnx",
        "--json",
        rc=1,
    )
    yield _error("checkpoints-onnx-alone", "--mode", "checkpoints", "--onnx", f"{INTERFACES}/Hybrid-2x.onnx")
    yield _error("obs-file-missing", "--mode", "batch", *v, "--obs-file", "missing.npy")
    yield _error("obs-file-bad-key", "--mode", "batch", *dm, "--obs-file", f"{FIX}/dm_bad.npz")
    yield _error("obs-file-nan", "--mode", "batch", *v, "--obs-file", f"{FIX}/vec8_nan.npy", "--output", "nan_out.npy")
    yield _error("obs-file-wide-csv", "--mode", "batch", *v, "--obs-file", f"{FIX}/vec8_wide.csv", "--output", "w.npy")
    yield _error("obs-file-not-an-archive", "--mode", "batch", *v, "--obs-file", f"{FIX}/not_an_archive.npz")
    yield _error("npy-output-discrete", "--mode", "batch", *model("poca-discrete"), "--batch", "4", "--output", "p.npy")
    yield _error("export-bad-suffix", "--mode", "export-onnx", *v, "--output", "rebuilt.txt")
    yield _error("plot-needs-matplotlib", "--mode", "benchmark", *v, "--runs", "5", "--plot", "latency.png")
    yield _error("serve-no-listen", "--mode", "serve", *v)


def battery() -> list:
    cases = [
        *per_example_cases(),
        *human_cases(),
        *input_cases(),
        *engine_cases(),
        *onnx_alone_cases(),
        *file_cases(),
        *stream_serve_cases(),
        *usage_error_cases(),
        *input_error_cases(),
    ]
    names = [c.name for c in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, duplicates
    return cases


# ----------------------------------------------------------------------------------------------------------------------
# Fixtures (made here: a clean clone has no ../shared)
# ----------------------------------------------------------------------------------------------------------------------


def make_fixtures(folder: Path) -> list:
    """Input files for --obs and --obs-file, fixed by their seeds. Returns notes on what could not be made."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "empty").mkdir(exist_ok=True)
    r = np.random.RandomState(0)
    f32 = np.float32
    np.savetxt(folder / "vec8.csv", r.randn(50, 8), delimiter=",")
    np.savetxt(folder / "vec8_wide.csv", r.randn(10, 9), delimiter=",")
    np.save(folder / "vec8.npy", r.randn(40, 8).astype(f32))
    bad = r.randn(10, 8).astype(f32)
    bad[3, 2] = np.nan
    np.save(folder / "vec8_nan.npy", bad)
    np.save(folder / "vec8_one.npy", np.linspace(-1, 1, 8, dtype=f32))
    np.save(folder / "vec5.npy", np.arange(5, dtype=f32) / 5)
    np.save(folder / "huggy.npy", r.randn(16, 59).astype(f32))
    np.savez(folder / "lstm_mem.npz", obs_0=r.randn(20, 10).astype(f32), memory=(r.randn(20, 32) * 0.1).astype(f32))
    masks = np.ones((30, 10), f32)
    masks[::3, 0] = 0
    masks[1::4, 5:7] = 0
    dm = {"obs_0": r.randn(30, 20).astype(f32), "obs_1": r.randn(30, 6).astype(f32)}
    np.savez(folder / "dm.npz", **dm, action_masks=masks)
    np.savez(folder / "dm_bad.npz", **dm, action_mask=masks)
    np.savez(folder / "vis.npz", obs_0=r.rand(6, 3, 36, 36).astype(f32), obs_1=r.randn(6, 5).astype(f32))
    (folder / "not_an_archive.npz").write_bytes(b"this is not a zip archive\n")
    notes = []
    try:
        from PIL import Image

        Image.fromarray(r.randint(0, 256, (36, 36, 3), dtype=np.uint8)).save(folder / "cam.png")
        Image.fromarray(r.randint(0, 256, (6, 6, 3), dtype=np.uint8)).save(folder / "cam6.png")
    except ImportError:
        notes.append("Pillow is not installed: the .png fixtures are absent")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        obs = pa.FixedSizeListArray.from_arrays(pa.array(r.randn(25 * 12).astype(f32)), 12)
        pq.write_table(pa.table({"id": np.arange(25), "obs": obs}), folder / "hybrid.parquet")
    except ImportError:
        notes.append("pyarrow is not installed: hybrid.parquet is absent")
    return notes


# ----------------------------------------------------------------------------------------------------------------------
# Running one command line in one tree
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run gave, by channel ("exit code", "stdout", "stderr", "socket", "http", "file NAME"), with the
    placeholders in."""

    channels: dict
    seconds: float


class Stopped(Exception):
    """The harness was interrupted: no further run starts."""


class Runner:
    def __init__(self, work: Path, fixtures: Path):
        self.work, self.fixtures = work, fixtures
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("HUGGY_MODEL_DIR", "HUGGY_FIXTURES", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
        }
        # bytecode goes to a cache of the harness's own: neither tree is written to
        self.env.update(
            PYTHONHASHSEED="0",
            HF_HUB_OFFLINE="1",
            HF_HOME=str(work / "hf-home"),
            PYTHONPYCACHEPREFIX=str(work / "pycache"),
            COLUMNS="120",
        )
        self.live: set = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # set on Ctrl-C: no new run starts
        self.count = 0

    def run(self, case: Case, tree: Path, tag: str) -> Outcome:
        with self.lock:
            self.count += 1
            cwd = self.work / f"run-{self.count:04d}-{tag}"
        cwd.mkdir()
        argv = [sys.executable, str(tree / "inference.py")]
        argv += [a.replace(TREE, str(tree)).replace(FIX, str(self.fixtures)) for a in case.args]
        start = time.monotonic()
        if case.conversations is None:
            channels, extra = self._plain(case, argv, cwd), []
        else:
            channels, extra = self._serve(case, argv, cwd)
        channels.update(collect_files(cwd))
        swaps = extra + path_swaps(tree, cwd, self.fixtures)
        channels = {name: substitute(data, swaps) for name, data in channels.items()}
        shutil.rmtree(cwd, ignore_errors=True)
        return Outcome(channels, time.monotonic() - start)

    def _start(self, argv: list, cwd: Path, stdin) -> subprocess.Popen:
        with self.lock:
            if self.stopping.is_set():
                raise Stopped("interrupted")
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=self.env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self.live.add(proc)
        return proc

    def _finish(self, proc: subprocess.Popen, timeout: float, stdin: Optional[bytes] = None) -> tuple:
        """(exit code text, stdout, stderr); a run past its time is killed with its children."""
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
            code = str(proc.returncode)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out, err = proc.communicate()
            code = f"timeout after {timeout:.0f} s"
        with self.lock:
            self.live.discard(proc)
        return code, out, err

    def _plain(self, case: Case, argv: list, cwd: Path) -> dict:
        stdin = subprocess.DEVNULL if case.stdin is None else subprocess.PIPE
        code, out, err = self._finish(self._start(argv, cwd, stdin), case.timeout, case.stdin)
        return {"exit code": code.encode(), "stdout": out, "stderr": err}

    def _serve(self, case: Case, argv: list, cwd: Path) -> tuple:
        """Start the server, wait for its announcement, hold the conversations and HTTP requests, then SIGTERM."""
        proc = self._start(argv, cwd, subprocess.DEVNULL)
        said, head = wait_announced(proc, want_http="--http" in case.args)
        channels, swaps = {}, []
        if "listening" in said:
            where = said["listening"]
            swaps.append((where.encode(), re.sub(r":\d+$", ":<PORT>", where).encode()))
            channels["socket"] = b"".join(converse(where, cwd, i, lines) for i, lines in enumerate(case.conversations))
        if "http" in said:
            swaps.append((said["http"].encode(), re.sub(r":\d+$", ":<PORT>", said["http"]).encode()))
            channels["http"] = b"".join(http_request(said["http"], *request) for request in case.http)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code, out, err = self._finish(proc, case.timeout)
        channels.update({"exit code": code.encode(), "stdout": out, "stderr": head + err})
        return channels, swaps

    def kill_all(self) -> None:
        with self.lock:
            self.stopping.set()
            for proc in list(self.live):
                kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def wait_announced(proc: subprocess.Popen, want_http: bool) -> tuple:
    """Read the server's stderr until it says where it listens (or exits, or SERVE_START_S pass): ({kind: where}, bytes
    read)."""
    want = {"listening", "http"} if want_http else {"listening"}
    said, text, deadline = {}, b"", time.monotonic() + SERVE_START_S
    while not want <= set(said) and proc.poll() is None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if select.select([proc.stderr], [], [], min(left, 1.0))[0]:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            text += chunk
        said = {kind.decode(): where.decode() for kind, where in ANNOUNCE.findall(text)}
    return said, text


def dial(where: str, cwd: Path) -> socket.socket:
    if where.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(SOCKET_TIMEOUT_S)
        sock.connect(str(cwd / where[5:]))
        return sock
    host, port = where.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)


def converse(where: str, cwd: Path, number: int, lines: tuple) -> bytes:
    """One connection: every line sent, the write side closed, every answer read until the server closes."""
    head = f"--- connection {number}: {len(lines)} lines\n".encode()
    try:
        with dial(where, cwd) as sock:
            sock.sendall(stdin_of(list(lines)))
            sock.shutdown(socket.SHUT_WR)
            answers = b""
            while True:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return head + answers
                answers += chunk
    except OSError as exc:
        return head + f"<socket error: {type(exc).__name__}>\n".encode()


def http_request(where: str, method: str, path: str, body: Optional[bytes]) -> bytes:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=SOCKET_TIMEOUT_S)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        kind = response.getheader("Content-Type", "")
        return f"--- {method} {path}: {response.status} {kind}\n".encode() + response.read() + b"\n"
    except OSError as exc:
        return f"--- {method} {path}: <error: {type(exc).__name__}>\n".encode()
    finally:
        conn.close()


def collect_files(cwd: Path) -> dict:
    """Every regular file the run left in its folder (outputs), by path."""
    return {
        f"file {p.relative_to(cwd)}": p.read_bytes()
        for p in sorted(cwd.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def path_swaps(tree: Path, cwd: Path, fixtures: Path) -> list:
    pairs = []
    for path, mark in ((cwd, "<CWD>"), (fixtures, "<FIX>"), (tree, "<TREE>")):
        for form in {str(path), os.path.realpath(path)}:
            pairs.append((form.encode(), mark.encode()))
    return sorted(pairs, key=lambda pair: -len(pair[0]))  # the longest first: one path may hold another


def substitute(data: bytes, swaps: list) -> bytes:
    for old, new in swaps:
        data = data.replace(old, new)
    return data


# ----------------------------------------------------------------------------------------------------------------------
# Comparing
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class Mask:
    """What varies between runs of the old tree: numbers (line, index), whole lines, or the whole text."""

    numbers: set = field(default_factory=set)
    lines: set = field(default_factory=set)
    whole: bool = False

    def apply(self, text: bytes) -> bytes:
        if self.whole:
            return b"<VARIES: the line count differed between old runs>\n"
        out = []
        for i, row in enumerate(text.splitlines(keepends=True)):
            if i in self.lines:
                row = b"<VARIES: line>" + (b"\n" if row.endswith(b"\n") else b"")
            elif any(key[0] == i for key in self.numbers):
                row = mask_numbers(row, {j for (n, j) in self.numbers if n == i})
            out.append(row)
        return b"".join(out)

    def labels(self, text: bytes) -> list:
        """Readable names of the masked fields: a JSON key, else the words before the number."""
        if self.whole:
            return ["the whole text (its line count varied)"]
        rows = text.splitlines()
        names = [f"line {i + 1} (all of it)" for i in sorted(self.lines)]
        for i, j in sorted(self.numbers):
            names.append(number_label(rows[i], j) if i < len(rows) else f"line {i + 1} number {j + 1}")
        return list(dict.fromkeys(names))


def mask_numbers(row: bytes, which: Optional[set] = None) -> bytes:
    """Replace the numbers of a line (those at `which` indices, or all of them) with <VARIES>."""
    counter = iter(range(1 << 30))

    def replace(match: re.Match) -> bytes:
        index = next(counter)
        return b"<VARIES>" if which is None or index in which else match.group(0)

    return NUMBER.sub(replace, row)


def number_label(row: bytes, index: int) -> str:
    match = list(NUMBER.finditer(row))[index]
    before = row[: match.start()].decode("utf-8", "replace")
    keys = re.findall(r'"([^"]+)":', before)
    if keys:
        return f'"{keys[-1]}"'
    words = NUMBER.sub(b"#", row[: match.start()]).decode("utf-8", "replace").split()
    while len(words) > 1 and len(" ".join(words)) > 40:
        words.pop(0)
    return f"'{' '.join(words)} <N>'"


def find_mask(texts: list) -> Mask:
    """Compare the old runs' texts line by line: numbers that differ, lines whose words differ."""
    split = [t.splitlines(keepends=True) for t in texts]
    if len({len(s) for s in split}) > 1:
        return Mask(whole=True)
    mask = Mask()
    for i, rows in enumerate(zip(*split)):
        if len(set(rows)) == 1:
            continue
        if len({NUMBER.sub(NUMBER_HOLE, r) for r in rows}) > 1:
            mask.lines.add(i)
            continue
        for j, values in enumerate(zip(*(NUMBER.findall(r) for r in rows))):
            if len(set(values)) > 1:
                mask.numbers.add((i, j))
    return mask


def zip_members(data: bytes) -> Optional[bytes]:
    """A zip archive (.npz) as its members' names and bytes, without the entries' timestamps; None if not a zip."""
    if not data.startswith(b"PK"):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return b"".join(
                f"{i.filename} {i.compress_type} {i.file_size}\n".encode() + archive.read(i) + b"\n"
                for i in archive.infolist()
            )
    except (zipfile.BadZipFile, OSError, ValueError):
        return None


@dataclass
class ChannelResult:
    name: str
    same: bool
    masked: list
    old: Optional[bytes]
    new: Optional[bytes]


TEXT_CHANNELS = ("stdout", "stderr", "socket", "http")


def mask_timing_lines(text: bytes, pattern: bytes) -> bytes:
    regex = re.compile(pattern)
    return b"".join(mask_numbers(row) if regex.search(row) else row for row in text.splitlines(keepends=True))


def compare_channel(name: str, olds: list, new: Optional[bytes], timing: Optional[str]) -> ChannelResult:
    """The strictest comparison the old runs allow: bytes; then a zip's members; then with what varies masked."""
    present = [o is not None for o in olds]
    if not all(present):
        if any(present):  # written by some old runs only: nothing to compare
            return ChannelResult(name, True, ["present in some old runs only"], None, new)
        return ChannelResult(name, new is None, [], None, new)
    if new is None:
        return ChannelResult(name, False, [], olds[0], None)
    masked = []
    if timing is not None and name in TEXT_CHANNELS:
        pattern, before = timing.encode(), olds[0]
        olds, new = [mask_timing_lines(o, pattern) for o in olds], mask_timing_lines(new, pattern)
        if olds[0] != before:
            masked.append("every number (timings)" if timing == EVERY_LINE else f"numbers in lines matching {timing}")
    if len(set(olds)) > 1 and zip_members(olds[0]) is not None:
        members = [zip_members(o) for o in olds]
        if None not in members and len(set(members)) == 1:
            olds, new = members, zip_members(new) or new
            masked.append("zip entry metadata (timestamps)")
    if len(set(olds)) > 1:
        mask = find_mask(olds)
        masked += mask.labels(olds[0])
        olds, new = [mask.apply(o) for o in olds], mask.apply(new)
    return ChannelResult(name, olds[0] == new, masked, olds[0], new)


def channel_order(name: str) -> tuple:
    fixed = ["exit code", "stdout", "stderr", "socket", "http"]
    return (fixed.index(name), "") if name in fixed else (len(fixed), name)


def compare_outcomes(case: Case, olds: list, new: Outcome) -> list:
    names = set(new.channels).union(*(o.channels for o in olds))
    return [
        compare_channel(n, [o.channels.get(n) for o in olds], new.channels.get(n), case.timing)
        for n in sorted(names, key=channel_order)
    ]


@dataclass
class CaseReport:
    case: Case
    results: list
    old_runs: int
    seconds: float
    warning: Optional[str] = None

    @property
    def same(self) -> bool:
        return all(r.same for r in self.results)


def old_runs_vary(olds: list) -> bool:
    names = set().union(*(o.channels for o in olds))
    return any(len({o.channels.get(n) for o in olds}) > 1 for n in names)


def check_case(case: Case, runner: Runner, old: Path, new: Path) -> CaseReport:
    """Old once and new once; when they differ, old again (up to MAX_OLD_RUNS while the old runs themselves vary) so
    that what varies from run to run is masked and what the new tree changed is not."""
    start = time.monotonic()
    olds = [runner.run(case, old, "old1")]
    fresh = runner.run(case, new, "new")
    results = compare_outcomes(case, olds, fresh)
    while not all(r.same for r in results) and len(olds) < MAX_OLD_RUNS and (len(olds) < 2 or old_runs_vary(olds)):
        olds.append(runner.run(case, old, f"old{len(olds) + 1}"))
        results = compare_outcomes(case, olds, fresh)
    warning = None
    code = olds[0].channels["exit code"].decode()
    if case.expect_rc is not None and code != str(case.expect_rc):
        warning = f"the battery expects exit code {case.expect_rc}; the old tree gave {code}"
    return CaseReport(case, results, len(olds), time.monotonic() - start, warning)


# ----------------------------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------------------------


def is_binary(data: bytes) -> bool:
    if b"\x00" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def readable(data: bytes) -> list:
    """Text lines for a diff; a line holding one JSON object is spread one key per line."""
    out = []
    for row in data.decode("utf-8").splitlines():
        try:
            obj = json.loads(row)
        except ValueError:
            obj = None
        out.extend(json.dumps(obj, indent=1).splitlines() if isinstance(obj, dict) and len(row) > 100 else [row])
    return [r if len(r) <= 240 else r[:240] + " ..." for r in out]


def describe_bytes(data: bytes) -> str:
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"


def diff_excerpt(result: ChannelResult) -> list:
    name, old, new = result.name, result.old, result.new
    if old is None or new is None:
        return [
            f"  {name}: {'absent in old' if old is None else describe_bytes(old)} vs "
            f"{'absent in new' if new is None else describe_bytes(new)}"
        ]
    if name == "exit code":
        return [f"  exit code: old {old.decode()}, new {new.decode()}"]
    if is_binary(old) or is_binary(new):
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        return [f"  {name}: old {describe_bytes(old)}; new {describe_bytes(new)}; first difference at byte {first}"]
    lines = list(difflib.unified_diff(readable(old), readable(new), f"old {name}", f"new {name}", n=2, lineterm=""))
    if len(lines) > DIFF_LINES:
        lines = lines[:DIFF_LINES] + [f"... ({len(lines) - DIFF_LINES} more diff lines)"]
    if not lines:  # same text, other bytes (line endings, a final newline)
        lines = [f"{name}: same lines, other bytes: old {describe_bytes(old)}; new {describe_bytes(new)}"]
    return ["  " + row for row in lines]


def summary_table(reports: list) -> list:
    groups: dict = {}
    for report in reports:
        counts = groups.setdefault(report.case.group, [0, 0, 0.0])
        counts[0 if report.same else 1] += 1
        counts[2] += report.seconds
    rows = [f"{'group':<14} {'cases':>5} {'same':>5} {'differ':>6} {'seconds':>8}"]
    for group, (same, differ, seconds) in groups.items():
        rows.append(f"{group:<14} {same + differ:>5} {same:>5} {differ:>6} {seconds:>8.0f}")
    same = sum(1 for r in reports if r.same)
    rows.append(
        f"{'total':<14} {len(reports):>5} {same:>5} {len(reports) - same:>6} {sum(r.seconds for r in reports):>8.0f}"
    )
    return rows


def masked_fields(reports: list) -> list:
    by_field: dict = {}
    for report in reports:
        for result in report.results:
            for what in result.masked:
                by_field.setdefault((result.name, what), []).append(report.case.name)
    rows = []
    for (channel, what), names in sorted(by_field.items()):
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} cases)" if len(names) > 4 else "")
        rows.append(f"  {channel}: {what}  <- {shown}")
    return rows


def print_report(reports: list, old: Path, new: Path, seconds: float, notes: list, verbose: bool) -> None:
    out = sys.stdout
    print(f"compare_behaviour: old {old}  new {new}  ({len(reports)} cases, {seconds:.0f} s)", file=out)
    for note in notes:
        print(f"note: {note}", file=out)
    print("", *summary_table(reports), sep="\n", file=out)
    if verbose:
        print("\nevery case:", file=out)
        for report in reports:
            print(
                f"  {'same  ' if report.same else 'DIFFER'} {report.case.name:<48} old runs {report.old_runs} "
                f"{report.seconds:6.1f} s",
                file=out,
            )
    masks = masked_fields(reports)
    print(f"\nmasked (varied between runs of the old tree; compared as <VARIES>): {len(masks) or 'nothing'}", file=out)
    if masks:
        print(*masks, sep="\n", file=out)
    warnings = [r for r in reports if r.warning]
    if warnings:
        print(f"\nbattery warnings ({len(warnings)}):", file=out)
        for report in warnings:
            print(f"  {report.case.name}: {report.warning}", file=out)
    differing = [r for r in reports if not r.same]
    print(f"\ndifferences: {len(differing) or 'none'}", file=out)
    for report in differing:
        print(f"\n### {report.case.name}: {report.case.shown()}", file=out)
        for result in report.results:
            if not result.same:
                print(*diff_excerpt(result), sep="\n", file=out)


# ----------------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------------


def parse_args(argv: Optional[list]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--old", type=Path, help="the reference checkout (holds inference.py)")
    p.add_argument("--new", type=Path, help="the checkout under test (holds inference.py)")
    p.add_argument("--jobs", type=int, default=2, help="command lines run at once (default 2)")
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="SUBSTR",
        help="only the cases whose name or command line holds SUBSTR (repeat: any of them)",
    )
    p.add_argument("--list", action="store_true", help="print the battery and exit")
    p.add_argument("--verbose", "-v", action="store_true", help="one line per case in the report")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (fixtures, pycache)")
    args = p.parse_args(argv)
    if not args.list:
        for side in ("old", "new"):
            tree = getattr(args, side)
            if tree is None or not (tree / "inference.py").is_file():
                p.error(f"--{side}: a folder holding inference.py is needed (got {tree})")
            setattr(args, side, tree.resolve())
    if args.jobs < 1:
        p.error("--jobs: at least 1")
    return args


def selected(cases: list, filters: list) -> list:
    if not filters:
        return cases
    return [c for c in cases if any(f in c.name or f in c.shown() for f in filters)]


def run_all(cases: list, runner: Runner, args: argparse.Namespace) -> list:
    reports: dict = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    futures = [pool.submit(check_case, case, runner, args.old, args.new) for case in cases]
    try:
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            report = future.result()
            reports[report.case.name] = report
            print(
                f"[{done}/{len(cases)}] {'same  ' if report.same else 'DIFFER'} {report.case.name} "
                f"({report.seconds:.1f} s, old runs {report.old_runs})",
                file=sys.stderr,
                flush=True,
            )
    except BaseException:
        runner.kill_all()  # (the workers' next run refuses to start)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [reports[c.name] for c in cases]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    cases = selected(battery(), args.filter)
    if args.list:
        for case in cases:
            print(f"{case.name:<48} {case.shown()}")
        print(f"({len(cases)} cases)")
        return 0
    if not cases:
        print("no case matches --filter", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="compare-behaviour-"))
    start, cpu = time.monotonic(), children_cpu_s()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM too ends the runs it started
    try:
        fixtures = work / "fixtures"
        notes = make_fixtures(fixtures)
        reports = run_all(cases, Runner(work, fixtures), args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    notes.append(f"the command lines used {children_cpu_s() - cpu:.0f} CPU seconds ({args.jobs} at a time)")
    print_report(reports, args.old, args.new, time.monotonic() - start, notes, args.verbose)
    return 0 if all(r.same for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
