"""stream: JSON lines on stdin, one answer per line on stdout; the lines already waiting are answered together
(the line protocol: services.protocol; docs/stream.md)."""

from __future__ import annotations

import gc
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from ..core.observations import AgentMemories
from ..core.report import latency_text, percentiles
from ..services.protocol import answer_texts, answer_waiting, json_codec, waiting_lines

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = ["mode_stream"]


def mode_stream(ctx: Context):
    """JSON lines on stdin -> JSON lines on stdout, one answer per line, in order, flushed as soon
    as the lines already waiting are answered (answer_waiting: one engine call for them).
    In:  {"obs": [...] | [[...], ...]} for a one-input policy, or {"obs_0": ..., "obs_1": ...};
         optional "action_masks", "memory" (LSTM; else the id's last memory, zeros for a new id),
         "reset": true (episode end: start this id from zeros), "id", "stochastic", "seed".
    Out: {"id": ..., "continuous_actions": [...], "discrete_actions": [...], "memory": [...]}
         ("actions" too for a continuous-only policy) or {"id": ..., "error": "..."}."""
    policy = ctx.policy
    gc.freeze()  # (what is loaded stays: a full collection need not walk torch's objects again and again)
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)  # UTF-8 bytes straight to the pipe (else text, as the encoding says)
    if (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") != "utf8":
        out = None
    write, flush = (
        (out.write, out.flush) if out is not None else (lambda b: sys.stdout.write(b.decode()), sys.stdout.flush)
    )
    loads, dumps = json_codec()
    lines = errors = 0
    latencies: list = []
    memories = AgentMemories()
    clock = time.perf_counter
    limit = ctx.args.max_line_bytes
    with np.errstate(over="ignore"):  # an observation beyond float32 becomes inf, answered with an error
        for group in waiting_lines(sys.stdin.buffer, limit):
            t0 = clock()
            answers = answer_waiting(policy, group, memories, loads, limit)
            texts = answer_texts(dumps, answers)
            errors += sum("error" in answer for answer in answers)
            texts.append(b"")
            write(b"\n".join(texts))
            flush()
            lines += len(answers)
            if len(latencies) < 1_000_000:  # bounded: a day-long stream keeps the first million
                latencies += [(clock() - t0) * 1e3] * len(answers)
    if ctx.args.stream_stats:
        from ..engines.factory import graph_calls_text

        p = latency_text(percentiles(latencies)) if latencies else {"p50_ms": "n/a", "p99_ms": "n/a"}
        graphs = graph_calls_text(policy.engine)  # (the torch engine on a card: captures, replays, eager calls)
        print(
            f"[stream] lines={lines} errors={errors} p50={p['p50_ms']} p99={p['p99_ms']} "
            f"engine={ctx.engine_name} device={ctx.device}" + (f" graphs={graphs}" if graphs else ""),
            file=sys.stderr,
        )
    return None, True
