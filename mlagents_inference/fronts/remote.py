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
from ..core.spec import InputSpec, PolicySettings, action_tuple, no_actions
from ..services.protocol import parse_address

__all__ = ["connect", "RemotePolicy"]


def _codec() -> tuple:
    try:
        import orjson

        return orjson.loads, orjson.dumps
    except ImportError:
        return json.loads, lambda obj: json.dumps(obj, separators=(",", ":")).encode()


def connect(address: str, timeout: float = 60.0) -> "RemotePolicy":
    """A policy served by `python inference.py --mode serve --listen ADDRESS` ("HOST:PORT" or "unix:PATH"): info, act,
    get_action, check_spec, reset as inference.load()'s, close() (or `with`). UsageError (one line) when it cannot."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise UsageError(f"timeout={timeout!r}: expected a positive number of seconds")
    return RemotePolicy(address, float(timeout))


class RemotePolicy:
    """inference.connect()'s policy. The server keeps get_action's LSTM memories, per connection and agent id."""

    def __init__(self, address: str, timeout: float):
        where = parse_address("connect()", address)
        self.address, self.timeout, self._sock, self._buf = address.strip(), timeout, None, b""
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
        self.info = self._ask([{"info": True}])[0]["info"]
        i = self.info
        self.settings = PolicySettings(
            [
                InputSpec(x["name"], x["kind"], tuple(x["shape"]), x["normalized"], x["encoder"], x["goal"])
                for x in i["inputs"]
            ],
            i["hidden_units"],
            i["num_layers"],
            False,
            i["continuous_size"],
            list(i["discrete_branches"]),
            i["memory_size"],
        )
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
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return UsageError(f"connect({self.address!r}): {reason}")

    def _ask(self, messages: list) -> list:
        """Send the lines, read as many answers (both at once: a large group never waits on the server's bound)."""
        if self._sock is None:
            raise UsageError(f"connect({self.address!r}): the connection is closed")
        payload = memoryview(b"".join(self._dumps(m) + b"\n" for m in messages))
        sock, sent, answers, deadline = self._sock, 0, [], time.monotonic() + self.timeout
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN)
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
                *complete, self._buf = (self._buf + chunk).split(b"\n")
                answers += [self._loads(line) for line in complete if line.strip()]
        except UsageError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise self._failed(exc) from None
        for answer in answers:
            if "error" in answer:
                raise UsageError(answer["error"])
        return answers

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

    def _outputs(self, answer: dict) -> dict:
        s, out = self.settings, {}
        if s.continuous_size:
            out["continuous_actions"] = np.asarray(answer["continuous_actions"], np.float32)
        if s.discrete_branches:
            out["discrete_actions"] = np.asarray(answer["discrete_actions"], np.int64)
        if s.memory_size:
            out["memory"] = np.asarray(answer["memory"], np.float32)
        return out

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
        answer = self._ask([self._line([one(a) for a in arrays], one(masks), one(memory), bool(deterministic), seed)])[
            0
        ]
        return self._outputs(answer)

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
        answers = self._ask(lines)
        if s.memory_size:
            self._stale.difference_update(ids)
            self._known.update(ids)
        out = {}
        if s.continuous_size:
            out["continuous_actions"] = np.asarray([a["continuous_actions"] for a in answers], np.float32)
        if s.discrete_branches:
            out["discrete_actions"] = np.asarray([a["discrete_actions"] for a in answers], np.int64)
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
