"""inference.connect(): the policy's Python API over a serve connection, torch-free (docs/serve.md): the same checks
as inference.load()'s policy (shared: observations), the same answers, through the stream's lines."""

import json
import os
import select
import socket
import time

import numpy as np

from ..api.contract import (
    check_act_arguments,
    check_agent_ids,
    check_behavior_spec,
    check_no_extras,
    steps_arguments,
)
from ..core.errors import UsageError
from ..core.observations import observation_arrays, shape_masks, shape_memory
from ..core.spec import InputSpec, PolicySettings, action_tuple, continuous_only, no_actions
from ..services.protocol import parse_address

__all__ = ["connect", "RemotePolicy", "INFO_LINE_BYTES", "ANSWER_NUMBER_BYTES"]


def _codec() -> tuple:
    try:
        import orjson

        return orjson.loads, orjson.dumps
    except ImportError:
        return json.loads, lambda obj: json.dumps(obj, separators=(",", ":")).encode()


def _brief(value) -> str:
    return json.dumps(value)[:40] if isinstance(value, (str, int, float, type(None))) else type(value).__name__


def _settings(info: dict) -> PolicySettings:
    """The policy's settings from its info dict (serve's info answer); KeyError, TypeError or ValueError when it is not
    one."""

    def whole(value, low: int = 0) -> int:
        if type(value) is not int or value < low:
            raise ValueError(value)
        return value

    inputs = [
        InputSpec(
            str(x["name"]),
            str(x["kind"]),
            tuple(whole(n, 1) for n in x["shape"]),
            bool(x["normalized"]),
            x["encoder"],
            x["goal"],
        )
        for x in info["inputs"]
    ]
    if not inputs or not isinstance(info["discrete_branches"], list):
        raise ValueError("inputs")
    return PolicySettings(
        inputs,
        whole(info["hidden_units"], 1),
        whole(info["num_layers"], 1),
        False,
        whole(info["continuous_size"]),
        [whole(n, 1) for n in info["discrete_branches"]],
        whole(info["memory_size"]),
    )


def connect(address: str, timeout: float = 60.0) -> "RemotePolicy":
    """A policy served by `python inference.py --mode serve --listen ADDRESS` ("HOST:PORT" or "unix:PATH"): info, act,
    get_action, check_spec, reset as inference.load()'s, close() (or `with`). UsageError (one line) when it cannot."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise UsageError(f"timeout={timeout!r}: expected a positive number of seconds")
    return RemotePolicy(address, float(timeout))


INFO_LINE_BYTES = 1 << 20  # the longest info answer read (a serve policy's is a few kB)


ANSWER_NUMBER_BYTES = 32  # the most bytes one number of an answer takes in JSON (with its comma)


class RemotePolicy:
    """inference.connect()'s policy. The server keeps get_action's LSTM memories, per connection and agent id.
    Every answer is checked against the policy's info (its id, keys, shapes, types, ranges, finiteness) and read
    within a bound (its longest possible line): a peer that is not serve, or misbehaves, is a one-line UsageError."""

    def __init__(self, address: str, timeout: float):
        where = parse_address("connect()", address, listening=False)
        self.address, self.timeout, self._sock, self._buf = address.strip(), timeout, None, bytearray()
        self._loads, self._dumps = _codec()
        try:
            if where[0] == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(where[1])
            else:
                sock = socket.create_connection(where[1:], timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise self._failed(exc) from None
        sock.setblocking(False)
        self._sock = sock
        self._limit = INFO_LINE_BYTES
        answer = self._ask([{"info": True}])[0]
        try:
            self.settings = _settings(answer["info"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            self.close()
            raise UsageError(
                f'connect({self.address!r}): the answer to {{"info": true}} is not a serve policy\'s '
                f"info (expected its inputs, action sizes and memory size): is this python inference.py "
                f"--mode serve --listen?"
            ) from None
        self.info = answer["info"]
        self.bounds = answer.get("bounds") if isinstance(answer.get("bounds"), dict) else {}
        s = self.settings
        self._width = s.continuous_size * (2 if continuous_only(s) else 1) + len(s.discrete_branches) + s.memory_size
        self._known: set = set()  # get_action's agent ids the server may hold a memory of
        self._stale: set = set()  # ... and those whose next line starts from zeros ("reset": true)

    def __repr__(self) -> str:
        return f"<connect({self.address!r}): {self.info.get('behavior')}, {'closed' if self._sock is None else 'open'}>"

    # -- the connection
    def _failed(self, exc: BaseException) -> UsageError:
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return UsageError(f"connect({self.address!r}): no answer within {self.timeout:g} s")
        if isinstance(exc, ConnectionRefusedError) or isinstance(exc, FileNotFoundError):
            return UsageError(
                f"connect({self.address!r}): nothing listens there (start python inference.py --mode serve "
                f"--listen {self.address})"
            )
        if isinstance(exc, socket.gaierror):
            return UsageError(
                f"connect({self.address!r}): unknown host ({exc.strerror}); expected HOST:PORT of a "
                f"serve --listen address, or unix:PATH"
            )
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return UsageError(f"connect({self.address!r}): {reason}")

    def _bad(self, what: str) -> UsageError:
        """A misbehaving peer: the connection closed, one line saying what was expected."""
        self.close()
        return UsageError(f"connect({self.address!r}): {what}")

    def _ask(self, messages: list, rows: int = 1) -> list:
        """Send the lines, read as many answers (both at once: a large group never waits on the server's bound). Each
        answer line is at most the longest a line of `rows` rows can be; read in linear time."""
        if self._sock is None:
            raise UsageError(f"connect({self.address!r}): the connection is closed")
        limit = self._limit if messages[0].get("info") else 4096 + rows * self._width * ANSWER_NUMBER_BYTES
        payload = memoryview(b"".join(self._dumps(m) + b"\n" for m in messages))
        sock, sent, answers, deadline = self._sock, 0, [], time.monotonic() + self.timeout
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN)
        buf, scan = self._buf, 0
        try:
            while len(answers) < len(messages):
                if sent < len(payload):
                    poll.modify(sock.fileno(), select.POLLIN | select.POLLOUT)
                    try:
                        sent += sock.send(payload[sent : sent + (1 << 20)])
                    except BlockingIOError:
                        pass
                    if sent == len(payload):
                        poll.modify(sock.fileno(), select.POLLIN)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                if not poll.poll(left * 1000):
                    continue
                try:
                    chunk = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise UsageError(f"connect({self.address!r}): the server closed the connection")
                buf += chunk
                scan = self._take_lines(buf, scan, answers, len(messages), limit)
        except UsageError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise self._failed(exc) from None
        self._check_answers(messages, answers)
        return answers

    def _take_lines(self, buf: bytearray, scan: int, answers: list, wanted: int, limit: int) -> int:
        """The complete answer lines in `buf` (taken out of it) parsed onto `answers`, up to `wanted`; where the next
        newline search starts (the bytes before it were searched: linear time); UsageError past `limit`."""
        while len(answers) < wanted:
            end = buf.find(b"\n", scan)
            if end < 0:
                if len(buf) > limit:
                    raise self._bad(
                        f"an answer line longer than {limit} bytes (the longest this policy's "
                        f"answer can be): is this python inference.py --mode serve --listen?"
                    )
                return len(buf)
            line = bytes(buf[:end])
            del buf[: end + 1]
            scan = 0
            if line.strip():
                answers.append(self._parse(line, limit))
        return scan

    def _check_answers(self, messages: list, answers: list) -> None:
        """Each answer for its line's id, in order; an error answer a one-line UsageError."""
        for message, answer in zip(messages, answers):
            if answer.get("id") != message.get("id"):
                raise self._bad(
                    f"an answer for id {_brief(answer.get('id'))} where id {_brief(message.get('id'))} "
                    f"was expected (answers come in the order of the lines)"
                )
            if "error" in answer:
                error = answer["error"]
                if not isinstance(error, str) or set(answer) != {"id", "error"}:
                    raise self._bad('an error answer that is not {"id": ..., "error": "..."}')
                raise UsageError(error.splitlines()[0] if error.strip() else "the server answered an empty error")

    def _parse(self, line: bytes, limit: int) -> dict:
        if len(line) > limit:
            raise self._bad(f"an answer line longer than {limit} bytes (the longest this policy's answer can be)")
        try:
            answer = self._loads(line)
        except (ValueError, RecursionError):
            raise self._bad(
                "an answer that is not JSON: expected the JSON lines of python inference.py --mode serve "
                "--listen (an --http port, or another program, answers otherwise)"
            ) from None
        if not isinstance(answer, dict):
            raise self._bad("an answer that is not a JSON object: expected serve's answer lines")
        return answer

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the policy's API
    def _observation_arrays(self, observations) -> tuple:
        """As Policy.observation_arrays: float32 [rows, *shape] per input, rows, batched."""
        return observation_arrays(self.settings, observations)

    def _line(self, arrays: list, masks, memory, deterministic: bool, seed) -> dict:
        s = self.settings
        line = (
            {"obs": arrays[0].tolist()}
            if len(s.inputs) == 1
            else {spec.name: array.tolist() for spec, array in zip(s.inputs, arrays)}
        )
        if masks is not None:
            line["action_masks"] = masks.astype(np.int8).tolist()
        if memory is not None:
            line["memory"] = memory.tolist()
        if not deterministic:  # noise: the line's seed (drawn here when none is given), as the stream draws it
            line["stochastic"], line["seed"] = (
                True,
                int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else int(seed),
            )
        return line

    def _outputs(self, answer: dict, rows: int, batched: bool) -> dict:
        """An answer's arrays, checked against the policy's info: its keys, shapes, types, ranges and finiteness."""
        s, out = self.settings, {}
        expected = (
            {"id"}
            | ({"continuous_actions"} if s.continuous_size else set())
            | ({"actions"} if continuous_only(s) else set())
            | ({"discrete_actions"} if s.discrete_branches else set())
            | ({"memory"} if s.memory_size else set())
        )
        if set(answer) != expected:
            raise self._bad(f"an answer with keys {sorted(answer)[:8]}; this policy's answers hold {sorted(expected)}")
        lead = (rows,) if batched else ()
        if s.continuous_size:
            out["continuous_actions"] = self._numbers(answer, "continuous_actions", lead + (s.continuous_size,), False)
            if continuous_only(s) and answer["actions"] != answer["continuous_actions"]:
                raise self._bad('an answer whose "actions" differ from its "continuous_actions"')
        if s.discrete_branches:
            actions = self._numbers(answer, "discrete_actions", lead + (len(s.discrete_branches),), True)
            if ((actions < 0) | (actions >= np.asarray(s.discrete_branches))).any():
                raise self._bad(f'an answer whose "discrete_actions" are outside the branches {s.discrete_branches}')
            out["discrete_actions"] = actions
        if s.memory_size:
            out["memory"] = self._numbers(answer, "memory", lead + (s.memory_size,), False)
        return out

    def _numbers(self, answer: dict, name: str, shape: tuple, whole: bool) -> np.ndarray:
        try:
            array = np.asarray(answer[name])
        except (ValueError, TypeError):
            array = np.asarray([None])
        fits = array.shape == shape and array.dtype.kind in ("i" if whole else "if")
        if fits:
            with np.errstate(over="ignore"):
                fits = np.isfinite(array.astype(np.float64 if whole else np.float32)).all() and (
                    not whole or (np.abs(array) < 2**62).all()
                )
        if not fits:
            raise self._bad(
                f'an answer whose "{name}" is not {"whole numbers" if whole else "finite float32 numbers"} '
                f"of shape {list(shape)} (got {_brief(answer[name])})"
            )
        return array.astype(np.int64 if whole else np.float32)

    def act(self, observations, action_masks=None, deterministic: bool = True, seed=None, memory=None) -> dict:
        """As Policy.act (deterministic results equal; sampled ones draw the stream's noise for `seed`, or for a seed
        drawn here when None): {"continuous_actions", "discrete_actions", "memory"} as numpy arrays."""
        s = self.settings
        observations, action_masks, memory = check_act_arguments(
            observations, action_masks, memory, deterministic, seed
        )
        arrays, rows, batched = self._observation_arrays(observations)
        check_no_extras(s, action_masks, memory)
        masks = shape_masks(action_masks, s.discrete_branches, rows, batched) if action_masks is not None else None
        if memory is not None:
            memory = shape_memory(memory, s.memory_size, rows, batched)[:, 0]
        if not rows:
            return self._no_actions()
        one = (lambda x: x) if batched else (lambda x: None if x is None else x[0])
        answer = self._ask(
            [self._line([one(a) for a in arrays], one(masks), one(memory), bool(deterministic), seed)], rows
        )[0]
        return self._outputs(answer, rows, batched)

    def _no_actions(self) -> dict:
        return no_actions(self.settings)

    def get_action(self, decision_steps, terminal_steps=None, deterministic: bool = True):
        """As Policy.get_action: one line per agent ("id": its agent id; the server keeps its memory for this
        connection), sent together (one engine call for the plain ones); an ActionTuple."""
        s = self.settings
        ended, ids, masks, obs = steps_arguments(s, decision_steps, terminal_steps, deterministic)
        rows = len(ids)
        arrays, got, batched = self._observation_arrays(list(obs))
        masks = (
            shape_masks(masks, s.discrete_branches, got, batched) if s.discrete_branches and masks is not None else None
        )
        if got != rows:
            raise UsageError(f"decision_steps: {rows} agent id(s) but {got} observation(s)")
        self._stale.update(agent for agent in ended if agent in self._known)
        if not rows:
            return self._action_tuple(self._no_actions(), 0)
        lines = []
        for row, agent in enumerate(ids):
            line = self._line(
                [a[row] for a in arrays], None if masks is None else masks[row], None, bool(deterministic), None
            )
            line["id"] = agent
            if agent in self._stale:
                line["reset"] = True
            lines.append(line)
        answers = [self._outputs(answer, 1, False) for answer in self._ask(lines)]
        if s.memory_size:
            self._stale.difference_update(ids)
            self._known.update(ids)
        out = {}
        if s.continuous_size:
            out["continuous_actions"] = np.stack([a["continuous_actions"] for a in answers])
        if s.discrete_branches:
            out["discrete_actions"] = np.stack([a["discrete_actions"] for a in answers])
        return self._action_tuple(out, rows)

    def _action_tuple(self, out: dict, rows: int):
        s = self.settings
        return action_tuple(
            out["continuous_actions"] if s.continuous_size else np.zeros((rows, 0), np.float32),
            out["discrete_actions"].astype(np.int32) if s.discrete_branches else np.zeros((rows, 0), np.int32),
        )

    def reset(self, agent_ids=None) -> None:
        """As Policy.reset: get_action's memories of every agent, or of `agent_ids`, start from zeros on their next
        line."""
        self._stale.update(self._known if agent_ids is None else check_agent_ids(agent_ids, "agent_ids"))

    def check_spec(self, behavior_spec) -> None:
        """As Policy.check_spec: UsageError naming the first difference; None when they agree."""
        check_behavior_spec(self.settings, behavior_spec)
