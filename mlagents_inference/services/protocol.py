"""The line protocol of stream, serve, Ray Serve and connect(): a line's answer, the lines waiting answered
together (one engine call for the plain ones), the JSON codec, the keys and ids a line may hold, addresses."""

from __future__ import annotations

import binascii
import itertools
import json
import time
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

import numpy as np

from ..api.contract import SEED_END, SEED_MIN, check_seed
from ..core.errors import UsageError
from ..core.observations import AgentMemories, check_rows_fit, finite_float32, shape_masks, shape_memory
from ..core.spec import InputSpec, continuous_only
from .errors import EngineFailed

if TYPE_CHECKING:  # (annotations only)
    from ..api.policy import Policy

__all__ = [
    "STREAM_KEYS",
    "STREAM_ID_CHARS",
    "NUMBER_TYPES",
    "BINARY_KEY",
    "binary_input",
    "binary_value",
    "echoed_id",
    "stream_array",
    "parse_address",
    "NON_FINITE_ACTIONS",
    "stream_answer",
    "answer_texts",
    "waiting_lines",
    "PlainLine",
    "answer_waiting",
    "ride_along",
    "json_codec",
]


# -- stream lines: what a line may hold, and its numbers read cheaply (mode_stream answers them)
STREAM_KEYS = {"obs", "id", "stochastic", "seed", "action_masks", "memory", "reset", "answer_b64"}


STREAM_ID_CHARS = 256  # the longest text "id"


NUMBER_TYPES = {float, int}


def echoed_id(msg):
    """The "id" a line's answer repeats, error answers too: a string of at most STREAM_ID_CHARS
    characters or an integer within +-2^53 (what every JSON reader keeps exact); else null."""
    ident = msg.get("id") if isinstance(msg, dict) else None
    if (
        isinstance(ident, str)
        and len(ident) <= STREAM_ID_CHARS
        or isinstance(ident, int)
        and not isinstance(ident, bool)
        and abs(ident) <= 2**53
    ):
        return ident
    return None


BINARY_KEY = "b64"  # an input as {"b64": base64 of its little-endian float32 bytes} (TF Serving's REST form)


def binary_value(values: np.ndarray) -> dict:
    """An answer's float array as {"b64": base64 of its little-endian float32 bytes} (a line's "answer_b64": true)."""
    return {BINARY_KEY: binascii.b2a_base64(np.ascontiguousarray(values, "<f4").tobytes(), newline=False).decode()}


def _binary_rows(values: np.ndarray) -> list:
    """binary_value of each row of `values` (rows first)."""
    data = np.ascontiguousarray(values, "<f4").tobytes()
    width, b2a = len(data) // max(len(values), 1), binascii.b2a_base64
    return [{BINARY_KEY: b2a(data[i * width : (i + 1) * width], newline=False).decode()} for i in range(len(values))]


def _base64(text: str) -> Optional[bytes]:
    """The bytes of strict base64 (RFC 4648, padded, no white space); None for anything else."""
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def _binary_bytes(value: dict, size: int) -> Optional[bytes]:
    """The bytes of a binary input ({"b64": text}) when they are a whole number of rows of `size` float32 (at least
    one); None otherwise (binary_input says why)."""
    text = value.get(BINARY_KEY) if len(value) == 1 else None
    raw = _base64(text) if type(text) is str else None
    return raw if raw and size and len(raw) % (4 * size) == 0 else None


def binary_input(spec: InputSpec, value: dict, what: str) -> np.ndarray:
    """One input of a line given as {"b64": base64 (RFC 4648, padded, no white space) of little-endian float32
    bytes}: one row of the input's shape (4 x its size bytes: an observation, as a list of numbers), or several
    (a multiple: [rows, ...shape], as a list of such lists). The bits are the values; nan and inf are refused as
    in the number form. UsageError naming `what` for anything else."""
    size = int(np.prod(spec.shape))
    form = f'{{"{BINARY_KEY}": "<base64 of little-endian float32 bytes>"}}'
    text = value.get(BINARY_KEY)
    if len(value) != 1 or type(text) is not str:
        raise UsageError(f"{what} as an object must be {form} and nothing else")
    raw = _base64(text)
    if raw is None:
        raise UsageError(f'{what}: "{BINARY_KEY}" is not base64 (RFC 4648, padded, no white space)')
    if not raw or len(raw) % (4 * size):
        raise UsageError(
            f'{what}: "{BINARY_KEY}" holds {len(raw)} bytes, not a whole number of rows of {size} float32 '
            f"({4 * size} bytes each)"
        )
    rows = len(raw) // (4 * size)
    array = np.frombuffer(raw, "<f4").reshape((rows, *spec.shape) if rows > 1 else spec.shape)
    return finite_float32(array, what)


def _json_numbers_only(value, depth: int = 0) -> bool:
    """JSON numbers (no strings, booleans or null) in lists nested at most 4 deep."""
    if depth > 4:
        return False
    if type(value) is list:
        return all(_json_numbers_only(v, depth + 1) for v in value)
    return type(value) is float or type(value) is int


def stream_array(spec: InputSpec, value: list) -> np.ndarray:
    """One input of a stream line as float32. A batch of entity buffers may be ragged (each
    agent sees its own number of entities): each is padded with absent (zero) rows."""
    if spec.kind == "entities" and value and all(type(v) is list and (not v or type(v[0]) is list) for v in value):
        most = max(len(v) for v in value)
        value = [v + [[0.0] * spec.shape[1]] * (most - len(v)) for v in value]
    try:
        return finite_float32(value, f'"{spec.name}"')
    except (ValueError, TypeError, OverflowError):
        raise UsageError(f'"{spec.name}": rows of different lengths')


def parse_address(option: str, text: str, unix: bool = True, listening: bool = True) -> tuple:
    """('unix', path) or ('tcp', host, port) from --listen/--http/connect(); UsageError in one line otherwise.
    `listening`: an address to listen on (port 0: any free port), else one to connect to (a port from 1)."""
    expected = f"HOST:PORT{' or unix:PATH' if unix else ''}"
    if not isinstance(text, str):
        raise UsageError(f"{option} {text!r}: expected {expected}")
    text = text.strip()
    if text.startswith("unix:") and unix:
        if not text[5:]:
            raise UsageError(f"{option} {text!r}: unix: needs a socket path")
        return ("unix", text[5:])
    if "://" in text:
        raise UsageError(
            f"{option} {text!r}: expected {expected}, not a URL"
            + ("" if listening else " (connect() speaks serve's --listen lines, not --http)")
        )
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise UsageError(
            f"{option} {text!r}: expected {expected}"
            + (" (port 0: any free port)" if listening else " (the port serve --listen printed)")
        )
    low = 0 if listening else 1
    if not (port.isascii() and port.isdigit()) or not low <= int(port) <= 65535:
        raise UsageError(f"{option} {text!r}: the port must be a whole number from {low} to 65535 (ASCII digits)")
    return ("tcp", host[1:-1] if host.startswith("[") and host.endswith("]") else host, int(port))


NON_FINITE_ACTIONS = "the observation drives the network beyond float32 (non-finite actions)"


def _engine_failure(policy: Policy, exc: Exception) -> str:
    """A stream line's error answer for the engine's own failure on it."""
    reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, MemoryError) or "alloc" in str(exc).lower():
        reason = "out of memory; send fewer rows per line"
    return f"the {policy.engine_name} engine failed on this line ({reason})"


def _stream_reply(
    policy: Policy, ident, key: Optional[str], out: dict, memories: AgentMemories, scope: str = "", binary=False
) -> dict:
    """A line's answer from its actions (UsageError when they are not finite, or when the id's next memory cannot be
    kept: the memories' bound); the id's next memory kept. `binary`: its float arrays as {"b64": ...}."""
    if not all(np.isfinite(np.asarray(value, np.float64)).all() for value in out.values()):
        raise UsageError(NON_FINITE_ACTIONS)
    if key is not None:
        memories.keep(key, np.asarray(out["memory"]).reshape(-1, policy.settings.memory_size), scope)
    answer = {"id": ident, **{name: _answer_value(np.asarray(value), binary) for name, value in out.items()}}
    if continuous_only(policy.settings):
        answer["actions"] = answer["continuous_actions"]
    return answer


def _stream_inputs(s, msg: dict) -> tuple:
    """(values, arrays): a line's inputs as sent and as arrays, in the policy's order."""
    names = [i.name for i in s.inputs]
    if "obs" in msg:
        if len(names) != 1:
            raise UsageError(
                f'this policy has {len(names)} inputs: give {", ".join(repr(n) for n in names)}, not "obs"'
            )
        values = [msg["obs"]]
    else:
        if missing := [n for n in names if n not in msg]:
            raise UsageError(
                f'"{missing[0]}" is missing'
                if len(names) > 1
                else f'"obs" must be a list of {s.inputs[0].shape[0] if s.inputs[0].kind == "vector" else "values"}'
            )
        values = [msg[n] for n in names]
    if unknown := sorted(k for k in msg if k not in STREAM_KEYS and k not in names):
        raise UsageError(f'unknown key "{unknown[0][:40]}"')
    arrays = []
    for spec, value in zip(s.inputs, values):
        if type(value) is dict:
            arrays.append(binary_input(spec, value, f'"{spec.name if len(names) > 1 else "obs"}"'))
            continue
        if not isinstance(value, list) or (spec.kind != "entities" and not value):
            raise UsageError(
                f'"{spec.name if len(names) > 1 else "obs"}" must be a list of numbers or a list of such lists'
            )
        if not _json_numbers_only(value):
            raise UsageError(f'"{spec.name if len(names) > 1 else "obs"}" must hold numbers only')
        arrays.append(stream_array(spec, value))
    return values, arrays


def _stream_options(msg: dict) -> tuple:
    """(stochastic, seed, reset, masks, memory) as a line gives them, each checked."""
    stochastic, seed, reset = msg.get("stochastic", False), msg.get("seed", 0), msg.get("reset", False)
    if not isinstance(stochastic, bool):
        raise UsageError('"stochastic" must be true or false')
    check_seed(seed, '"seed"', optional=False)
    if not isinstance(reset, bool):
        raise UsageError('"reset" must be true or false')
    if not isinstance(msg.get("answer_b64", False), bool):
        raise UsageError('"answer_b64" must be true or false')
    masks, memory = msg.get("action_masks"), msg.get("memory")
    for name, value, what in (("action_masks", masks, "numbers (0 or 1)"), ("memory", memory, "numbers")):
        if value is not None and not _json_numbers_only(value):
            raise UsageError(f'"{name}" must hold {what} only')
    return stochastic, seed, reset, masks, memory


def stream_answer(policy: Policy, msg, memories: AgentMemories, scope: str = "") -> dict:
    """One stream line's answer; UsageError for a bad line and for a line the engine fails on (out of memory, say).
    `scope` prefixes the id's memory key (serve: one scope per connection, so two clients' agent 0 are two agents)."""
    s = policy.settings
    if not isinstance(msg, dict):
        raise UsageError('expected an object like {"obs": [...]}')
    ident = msg.get("id")
    if isinstance(ident, str) and len(ident) > STREAM_ID_CHARS:
        raise UsageError(f'"id" is longer than {STREAM_ID_CHARS} characters')
    values, arrays = _stream_inputs(s, msg)
    stochastic, seed, reset, masks, memory = _stream_options(msg)
    # one memory per agent id (a line without "id" keeps none: it starts from its "memory" or zeros)
    key = scope + json.dumps(ident) if s.memory_size and ident is not None else None
    if key is not None and memory is None and not reset and key not in memories:
        memories.check(key, ident, scope)  # (dropped at this client's bound: refused, not started from zeros)
    if key is not None and memory is None and not reset and key in memories:
        memory = memories[key]  # [agents, memory size]
        rows = len(arrays[0]) if arrays[0].ndim > len(s.inputs[0].shape) else 1
        if len(memory) != rows:
            raise UsageError(
                f"id {ident}: its memory is for {len(memory)} agent(s), this line has {rows}; "
                f'send "reset": true to start it over'
            )
    if ident is not None and echoed_id(msg) is None:  # (a string too long was refused above)
        raise UsageError('"id" must be a string, an integer or null')
    batched = (
        arrays[0].ndim > len(s.inputs[0].shape)
        if type(values[0]) is dict  # (a binary input: several rows, or one observation)
        else isinstance(values[0], list)
        and len(values[0]) > 0
        and isinstance(values[0][0], list)
        and (s.inputs[0].kind != "entities" or (values[0][0] and isinstance(values[0][0][0], list)))
    )
    observations = arrays if batched or len(arrays) > 1 else arrays[0]
    check_rows_fit(len(arrays[0]) if batched else 1, s, "per line")
    try:
        out = policy.act(observations, masks, deterministic=not stochastic, seed=seed, memory=memory)
    except UsageError:
        raise
    except Exception as exc:  # the engine's own failure (an allocation, say) ends this line, not the stream
        raise UsageError(_engine_failure(policy, exc))
    return _stream_reply(policy, ident, key, out, memories, scope, msg.get("answer_b64", False))


def answer_texts(dumps: Callable, answers: list) -> list:
    """The answers as JSON bytes; one holding a non-finite number that slipped through becomes an error (strict JSON
    or nothing), in `answers` too."""
    try:
        return [dumps(answer) for answer in answers]
    except (TypeError, ValueError):
        texts = []
        for k, answer in enumerate(answers):
            try:
                texts.append(dumps(answer))
            except (TypeError, ValueError):
                answers[k] = {"id": answer.get("id"), "error": "the answer holds non-finite numbers"}
                texts.append(dumps(answers[k]))
        return texts


# -- stream lines already waiting, answered together (one engine call per waiting group)
def waiting_lines(stream, limit: int):
    """Groups of stream lines (bytes without the newline; None for a line longer than `limit`): every complete line
    already waiting on `stream`. A group is what one read returns plus what is still waiting right after (select with a
    zero timeout): a line is never held back to gather others. Blank lines are dropped."""
    import select

    read = (
        getattr(stream, "read1", None) or getattr(stream, "read", None) or stream.readline
    )  # (a stand-in with readline alone)
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is an OSError)
        fd = None
    pending, skipping = b"", False
    while True:
        chunks = [read(1 << 16)]
        size = len(chunks[0])
        # (up to 256 KiB: in a larger group the first lines wait longer, its objects outgrow the caches, and its
        # answers fill
        # the pipe while the reader waits)
        while chunks[-1] and fd is not None and size < (1 << 18) and select.select([fd], [], [], 0)[0]:
            chunks.append(read(1 << 16))
            size += len(chunks[-1])
        data = b"".join(chunks)
        if not data:  # end of input: a last line without its newline is a line too
            if pending.strip() and not skipping:
                yield [pending]
            return
        *complete, tail = (pending + data).split(b"\n")
        if not skipping and len(pending) + len(data) <= limit:  # (no line too long: the blank ones dropped)
            group = [line for line in complete if line and not line.isspace()]
        else:
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


class PlainLine(NamedTuple):
    """A plain line waiting for its engine call (answer_waiting): its place among the lines, its message, its id,
    its memory key (None: no memory kept), its observations (one flat list an input, or its float32 array where the
    line gave it as {"b64": ...}), masks and memory ([1, size]; None where the line has none)."""

    index: int
    msg: dict
    ident: object
    key: Optional[str]
    values: list
    masks: Optional[np.ndarray]
    memory: Optional[np.ndarray]


def answer_waiting(
    policy: Policy,
    lines: list,
    memories: AgentMemories,
    loads: Callable,
    limit: int,
    scopes: Optional[list] = None,
    riders: Optional[list] = None,
) -> list:
    """Answers to a group of waiting lines, in order, each what it would have been alone: plain lines (one observation
    of each vector input as a flat list of JSON numbers or one row of {"b64": ...}, deterministic; optional "id",
    "reset", "memory", "action_masks") share one engine call (an engine whose rows do not depend on the batch they
    are in: Engine.rows_independent, onnxruntime's), their observations read and checked as one array per input
    (_answer_plain). Any other line, and a second line of an id already in the call, first lets the call run, then
    goes through stream_answer, whose rules and messages stay the only ones. Bad lines get their error in place.
    `scopes` (serve): each line's memory scope (its connection), as stream_answer's `scope`. `riders` (serve's V2
    requests, checked already): their rows go into the first engine call, after the plain lines' (ride_along)."""
    s = policy.settings
    riders = list(riders) if riders else []
    answers: list = [None] * len(lines)
    rules = _plain_rules(policy)
    plain: list = []  # (PlainLine: the lines of the next engine call)
    keys: set = set()
    # A plain line's observations are checked with the others' when the call runs, unless keeping this group's
    # memories could drop an id (AgentMemories' bounds): then as each line comes, so that a memory is read when
    # it was read line by line.
    budget = memories.budget  # (the bounds count every memories sharing it: serve's lanes)
    exact = bool(s.memory_size) and (
        budget.ids + len(lines) >= memories.max_ids
        or budget.nbytes
        + 256 * len(lines)
        + (6 + 4 * s.memory_size) * sum(map(len, filter(None, lines)))
        + sum(map(len, scopes or ()))
        > memories.max_bytes
        or _near_scope_bound(memories, lines)
    )
    for i, raw in enumerate(lines):
        ident = msg = None
        try:
            if raw is None:
                raise UsageError(f"line longer than {limit} bytes (--max-line-bytes)")
            try:
                msg = loads(raw)
            except (ValueError, RecursionError):
                raise UsageError("line is not JSON (or nested too deep)")
            quick = _plain_line(rules, msg) if rules is not None else None
            if quick is not None and exact and not _finite(quick[1]):
                quick = None
            if quick is not None:
                ident, values, masks, memory = quick
                key = None
                if s.memory_size and ident is not None:
                    key = str(ident) if type(ident) is int else json.dumps(ident)
                    key = scopes[i] + key if scopes else key
                    if key in keys:  # this id's memory comes from the line before
                        _answer_plain(policy, plain, answers, memories, scopes, riders)
                        keys.clear()
                    if memory is None and key in memories and not msg.get("reset", False):
                        memory = memories[key]  # [agents, memory size]
                        quick = quick if len(memory) == 1 else None  # (stream_answer tells the count that differs)
                    elif (
                        memory is None
                        and key in memories.dropped.get(scopes[i] if scopes else "", ())
                        and not msg.get("reset", False)
                    ):
                        quick = None  # (dropped at its client's bound: stream_answer's error)
                    keys.add(key)
                if quick is not None:
                    plain.append(PlainLine(i, msg, ident, key, values, masks, memory))
                    continue
            _answer_plain(policy, plain, answers, memories, scopes, riders)
            keys.clear()
            ident = echoed_id(msg)
            answers[i] = stream_answer(policy, msg, memories, scopes[i] if scopes else "")
        except UsageError as exc:
            answers[i] = {"id": ident, "error": str(exc)}
        except MemoryError:  # reading the line itself: that line fails, the stream goes on
            answers[i] = {"id": ident, "error": "out of memory on this line; send fewer rows per line"}
    _answer_plain(policy, plain, answers, memories, scopes, riders)
    if riders:
        ride_along(policy, [], 0, riders)
    return answers


def _near_scope_bound(memories: AgentMemories, lines: list) -> bool:
    """Whether keeping this group's memories could drop an id at its client's bound (its ids in every memories
    sharing the budget)."""
    totals = memories.budget.scopes.values()
    return (
        max((total[0] for total in totals), default=0) + len(lines) >= memories.scope_ids
        or max((total[1] for total in totals), default=0) + 512 * len(lines) > memories.scope_bytes
    )


def _plain_rules(policy: Policy) -> Optional[tuple]:
    """What a plain line of this policy may hold (_plain_line), or None where no line is plain (an engine whose rows
    may depend on the batch, engines.factory.Engine's rows_independent false: the torch engine; an input that is not
    a vector)."""
    s = policy.settings
    if not getattr(policy.engine, "rows_independent", False) or any(i.kind != "vector" for i in s.inputs):
        return None
    names = [i.name for i in s.inputs]
    return s, names, STREAM_KEYS | set(names), {"id", "obs", *names}, [i.shape[0] for i in s.inputs]


def _plain_line(rules: tuple, msg) -> Optional[tuple]:
    """A plain line's (id, inputs: lists or float32 arrays of binary inputs, masks [1, width] or None, memory [1, size]
    or None), checked but for its observations' values (finite within float32: _answer_plain checks them together);
    None for any other line."""
    s, names, allowed, bare, sizes = rules
    if type(msg) is not dict:
        return None
    get, keys = msg.get, msg.keys()
    ident, masks, memory = get("id"), None, None
    if ident is not None and not (
        type(ident) is str and len(ident) <= STREAM_ID_CHARS or type(ident) is int and abs(ident) <= 2**53
    ):
        return None
    if not keys <= bare:  # (the other keys a plain line may hold)
        seed, masks, memory = get("seed", 0), get("action_masks"), get("memory")
        if (
            not keys <= allowed
            or get("stochastic", False) is not False
            or type(get("reset", False)) is not bool
            or type(get("answer_b64", False)) is not bool
            or type(seed) is not int
            or not SEED_MIN <= seed < SEED_END
        ):
            return None
        try:
            if masks is not None:
                if not s.discrete_branches or type(masks) is not list or not set(map(type, masks)) <= NUMBER_TYPES:
                    return None
                masks = shape_masks(masks, s.discrete_branches, 1, False)
            if memory is not None:
                if not s.memory_size or type(memory) is not list or not set(map(type, memory)) <= NUMBER_TYPES:
                    return None
                memory = shape_memory(memory, s.memory_size, 1, False)[:, 0]
        except (UsageError, OverflowError):
            return None
    if len(names) == 1:
        value = get(names[0]) if "obs" not in keys else None if names[0] in keys else msg["obs"]
        if type(value) is dict:  # (a binary input of one row: its float32 array)
            value = _plain_binary(value, sizes[0])
            return None if value is None else (ident, (value,), masks, memory)
        if type(value) is not list or len(value) != sizes[0] or not set(map(type, value)) <= NUMBER_TYPES:
            return None
        return ident, (value,), masks, memory
    values = _plain_values([get(name) for name in names], sizes)  # (an "obs" beside them is not looked at)
    return None if values is None else (ident, values, masks, memory)


def _plain_binary(value: dict, size: int) -> Optional[np.ndarray]:
    """A plain line's binary input ({"b64": ...} of exactly one row of `size` float32) as its array; else None."""
    raw = _binary_bytes(value, size)
    return np.frombuffer(raw, "<f4") if raw is not None and len(raw) == 4 * size else None


def _plain_values(values: list, sizes: list) -> Optional[list]:
    """A plain line's inputs (several), each one row: a list of `size` JSON numbers or a binary input; else None."""
    for k, (value, size) in enumerate(zip(values, sizes)):
        if type(value) is dict:
            values[k] = _plain_binary(value, size)
            if values[k] is None:
                return None
        elif type(value) is not list or len(value) != size or not set(map(type, value)) <= NUMBER_TYPES:
            return None
    return values


def _finite(values: list) -> bool:
    """A plain line's observations finite within float32 (one line's share of _answer_plain's check)."""
    try:
        return all(np.isfinite(np.array(value, np.float32)).all() for value in values)
    except OverflowError:
        return False


def _answer_plain(
    policy: Policy,
    plain: list,
    answers: list,
    memories: AgentMemories,
    scopes: Optional[list],
    riders: Optional[list] = None,
) -> None:
    """The plain lines waiting (emptied): their observations read as one array per input and checked together; the
    lines that pass share one engine call, one that fails goes through stream_answer (its error) in its place."""
    if not plain:
        return
    arrays, bad = [], set()  # (the lines that fail: rare)
    for k in range(len(plain[0].values)):
        column = [line.values[k] for line in plain]
        try:
            array = np.array(column, np.float32)
        except OverflowError:  # an integer beyond float64: that line's error
            array = np.zeros((len(column), len(column[0])), np.float32)
            for j, value in enumerate(column):
                try:
                    array[j] = np.array(value, np.float32)
                except OverflowError:
                    bad.add(j)
        if not np.isfinite(array).all():
            bad.update(np.flatnonzero(~np.isfinite(array).all(axis=1)).tolist())
        arrays.append(array)
    start = 0
    for j in sorted(bad) + [len(plain)]:
        _run_plain(policy, plain[start:j], [a[start:j] for a in arrays], answers, memories, scopes, riders)
        if j < len(plain):
            i, msg = plain[j].index, plain[j].msg
            try:
                answers[i] = stream_answer(policy, msg, memories, scopes[i] if scopes else "")
            except UsageError as exc:
                answers[i] = {"id": echoed_id(msg), "error": str(exc)}
            except MemoryError:
                answers[i] = {"id": echoed_id(msg), "error": "out of memory on this line; send fewer rows per line"}
        start = j + 1
    plain.clear()


def _run_plain(
    policy: Policy,
    plain: list,
    flat: list,
    answers: list,
    memories: AgentMemories,
    scopes: Optional[list] = None,
    riders: Optional[list] = None,
) -> None:
    """One engine call for these plain lines (each alone where it fails: the failing line's error), their answers."""
    s, rows = policy.settings, len(plain)
    if not rows:
        return
    if s.discrete_branches:
        width = sum(s.discrete_branches)
        masks = [line.masks for line in plain if line.masks is not None]
        flat.append(
            np.ones((rows, width), np.float32)
            if not masks
            else np.concatenate([np.ones((1, width), np.float32) if m is None else m for m in (p.masks for p in plain)])
        )
    if s.memory_size:
        zeros = np.zeros((1, s.memory_size), np.float32)
        flat.append(np.concatenate([zeros if line.memory is None else line.memory for line in plain])[:, None])
    out = ride_along(policy, flat, rows, riders) if riders else None  # (None: none, or that call failed)
    try:
        out = policy.run(flat, rows) if out is None else out
    except Exception as exc:  # noqa: BLE001 - the engine's failure (out of memory, say) is a line's answer
        if rows == 1:
            answers[plain[0].index] = {"id": plain[0].ident, "error": _engine_failure(policy, exc)}
        for j in range(rows) if rows > 1 else ():  # each line alone, so that it is the failing line's
            _run_plain(
                policy, plain[j : j + 1], [a[j : j + 1] for a in flat[: len(s.inputs)]], answers, memories, scopes
            )
        return
    floats = [value for value in out.values() if value.dtype.kind == "f"]
    finite = (
        None
        if all(np.isfinite(value).all() for value in floats)
        else np.logical_and.reduce([np.isfinite(value).reshape(rows, -1).all(axis=1) for value in floats])
    )  # (None: every row's are)
    columns = _answer_columns(plain, out)
    fields, again = ["id", *out], []
    if continuous_only(s):  # ("actions": the continuous actions again)
        fields, again = fields + ["actions"], columns
    built = _dicts(fields, [[line.ident for line in plain], *columns, *again])
    first = plain[0].index
    if plain[-1].index - first == rows - 1:  # (in a row, as they usually are)
        answers[first : first + rows] = built
    else:
        for line, answer in zip(plain, built):
            answers[line.index] = answer
    if s.memory_size:
        keys, memory = [line.key for line in plain], out["memory"].reshape(rows, 1, s.memory_size)
        keep = list(range(rows))
        if None in keys or finite is not None:
            keep = [j for j, key in enumerate(keys) if key is not None and (finite is None or finite[j])]
            keys, memory = [keys[j] for j in keep], memory[keep]
        owners = [scopes[plain[j].index] for j in keep] if scopes else None
        for k, error in memories.keep_rows(keys, memory, owners):
            answers[plain[keep[k]].index] = {"id": plain[keep[k]].ident, "error": error}
    for j in np.flatnonzero(~finite).tolist() if finite is not None else ():
        answers[plain[j].index] = {"id": plain[j].ident, "error": NON_FINITE_ACTIONS}


def _answer_columns(plain: list, out: dict) -> list:
    """Each output's values a row: numbers, or {"b64": ...} for the float arrays of the lines that ask "answer_b64"
    (where every line does, the whole column at once, no Python floats made for it)."""
    binary = [j for j, line in enumerate(plain) if line.msg.get("answer_b64")]
    columns = []
    for value in out.values():
        if not binary or value.dtype.kind != "f":
            columns.append(value.tolist())
        elif len(binary) == len(plain):
            columns.append(_binary_rows(value))
        else:
            column = value.tolist()
            for j in binary:
                column[j] = binary_value(value[j])
            columns.append(column)
    return columns


def _answer_value(value: np.ndarray, binary: bool):
    """An output in an answer: its numbers, or {"b64": ...} for a float array where the line asked "answer_b64"."""
    return binary_value(value) if binary and value.dtype.kind == "f" else value.tolist()


def ride_along(policy: Policy, flat: list, rows: int, riders: list) -> Optional[dict]:
    """One engine call for `rows` rows of plain lines (`flat`, the engine's arrays; rows 0: none) and every rider's
    rows after them (serve's V2 requests: `flat`, `rows`, `fail(text)`, and `ride_together(riders, raw, at, ns,
    total)`, the first rider's called for all with every engine output a step needs; the list is emptied). The plain
    rows' deterministic actions come back. Where the call fails, each rider runs alone (its own failure its error)
    and None comes back."""
    these = riders[:]
    riders.clear()
    fetch = list(dict.fromkeys(policy.fetch[True] + policy.fetch[False]))
    width = len(these[0].flat)
    arrays = [
        np.concatenate(([flat[k]] if rows else []) + [r.flat[k] for r in these])
        if rows or len(these) > 1
        else these[0].flat[k]
        for k in range(width)
    ]
    total = rows + sum(r.rows for r in these)
    try:
        started = time.perf_counter_ns()
        raw = policy.engine.run(arrays, fetch)
        ns = time.perf_counter_ns() - started
    except Exception as exc:  # noqa: BLE001 - the engine's failure is the request's answer
        if len(these) == 1 and not rows:
            these[0].fail(EngineFailed(_engine_failure(policy, exc)))
        else:
            for rider in these:
                ride_along(policy, [], 0, [rider])
        return None
    these[0].ride_together(these, raw, rows, ns, total)
    if not rows:
        return None
    return policy.decide({k: v[:rows] if v.shape[:1] == (total,) else v for k, v in raw.items()}, rows)


def _dicts(fields: list, columns: list) -> list:
    """One dict per row of `columns`, keyed by `fields` (a dict display where there are few: faster than dict(zip))."""
    if len(fields) == 2:
        a, b = fields
        return [{a: x, b: y} for x, y in zip(*columns)]
    if len(fields) == 3:
        a, b, c = fields
        return [{a: x, b: y, c: z} for x, y, z in zip(*columns)]
    return list(map(dict, map(zip, itertools.repeat(fields), zip(*columns))))


def json_codec() -> tuple:
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
