"""stream: JSON lines in, one answer per line out; the lines already waiting are answered together (docs/stream.md)."""
import json
import sys
import time
from typing import Callable, Optional

import numpy as np

from .context import Context, _continuous_only, _percentiles, check_rows_fit
from .errors import UsageError
from .observations import STREAM_ID_CHARS, STREAM_KEYS, AgentMemories, _echoed_id, _json_numbers_only, _quick_request, stream_array
from .policy import Policy


def _engine_failure(policy: Policy, exc: Exception) -> str:
    """A stream line's error answer for the engine's own failure on it."""
    reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, MemoryError) or "alloc" in str(exc).lower():
        reason = "out of memory; send fewer rows per line"
    return f"the {policy.engine_name} engine failed on this line ({reason})"


def _stream_reply(policy: Policy, ident, key: Optional[str], out: dict, memories: AgentMemories) -> dict:
    """A line's answer from its actions (UsageError when they are not finite); the id's next memory kept."""
    if not all(np.isfinite(np.asarray(value, np.float64)).all() for value in out.values()):
        raise UsageError("the observation drives the network beyond float32 (non-finite actions)")
    if key is not None:
        memories.keep(key, np.asarray(out["memory"]).reshape(-1, policy.settings.memory_size))
    answer = {"id": ident, **{name: np.asarray(value).tolist() for name, value in out.items()}}
    if _continuous_only(policy.settings):
        answer["actions"] = answer["continuous_actions"]
    return answer


def stream_answer(policy: Policy, msg, memories: AgentMemories, scope: str = "") -> dict:
    """One stream line's answer; UsageError for a bad line and for a line the engine fails on (out of memory, say).
    `scope` prefixes the id's memory key (serve: one scope per connection, so two clients' agent 0 are two agents)."""
    s = policy.settings
    if not isinstance(msg, dict):
        raise UsageError('expected an object like {"obs": [...]}')
    ident = msg.get("id")
    if isinstance(ident, str) and len(ident) > STREAM_ID_CHARS:
        raise UsageError(f'"id" is longer than {STREAM_ID_CHARS} characters')
    names = [i.name for i in s.inputs]
    if "obs" in msg:
        if len(names) != 1:
            raise UsageError(f'this policy has {len(names)} inputs: give {", ".join(repr(n) for n in names)}, not "obs"')
        values = [msg["obs"]]
    else:
        if missing := [n for n in names if n not in msg]:
            raise UsageError(f'"{missing[0]}" is missing' if len(names) > 1 else
                             f'"obs" must be a list of {s.inputs[0].shape[0] if s.inputs[0].kind == "vector" else "values"}')
        values = [msg[n] for n in names]
    if unknown := sorted(k for k in msg if k not in STREAM_KEYS and k not in names):
        raise UsageError(f'unknown key "{unknown[0][:40]}"')
    arrays = []
    for spec, value in zip(s.inputs, values):
        if not isinstance(value, list) or (spec.kind != "entities" and not value):
            raise UsageError(f'"{spec.name if len(names) > 1 else "obs"}" must be a list of numbers or a list of such lists')
        if not _json_numbers_only(value):
            raise UsageError(f'"{spec.name if len(names) > 1 else "obs"}" must hold numbers only')
        arrays.append(stream_array(spec, value))
    stochastic, seed, reset = msg.get("stochastic", False), msg.get("seed", 0), msg.get("reset", False)
    if not isinstance(stochastic, bool):
        raise UsageError('"stochastic" must be true or false')
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise UsageError('"seed" must be a non-negative integer')
    if not isinstance(reset, bool):
        raise UsageError('"reset" must be true or false')
    masks, memory = msg.get("action_masks"), msg.get("memory")
    for name, value, what in (("action_masks", masks, "numbers (0 or 1)"), ("memory", memory, "numbers")):
        if value is not None and not _json_numbers_only(value):
            raise UsageError(f'"{name}" must hold {what} only')
    # one memory per agent id (a line without "id" keeps none: it starts from its "memory" or zeros)
    key = scope + json.dumps(ident) if s.memory_size and ident is not None else None
    if key is not None and memory is None and not reset and key in memories:
        memory = memories[key]  # [agents, memory size]
        rows = len(arrays[0]) if arrays[0].ndim > len(s.inputs[0].shape) else 1
        if len(memory) != rows:
            raise UsageError(f'id {ident}: its memory is for {len(memory)} agent(s), this line has {rows}; '
                             f'send "reset": true to start it over')
    if ident is not None and _echoed_id(msg) is None:  # (a string too long was refused above)
        raise UsageError('"id" must be a string, an integer or null')
    batched = isinstance(values[0], list) and len(values[0]) > 0 and isinstance(values[0][0], list) and \
        (s.inputs[0].kind != "entities" or (values[0][0] and isinstance(values[0][0][0], list)))
    observations = arrays if batched or len(arrays) > 1 else arrays[0]
    check_rows_fit(len(arrays[0]) if batched else 1, s, "per line")
    try:
        out = policy.act(observations, masks, deterministic=not stochastic, seed=seed, memory=memory)
    except UsageError:
        raise
    except Exception as exc:  # the engine's own failure (an allocation, say) ends this line, not the stream
        raise UsageError(_engine_failure(policy, exc))
    return _stream_reply(policy, ident, key, out, memories)


def mode_stream(ctx: Context):
    """JSON lines on stdin -> JSON lines on stdout, one answer per line, in order, flushed as soon
    as the lines already waiting are answered (answer_waiting: one engine call for them).
    In:  {"obs": [...] | [[...], ...]} for a one-input policy, or {"obs_0": ..., "obs_1": ...};
         optional "action_masks", "memory" (LSTM; else the id's last memory, zeros for a new id),
         "reset": true (episode end: start this id from zeros), "id", "stochastic", "seed".
    Out: {"id": ..., "continuous_actions": [...], "discrete_actions": [...], "memory": [...]}
         ("actions" too for a continuous-only policy) or {"id": ..., "error": "..."}."""
    policy = ctx.policy
    write, flush = sys.stdout.write, sys.stdout.flush
    loads, dumps = _json_codec()
    lines = errors = 0
    latencies: list = []
    memories = AgentMemories()
    clock = time.perf_counter
    limit = ctx.args.max_line_bytes
    with np.errstate(over="ignore"):  # an observation beyond float32 becomes inf, answered with an error
        for group in waiting_lines(sys.stdin.buffer, limit):
            t0 = clock()
            texts = []
            for answer in answer_waiting(policy, group, memories, loads, limit):
                try:
                    texts.append(dumps(answer))
                except (TypeError, ValueError):  # a non-finite number slipped through: strict JSON or nothing
                    answer = {"id": answer.get("id"), "error": "the answer holds non-finite numbers"}
                    texts.append(dumps(answer))
                errors += "error" in answer
            write(b"\n".join(texts).decode() + "\n")
            flush()
            lines += len(texts)
            if len(latencies) < 1_000_000:  # bounded: a day-long stream keeps the first million
                latencies += [(clock() - t0) * 1e3] * len(texts)
    if ctx.args.stream_stats:
        p = _percentiles(latencies) if latencies else {"p50_ms": float("nan"), "p99_ms": float("nan")}
        print(f"[stream] lines={lines} errors={errors} p50={p['p50_ms']:.4f}ms p99={p['p99_ms']:.4f}ms "
              f"engine={ctx.engine_name} device={ctx.device}", file=sys.stderr)
    return None, True


# -- stream lines already waiting, answered together (one engine call per waiting group)
def waiting_lines(stream, limit: int):
    """Groups of stream lines (bytes without the newline; None for a line longer than `limit`): every complete line
    already waiting on `stream`. A group is what one read returns plus what is still waiting right after (select with a
    zero timeout): a line is never held back to gather others. Blank lines are dropped."""
    import select
    read = getattr(stream, "read1", None) or getattr(stream, "read", None) or stream.readline  # (a stand-in with readline alone)
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is an OSError)
        fd = None
    pending, skipping = b"", False
    while True:
        data = read(1 << 16)
        while data and fd is not None and len(data) < (1 << 20) and select.select([fd], [], [], 0)[0]:
            more = read(1 << 16)
            if not more:
                break
            data += more
        if not data:  # end of input: a last line without its newline is a line too
            if pending.strip() and not skipping:
                yield [pending]
            return
        *complete, tail = (pending + data).split(b"\n")
        group = []
        for line in complete:
            if skipping:  # the end of a line already answered as too long
                skipping = False
            elif len(line) > limit:
                group.append(None)
            elif line.strip():
                group.append(line)
        if skipping or len(tail) > limit:  # a too-long line is answered at once, its rest skipped
            if not skipping:
                group.append(None)
            skipping, tail = True, b""
        pending = tail
        if group:
            yield group


def answer_waiting(policy: Policy, lines: list, memories: AgentMemories, loads: Callable, limit: int,
                   scopes: Optional[list] = None) -> list:
    """Answers to a group of waiting lines, in order, each what it would have been alone: plain
    lines (_quick_request) share one engine call (onnxruntime, whose rows do not depend on the
    batch they are in); any other line, and a second line of an id already in the call, first
    lets the call run, then goes through stream_answer. Bad lines get their error in place.
    `scopes` (serve): each line's memory scope (its connection), as stream_answer's `scope`."""
    s = policy.settings
    answers: list = [None] * len(lines)
    batch: list = []  # (index, id, memory key, inputs, masks, memory)
    together = policy.engine_name == "onnxruntime"

    def run_batch() -> None:
        if not batch:
            return
        rows = len(batch)
        flat = [np.stack([b[3][k] for b in batch]) for k in range(len(s.inputs))]
        if s.discrete_branches:
            flat.append(np.stack([np.ones(sum(s.discrete_branches), np.float32) if b[4] is None else b[4] for b in batch]))
        if s.memory_size:
            flat.append(np.stack([np.zeros(s.memory_size, np.float32) if b[5] is None else b[5]
                                  for b in batch])[:, None])
        try:
            out = policy.run(flat, rows)
        except Exception as exc:  # noqa: BLE001 - the engine's failure (out of memory, say) is a line's answer
            waiting = batch[:]
            batch.clear()
            if rows == 1:
                answers[waiting[0][0]] = {"id": waiting[0][1], "error": _engine_failure(policy, exc)}
            for entry in waiting if rows > 1 else ():  # each line alone, so that it is the failing line's
                batch.append(entry)
                run_batch()
            return
        for j, (i, ident, key, _, _, _) in enumerate(batch):
            try:
                answers[i] = _stream_reply(policy, ident, key, {name: value[j] for name, value in out.items()}, memories)
            except UsageError as exc:
                answers[i] = {"id": ident, "error": str(exc)}
        batch.clear()

    for i, raw in enumerate(lines):
        ident = None
        try:
            if raw is None:
                raise UsageError(f"line longer than {limit} bytes (--max-line-bytes)")
            try:
                msg = loads(raw)
            except (ValueError, RecursionError):
                raise UsageError("line is not JSON (or nested too deep)")
            quick = _quick_request(policy, msg) if together else None
            if quick is not None:
                ident, inputs, masks, memory, reset = quick
                key = (scopes[i] if scopes else "") + json.dumps(ident) if s.memory_size and ident is not None else None
                if key is not None and any(b[2] == key for b in batch):
                    run_batch()  # this id's memory comes from the line before
                if key is not None and memory is None and not reset and key in memories:
                    if len(memories[key]) != 1:
                        quick = None  # (stream_answer tells the agent count that differs)
                    else:
                        memory = memories[key][0]
            if quick is None:
                run_batch()
                ident = _echoed_id(msg)
                answers[i] = stream_answer(policy, msg, memories, scopes[i] if scopes else "")
            else:
                batch.append((i, ident, key, inputs, masks, memory))
        except UsageError as exc:
            answers[i] = {"id": ident, "error": str(exc)}
        except MemoryError:  # reading the line itself: that line fails, the stream goes on
            answers[i] = {"id": ident, "error": "out of memory on this line; send fewer rows per line"}
    run_batch()
    return answers


def _json_codec() -> tuple:
    """(loads, dumps to bytes): orjson where installed (several times faster), else the standard library; answers strict
    JSON either way. A line orjson refuses is read again by the standard library, so that every line gets the answer it
    got before (NaN in an observation: that error, with the line's id)."""
    def strict_dumps(obj) -> bytes:
        return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
    try:
        import orjson
    except ImportError:
        return json.loads, strict_dumps

    def loads(raw: bytes):
        try:
            return orjson.loads(raw)
        except ValueError:
            return json.loads(raw)
    return loads, orjson.dumps
