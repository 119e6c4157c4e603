"""inference.connect(): the policy's Python API over a serve connection, torch-free (docs/serve.md): the same checks
as inference.load()'s policy (shared: observations), the same answers, through the stream's lines."""

import itertools
import json
import os
import re
import threading
import weakref
from typing import Optional

import numpy as np

from ...api.contract import (
    check_act_arguments,
    check_agent_ids,
    check_behavior_spec,
    check_no_extras,
    steps_arguments,
)
from ...core.errors import UsageError
from ...core.observations import observation_arrays, shape_masks, shape_memory
from ...core.spec import InputSpec, PolicySettings, action_tuple, continuous_only, no_actions
from ...services.protocol import parse_address
from .connection import brief as _brief
from .connection import share

__all__ = ["connect", "RemotePolicy", "Answer", "INFO_LINE_BYTES", "ANSWER_NUMBER_BYTES", "FLOAT32_MAX"]


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


def connect(
    address: str, timeout: float = 60.0, model: Optional[str] = None, version=None, shared: bool = True
) -> "RemotePolicy":
    """A policy served by `python inference.py --mode serve --listen ADDRESS` ("HOST:PORT" or "unix:PATH"): info, act,
    get_action, check_spec, reset as inference.load()'s, close() (or `with`). `model`: the served model (behaviour
    name) every line names, required when the server serves several; `version`: a loaded version (a checkpoint's
    step) every line names, else the one serving at each line; `timeout`: each call's. The connect() objects of a
    process share one connection per address; `shared=False`: a connection of this object's own. UsageError (one
    line) when it cannot."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise UsageError(f"timeout={timeout!r}: expected a positive number of seconds")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise UsageError(f"model={_brief(model)}: expected a served model's name (text), or None")
    if not isinstance(shared, (bool, np.bool_)):
        raise UsageError(f"shared={_brief(shared)}: expected True (one connection per process and address) or False")
    return RemotePolicy(address, float(timeout), model, _version_text(version), bool(shared))


def _version_text(version) -> Optional[str]:
    """connect()'s version as serve's answers write it (the digits of a whole number), or None."""
    if version is None:
        return None
    if isinstance(version, str) and version.strip().isascii() and version.strip().isdigit():
        return str(int(version.strip()))
    if isinstance(version, (int, np.integer)) and not isinstance(version, bool) and version >= 0:
        return str(int(version))
    raise UsageError(f"version={_brief(version)}: expected a loaded version (a whole number, or its digits as text)")


class Answer(dict):
    """act()'s result: the dict inference.load()'s act() returns, and which model and version answered (serve's
    answer keys "model" and "version", as attributes; None from a server that does not say)."""

    __slots__ = ("model", "version")

    def __init__(self, arrays: dict, model: Optional[str], version: Optional[str]):
        super().__init__(arrays)
        self.model, self.version = model, version


INFO_LINE_BYTES = 1 << 20  # the longest info answer read (a serve policy's is a few kB)


ANSWER_NUMBER_BYTES = 32  # the most bytes one number of an answer takes in JSON (with its comma)


FLOAT32_MAX = float(np.finfo(np.float32).max)


class _Unsettled(UsageError):
    """A call given up with its lines possibly answered (its time-out, or its object closed meanwhile): the server may
    have stepped its agents' LSTM memories."""


_NAMING_KEYS = frozenset({"model", "version"})  # which model and version answered (serve's answers carry them)
_ERROR_KEYS = frozenset({"id", "error"}) | _NAMING_KEYS

_SHARED_ID = re.compile(r"[1-9][0-9]*:(-?[0-9]+)")  # an agent id on the wire from a connection's later object

# A memory the server no longer holds for this object, or holds in a state unknown here: why, in the refusal.
_HELD_BEFORE_FORK = "is held by the connection of the process this connect() was made in, before os.fork()"
_LOST_WITH_CONNECTION = "was lost with the connection that broke (serve keeps memories per connection)"
_UNSETTLED = "is unknown here: its last line got no answer in time (the server may have stepped it)"

_LINK_LOCK = threading.RLock()  # an object's connection changed under it (made anew in every child)


def _new_link_lock() -> None:
    global _LINK_LOCK
    _LINK_LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_link_lock)


class RemotePolicy:
    """inference.connect()'s policy. Safe to share across threads, and cheap to have many of: the connect() objects of
    one process that talk to one serve address share ONE connection (connection.Connection: a call's lines
    queued and written whole, answered in their order, each answer handed to its call and checked against its id),
    each with its own model/version (on its lines), time-out (per call), agent ids and answered versions. The server
    keeps get_action's LSTM memories per connection and id: an object's agent ids go on the wire under its share's
    number ("2:17" for agent 17 of the connection's third object; the first object's plain), so two objects' agent 0
    are two agents, whichever thread asks. close() lets go of this object's share (the socket closes with the last).
    A broken connection fails every call waiting on it, whichever object's, and the next call opens a new one; after
    os.fork a child's first call opens (shares) a connection of the child's own. Every answer is checked against the
    policy's info (its id, keys, shapes, types, ranges, finiteness) and read within a bound (its longest possible
    line): a peer that is not serve, or misbehaves, is a one-line UsageError."""

    def __init__(
        self, address: str, timeout: float, model: Optional[str] = None, version: Optional[str] = None, shared=True
    ):
        self._where = parse_address("connect()", address, listening=False)
        self.address, self.timeout, self._shared, self._closed = address.strip(), timeout, bool(shared), False
        # every line names them (serve's "model" and "version" keys); left out, the server's one model, and the
        # version serving at each line
        self._route = {k: v for k, v in (("model", model), ("version", version)) if v is not None}
        self._answered = threading.local()  # which version answered this thread's latest call
        self._pid = os.getpid()
        self._state = threading.Lock()  # get_action's memory bookkeeping
        self._known: set = set()  # get_action's agent ids the server may hold a memory of
        self._stale: set = set()  # ... and those whose next line starts from zeros ("reset": true)
        self._orphans: dict = {}  # agent id -> why the server holds no memory of it for this object (until reset)
        self._link, self._share = None, None  # (the connection, this object's share number on it); its finalizer
        self._join()
        try:
            answer = self._ask([{"info": True, **self._route}], limit=INFO_LINE_BYTES)[0]
        except UsageError as exc:
            self.close()
            said = str(exc)
            if said.startswith(f"connect({self.address!r})"):
                raise
            hint = " (connect(..., model=NAME))" if "model" not in self._route and "name the model" in said else ""
            raise UsageError(f"connect({self.address!r}): {said}{hint}") from None
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
        # the model answering (the server's name for it; a server before models: the behaviour's name), and the
        # version that answered the info line
        self.model = answer["model"] if isinstance(answer.get("model"), str) else model or self.info.get("behavior")
        self._first_version = answer["version"] if isinstance(answer.get("version"), str) else None
        s = self.settings
        self._width = s.continuous_size * (2 if continuous_only(s) else 1) + len(s.discrete_branches) + s.memory_size
        self._ids = itertools.count(1)  # act()'s line ids where no memory is kept by id

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<connect({self.address!r}): {self.model}, version {self.version}, {state}>"

    @property
    def version(self) -> Optional[str]:
        """The version (text, a checkpoint's step; "1" for one policy served as before) that answered this thread's
        latest act() or get_action() (for get_action, its last agent's; `versions` has each agent's), or the info line
        before any."""
        return getattr(self._answered, "version", self._first_version)

    @property
    def versions(self) -> dict:
        """This thread's latest get_action(): each agent id's answering version (an LSTM agent keeps the version its
        memory started on while that stays loaded, so they may differ)."""
        return dict(getattr(self._answered, "versions", {}))

    # -- the connection (shared: .connection)
    def _join(self) -> tuple:
        """A share of this process's connection to the address (opened where there is none, or it broke): UsageError
        in one line when it cannot be opened (the next call tries again)."""
        conn, number = share(self._where, self.address, self.timeout, self._shared)
        with _LINK_LOCK:
            if self._closed or self._link is not None:  # (closed meanwhile, or another thread joined first)
                conn.leave(number, give_up=False)
                if self._closed:
                    raise UsageError(f"connect({self.address!r}): the connection is closed")
                return self._link
            self._share = weakref.finalize(self, conn.leave, number, False)  # (garbage collected unclosed: let go)
            self._link = (conn, number)
            return self._link

    def _connection(self) -> tuple:
        """(the connection, this object's share number on it), usable in this process: the same as before, or after a
        break or in a forked child a new share (the memories the old one held refused until reset). The socket is
        opened outside _LINK_LOCK: close() from another thread never waits on it."""
        link = self._link
        if link is not None and link[0].error is None and link[0].pid == os.getpid():
            return link
        with _LINK_LOCK:
            self._settle()
            if self._closed:
                raise UsageError(f"connect({self.address!r}): the connection is closed")
            if self._link is not None:
                return self._link
        return self._join()

    def _settle(self) -> None:
        """(under _LINK_LOCK) A connection broken, or the parent's (after os.fork), let go: the agents whose memory it
        held are refused until reset(); the next call opens a new share."""
        link, forked = self._link, self._pid != os.getpid()
        if forked:  # (the parent's locks may have been held at the fork: this process's own)
            self._pid, self._state = os.getpid(), threading.Lock()
        if link is None or (link[0].error is None and link[0].pid == os.getpid()):
            return
        self._link = None
        self._share.detach()
        link[0].leave(link[1], give_up=False)  # (in a child: the parent's socket let go, untouched)
        why = _HELD_BEFORE_FORK if forked else _LOST_WITH_CONNECTION
        with self._state:
            self._orphans.update((agent, why) for agent in self._known - self._stale)
            self._known, self._stale = set(), set()

    def _bad(self, what: str) -> UsageError:
        """A misbehaving peer: the connection closed (every call waiting on it fails), one line saying what was
        expected."""
        link = self._link
        if link is None:
            return UsageError(f"connect({self.address!r}): {what}")
        return link[0].bad(what)

    def _ask(self, messages: list, rows: int = 1, limit: Optional[int] = None, link=None) -> list:
        """The lines sent on the shared connection and their answers (at most `limit` bytes each: by default the
        longest a line of `rows` rows can be), within this object's time-out; an error answer is a one-line
        UsageError (the connection goes on). _Unsettled where the call was given up (timed out, or closed)."""
        conn, number = self._connection() if link is None else link
        if limit is None:
            limit = 4096 + rows * self._width * ANSWER_NUMBER_BYTES
        try:
            answers = conn.ask(messages, limit, number, self.timeout)
        except UsageError as exc:
            if conn.error is None:  # (the connection goes on: only this call was given up)
                raise _Unsettled(str(exc)) from None
            raise
        self._check_errors(answers)
        return answers

    def _check_errors(self, answers: list) -> None:
        """An error answer is a one-line UsageError (the connection goes on)."""
        for answer in answers:
            if "error" in answer:
                error = answer["error"]
                if not isinstance(error, str) or not {"id", "error"} <= set(answer) <= _ERROR_KEYS:
                    raise self._bad('an error answer that is not {"id": ..., "error": "..."}')
                text = error.splitlines()[0] if error.strip() else "the server answered an empty error"
                ident = answer.get("id")
                if isinstance(ident, str) and (agent := _SHARED_ID.fullmatch(ident)):
                    text = text.replace(json.dumps(ident), agent.group(1))  # (the id as the caller gave it)
                raise UsageError(text)

    def close(self) -> None:
        """Lets go of this object's share of the connection, from any thread: its calls still waiting end in one line
        ("the connection is closed"); the other objects on the connection go on, and the socket closes with the last
        share. In a forked child it lets go of the parent's socket without touching the parent's connection."""
        with _LINK_LOCK:
            self._closed = True
            link, self._link = self._link, None
            if link is None:
                return
            self._share.detach()
        link[0].leave(link[1], give_up=True)

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
        line.update(self._route)
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
        """An answer's arrays, checked against the policy's info: its keys, shapes, types, ranges and finiteness; its
        model and version (where it names them: serve's answers do) the ones connected to."""
        s, out = self.settings, {}
        expected = (
            {"id"}
            | ({"continuous_actions"} if s.continuous_size else set())
            | ({"actions"} if continuous_only(s) else set())
            | ({"discrete_actions"} if s.discrete_branches else set())
            | ({"memory"} if s.memory_size else set())
        )
        if not expected <= set(answer) <= expected | _NAMING_KEYS:
            raise self._bad(
                f"an answer with keys {sorted(answer)[:8]}; this policy's answers hold {sorted(expected)} "
                f"(and the model and version)"
            )
        self._check_naming(answer)
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

    def _check_naming(self, answer: dict) -> None:
        """An answer's "model" is the model connected to, its "version" text (the version asked for, where one was)."""
        if "model" in answer and answer["model"] != self.model:
            raise self._bad(f"an answer from model {_brief(answer['model'])} to a line for model {_brief(self.model)}")
        if "version" in answer:
            version, asked = answer["version"], self._route.get("version")
            if not isinstance(version, str) or (asked is not None and version != asked):
                raise self._bad(
                    f"an answer from version {_brief(version)}"
                    + (f" to a line for version {asked}" if asked is not None else ": expected text (a step)")
                )

    def _numbers(self, answer: dict, name: str, shape: tuple, whole: bool) -> np.ndarray:
        try:
            array = np.asarray(answer[name])
        except (ValueError, TypeError):
            array = np.asarray([None])
        fits = array.shape == shape and array.dtype.kind in ("i" if whole else "if")
        if fits and array.size:  # (NaN fails both comparisons; no cast that overflows, no errstate to set)
            low, high = array.min(), array.max()
            fits = bool(-(2**62) < low and high < 2**62) if whole else bool(-FLOAT32_MAX <= low and high <= FLOAT32_MAX)
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
            return Answer(self._no_actions(), self.model, None)
        one = (lambda x: x) if batched else (lambda x: None if x is None else x[0])
        line = self._line([one(a) for a in arrays], one(masks), one(memory), bool(deterministic), seed)
        if not s.memory_size:  # (an id of its own, checked on its answer; with a memory an id would be kept)
            line["id"] = next(self._ids)
        answer = self._ask([line], rows)[0]
        out = self._outputs(answer, rows, batched)
        self._answered.version = answer.get("version")
        return Answer(out, answer.get("model", self.model), answer.get("version"))

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
        if not rows:
            if s.memory_size:
                with _LINK_LOCK:
                    self._settle()
                self._claim(ended, ids)
            return self._action_tuple(self._no_actions(), 0)
        lines = [
            self._line([a[row] for a in arrays], None if masks is None else masks[row], None, bool(deterministic), None)
            for row in range(rows)
        ]
        link = self._connection()
        resets = self._claim(ended, ids) if s.memory_size else set()
        number = link[1]
        for line, agent in zip(lines, ids):
            # (the connection's first object's ids plain, as before sharing; the others' under their share number)
            line["id"] = agent if number == 0 else f"{number}:{agent}"
            if agent in resets:
                line["reset"] = True
        try:
            said = self._ask(lines, link=link)
            answers = [self._outputs(answer, 1, False) for answer in said]
        except UsageError as exc:
            if s.memory_size:
                with self._state:  # (their memories were not started over: on their next line, then)
                    self._stale.update(resets)
                    if isinstance(exc, _Unsettled):  # (stepped on the server, or not: refused until reset)
                        self._orphans.update((agent, _UNSETTLED) for agent in ids if agent not in resets)
            raise
        self._answered.versions = {agent: answer.get("version") for agent, answer in zip(ids, said)}
        self._answered.version = said[-1].get("version")
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
        """As Policy.reset: get_action's memories of this object's agents (every one, or `agent_ids`) start from zeros
        on their next line; another connect() object's agents, on the same connection, are not touched."""
        ids = None if agent_ids is None else check_agent_ids(agent_ids, "agent_ids")
        with _LINK_LOCK:
            self._settle()
        with self._state:
            self._stale.update(self._known if ids is None else ids)
            if ids is None:
                self._orphans = {}
            else:
                for agent in ids:
                    self._orphans.pop(agent, None)

    def _claim(self, ended, ids: list) -> set:
        """(get_action, a memory policy, on a settled connection) The agents of these lines whose memory starts from
        zeros on them ("reset": true): those ended now or reset before; the lines' agents known from here on.
        UsageError for an agent whose memory the server does not hold for this object (the parent process's
        connection, before os.fork; a connection that broke) or holds in a state unknown here, until reset."""
        with self._state:
            if self._orphans and (held := [agent for agent in ids if agent in self._orphans and agent not in ended]):
                raise UsageError(
                    f"agent id {_brief(held[0])}: its LSTM memory {self._orphans[held[0]]}; call reset() of it first "
                    f"(it starts from zeros) or connect() again"
                )
            self._stale.update(agent for agent in ended if agent in self._known)
            for agent in itertools.chain(ended, ids):
                self._orphans.pop(agent, None)
            resets = self._stale.intersection(ids)
            self._stale.difference_update(ids)
            self._known.update(ids)
            return resets

    def check_spec(self, behavior_spec) -> None:
        """As Policy.check_spec: UsageError naming the first difference; None when they agree."""
        check_behavior_spec(self.settings, behavior_spec)
