"""Observations, masks and memories as arrays: the one finite/float32 check, shapes, per-agent memories
(AgentMemories), random inputs, whether a batch fits in memory."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from pathlib import Path
from typing import Optional

import numpy as np

from .errors import UsageError
from .spec import ATTENTION_EMBEDDING, InputSpec, PolicySettings

__all__ = [
    "check_rows_fit",
    "available_memory",
    "observation_arrays",
    "finite_float32",
    "number_array",
    "shape_input",
    "BOOL_MASK",
    "shape_masks",
    "MASK_KEY_BYTES",
    "mask_key",
    "shape_memory",
    "branch_draw",
    "random_inputs",
    "random_masks",
    "parse_numbers",
    "is_float",
    "MemoryBudget",
    "AgentMemories",
]


def check_rows_fit(rows: int, settings: PolicySettings, what: str = "--batch") -> None:
    """Refuse, before allocating, a batch that would not fit in memory."""
    per_row = (
        sum(math.prod(i.shape) for i in settings.inputs) * 12
        + settings.hidden_units * 16
        + (settings.continuous_size + sum(settings.discrete_branches) + settings.memory_size) * 24
    )
    per_row += sum(settings.hidden_units * 64 * 4 for i in settings.inputs if i.kind == "visual")
    per_row += sum(
        i.shape[0] * ATTENTION_EMBEDDING * 4 * 8 + i.shape[0] ** 2 * 4 * 4 * 3  # (4 heads' N x N scores)
        for i in settings.inputs
        if i.kind == "entities"
    )
    need = rows * per_row
    if need < 64 << 20:  # (small: not worth reading /proc, which a stream would do on every line)
        return
    have = available_memory()
    if need > 0.8 * have:
        option = what.startswith("--")
        raise UsageError(
            f"{what + ' ' + str(rows) if option else str(rows) + ' rows'}: would need about "
            f"{need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available; "
            + (
                f"use a smaller {what}" + (" or --obs-file with --chunk" if what == "--batch" else "")
                if option
                else f"send fewer rows {what}"
            )
        )


def available_memory() -> int:
    """The host's available memory, or what this process's cgroup (v2) limit leaves, if less."""
    have = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                have = int(line.split()[1]) * 1024
    if have is None:
        have = int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(OSError, ValueError, IndexError):
        group = Path("/proc/self/cgroup").read_text().splitlines()[0].split("::", 1)[1]
        folder = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit != "max":
            have = min(have, max(0, int(limit) - int((folder / "memory.current").read_text())))
    return have


def _is_array_list(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, np.ndarray) for v in value)


def observation_arrays(s: PolicySettings, observations) -> tuple:
    """Observations (one array, a list in input order, or a dict by input name; each [rows, *shape] or one
    [*shape]) as float32 [rows, *shape] in input order: (arrays, rows, batched). The API's and connect()'s check."""
    names = [i.name for i in s.inputs]
    if isinstance(observations, dict):
        unknown = sorted(set(observations) - set(names), key=str)
        if unknown:
            raise UsageError(f"unknown input {unknown[0]!r}; this policy takes {', '.join(names)}")
        missing = [n for n in names if n not in observations]
        if missing:
            raise UsageError(f"input {missing[0]} is missing; this policy takes {', '.join(names)}")
        observations = [observations[n] for n in names]
    elif not isinstance(observations, (list, tuple)) or (
        len(names) == 1
        and not (
            len(observations) > 0
            and all(isinstance(v, np.ndarray) or type(v).__module__.startswith("torch") for v in observations)
        )
    ):
        observations = [observations]
    if len(observations) != len(names):
        raise UsageError(f"expected {len(names)} input(s) ({', '.join(names)}), got {len(observations)}")
    arrays, rows, batched = [], None, None
    for spec, value in zip(s.inputs, observations):
        array, is_batch = shape_input(spec, value)
        if rows is not None and (array.shape[0] != rows or is_batch != batched):
            raise UsageError(
                f"{spec.name}: {array.shape[0] if is_batch else 'one'} observation(s), but "
                f"{s.inputs[0].name} has {rows if batched else 'one'}"
            )
        rows, batched = array.shape[0], is_batch
        arrays.append(array)
    return arrays, rows, batched


def finite_float32(values, what: str, unit: Optional[str] = None, first: int = 0) -> np.ndarray:
    """The one check every door for numbers makes (the API, --obs, files, stream lines): the values
    as float32 (beyond its range they become inf) and finite, else a UsageError naming `what` and,
    for [rows, ...] values, the first bad `unit` (row numbers counted from `first`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(values, np.float32)
    ok = np.isfinite(out).reshape(len(out), -1).all(axis=1) if unit and out.size else np.isfinite(out).all()
    if not np.all(ok):
        where = f": {unit} {first + int(np.argmin(ok))}" if unit else ""
        raise UsageError(f"{what}{where} holds nan, inf or values beyond float32")
    return out


def number_array(value, what: str, kinds: str = "fiub") -> np.ndarray:
    """The one dtype rule of the API's arrays (observations, masks, memories): `value` as a numpy
    array of numbers (bool, integers, floats: `kinds`); text, objects, complex numbers, dates, a
    ragged list, or a masked array with masked (missing) values are a UsageError naming `what`."""
    if np.ma.is_masked(value):
        raise UsageError(f"{what}: a masked array with masked (missing) values; fill them first")
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        raise UsageError(f"{what}: not an array of numbers (ragged or mixed values)") from None
    if array.dtype.kind not in kinds:
        raise UsageError(f"{what}: holds {array.dtype} values, expected numbers")
    return array


def shape_input(spec: InputSpec, value) -> tuple:
    """One input as float32 [rows, *shape] (entity buffers padded with absent rows), and whether it
    came batched; UsageError naming the input, the expected and the given shape. A uint8 array for
    a camera is pixels: scaled by 1/255 as image_pixels scales a file; other numbers are taken as given."""
    array = number_array(value, spec.name, "fiub" if spec.kind == "vector" else "fiu")
    if spec.kind == "visual" and array.dtype == np.uint8:  # pixels, read as image files are read
        array = array.astype(np.float32) / np.float32(255)
    want = tuple(spec.shape)
    if spec.kind == "entities":
        n, f = want
        if array.ndim == 2 and array.shape[1] == f or array.ndim == 1 and array.size == 0:
            array, batched = array.reshape(1, -1, f), False
        elif array.ndim == 3 and array.shape[2] == f:
            batched = True
        else:
            raise UsageError(
                f"{spec.name}: expected up to {n} entities of {f} features ([entities, {f}] or "
                f"[batch, entities, {f}]), got shape {list(array.shape)}"
            )
        if n and array.shape[1] > n:
            raise UsageError(f"{spec.name}: {array.shape[1]} entities, this policy takes at most {n}")
        if n and array.shape[1] < n:  # absent entities are zero rows, as Unity's buffer sensor pads them
            array = np.concatenate([array, np.zeros((array.shape[0], n - array.shape[1], f), array.dtype)], axis=1)
    elif array.shape == want:
        array, batched = array[None], False
    elif array.ndim == len(want) + 1 and array.shape[1:] == want:
        batched = True
    else:
        raise UsageError(
            f"{spec.name}: expected shape [{', '.join(map(str, want))}] "
            f"(or [batch, {', '.join(map(str, want))}]), got {list(array.shape)}"
        )
    return finite_float32(array, spec.name, "observation"), batched


BOOL_MASK = (
    "a single bool array is ambiguous (ML-Agents' masks are True = masked, gymnasium's 1 = "
    "allowed): give ML-Agents' DecisionSteps.action_mask as its list of per-branch bool arrays, or "
    "0/1 numbers with 1 = allowed (e.g. mask.astype(np.int8))"
)


def shape_masks(masks, branches: list, rows: int, batched: bool) -> np.ndarray:
    """Action masks as float32 [rows, sum(branches)] of 0/1 (1 = allowed); all allowed when None.
    Numbers are gymnasium's convention, 1 = allowed: one array [sum(branches)] or [rows, sum(branches)],
    or a per-branch list ([size] or [rows, size] each; gymnasium's MultiDiscrete masks). A per-branch
    list of bool arrays is ML-Agents' DecisionSteps.action_mask: True = masked. A single bool array is
    refused, the two conventions reading it oppositely. A branch that allows nothing is refused."""
    width = sum(branches)
    if masks is None:
        return np.ones((rows, width), np.float32)
    masked_is_true = False
    if (
        isinstance(masks, (list, tuple))
        and len(masks) == len(branches)
        and _is_array_list(masks)
        and (any(m.dtype == bool for m in masks) or all(m.shape[-1:] == (size,) for m, size in zip(masks, branches)))
    ):
        masked_is_true = masks[0].dtype == bool
        if any((m.dtype == bool) != masked_is_true for m in masks):
            raise UsageError(
                "action_masks: the per-branch arrays mix bool (ML-Agents: True = masked) and numbers (1 = allowed)"
            )
        parts = []
        for b, (part, size) in enumerate(zip(masks, branches)):
            if part.ndim not in (1, 2) or part.shape[-1] != size or part.ndim == 2 and part.shape[0] != rows:
                raise UsageError(
                    f"action_masks: branch {b} has shape {list(part.shape)}, expected [{size}] or "
                    f"[{rows}, {size}] (branches {branches})"
                )
            parts.append(np.broadcast_to(part.reshape(-1, size), (rows, size)))
        masks = np.concatenate(parts, axis=1)
        if masked_is_true:
            masks = ~masks
    array = number_array(masks, "action_masks")
    if array.dtype == bool and not masked_is_true:
        raise UsageError(f"action_masks: {BOOL_MASK}")
    array = array.astype(np.float64)
    if array.ndim == 1 and array.shape[0] == width:
        array = np.broadcast_to(array, (rows, width))
    if array.shape != (rows, width):
        raise UsageError(
            f"action_masks: expected shape [{rows}, {width}] (branches {branches}), got {list(array.shape)}"
        )
    if not np.isin(array, (0.0, 1.0)).all():
        raise UsageError("action_masks: values must be 0 (forbidden) or 1 (allowed)")
    for b, (size, end) in enumerate(zip(branches, itertools.accumulate(branches))):
        empty = ~array[:, end - size : end].any(axis=1)
        if empty.any():
            raise UsageError(
                f"action_masks: branch {b} allows no action (row {int(np.argmax(empty))}"
                f"{', ML-Agents mask: True = masked' if masked_is_true else ''}); "
                f"at least one action per branch must be allowed"
            )
    return np.ascontiguousarray(array, np.float32)


MASK_KEY_BYTES = 1024  # masks up to this size are checked once per distinct value (a batch-1 mask: a few bytes)


def mask_key(masks, rows: int) -> Optional[tuple]:
    """A small mask's identity (rows, form, and each array's dtype, shape and bytes), for checking it
    once (Policy.mask_array); None for a large one or one not made of numpy arrays."""
    if type(masks) is np.ndarray:  # (Policy._ready makes this key itself, the same way)
        return (rows, None, masks.dtype, masks.shape, masks.tobytes()) if masks.nbytes <= MASK_KEY_BYTES else None
    if masks is None:
        return (rows,)
    parts = masks if type(masks) in (list, tuple) else ()
    key, size = [rows], 0
    for part in parts:
        size += part.nbytes if type(part) is np.ndarray else MASK_KEY_BYTES + 1
        if size > MASK_KEY_BYTES:
            return None
        key += (part.dtype, part.shape, part.tobytes())
    return tuple(key) if parts else None


def shape_memory(memory, size: int, rows: int, batched: bool) -> np.ndarray:
    """An LSTM memory [rows, size] = [h, c] as the engine wants it, [rows, 1, size]; zeros when None."""
    if memory is None:
        return np.zeros((rows, 1, size), np.float32)
    array = number_array(memory, "memory").astype(np.float64)
    if array.ndim == 1 and array.shape[0] == size and rows == 1:
        array = array[None]
    if array.ndim == 3 and array.shape[1] == 1:
        array = array[:, 0]
    if array.shape != (rows, size):
        want = f"[{size}] or [1, {size}]" if rows == 1 and not batched else f"[{rows}, {size}]"
        raise UsageError(f"memory: expected shape {want} ([h, c], {size // 2} each), got {list(array.shape)}")
    return finite_float32(array, "memory", "row")[:, None, :]


def branch_draw(probs: np.ndarray, branches: list, u: np.ndarray) -> np.ndarray:
    """One draw per branch from its masked probabilities by inverse CDF with uniforms u [rows, branches];
    a forbidden action (probability 0) is never drawn."""
    out = np.empty((probs.shape[0], len(branches)), np.int64)
    for b, (size, end) in enumerate(zip(branches, itertools.accumulate(branches))):
        p = probs[:, end - size : end].astype(np.float64)
        cdf = np.cumsum(p, axis=1)
        target = u[:, b] * cdf[:, -1]
        pick = (cdf <= target[:, None]).sum(axis=1)
        last_allowed = size - 1 - np.argmax(p[:, ::-1] > 0, axis=1)
        out[:, b] = np.minimum(pick, last_allowed)
    return out


def random_inputs(settings: PolicySettings, seed: int, rows: Optional[int] = None) -> list:
    """One np.random.RandomState(seed) for all inputs, in input order: randn(*shape) for vectors and entity buffers,
    rand(*shape) for images (uniform in [0, 1), the range camera pixels have). A one-input vector policy gets
    RandomState(seed).randn(n). In an entity buffer each observation keeps its first k rows, k uniform in 0..N from
    RandomState(seed + 104729), and the rest are zero (absent), so that the attention's padding is exercised too."""
    rng, counts = np.random.RandomState(seed), np.random.RandomState((seed + 104729) % 2**32)  # (seeds to 2**32 - 1)
    lead = () if rows is None else (rows,)
    out = []
    for spec in settings.inputs:
        x = (rng.rand(*lead, *spec.shape) if spec.kind == "visual" else rng.randn(*lead, *spec.shape)).astype(
            np.float32
        )
        if spec.kind == "entities":
            present = counts.randint(0, spec.shape[0] + 1, size=1 if rows is None else rows)
            x.reshape(-1, *spec.shape)[np.arange(spec.shape[0])[None, :] >= present[:, None]] = 0.0
        out.append(x)
    return out


def random_masks(settings: PolicySettings, seed: int, rows: int) -> Optional[np.ndarray]:
    """Random action masks (each action allowed with probability 0.7, at least one per branch)."""
    if not settings.discrete_branches:
        return None
    rng = np.random.RandomState(seed + 7919)
    masks = (rng.rand(rows, sum(settings.discrete_branches)) < 0.7).astype(np.float32)
    for size, end in zip(settings.discrete_branches, itertools.accumulate(settings.discrete_branches)):
        block = masks[:, end - size : end]
        empty = np.flatnonzero(~block.any(axis=1))
        block[empty, rng.randint(size, size=len(empty))] = 1.0
    return masks


def parse_numbers(text: str, what: str, count: int) -> np.ndarray:
    """Comma-separated numbers (exactly `count`), or 'zeros'."""
    if text.strip().lower() == "zeros":
        return np.zeros(count, np.float32)
    items = [p.strip() for p in text.split(",")]
    if len(items) > 1 and items[-1] == "":
        items.pop()  # tolerate one trailing comma (as --obs does); an empty item elsewhere is refused
    if "" in items:
        raise UsageError(
            f"{what}: an empty item (item {items.index('') + 1}); expected {count} comma-separated numbers"
        )
    bad = next((p for p in items if not is_float(p)), None)
    if bad is not None or len(items) != count:
        raise UsageError(
            f"{what}: expected {count} comma-separated numbers, got "
            f"{repr(bad[:40]) + ' (not a number)' if bad is not None else len(items)}"
        )
    return np.asarray([float(p) for p in items], np.float64)


def is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class MemoryBudget:
    """The bounds that several AgentMemories share (serve: every model and every version of it, each with memories of
    its own, against one budget): the whole's ids and bytes, and each scope's (a client's) ids and bytes in every
    member together. AgentMemories keeps the counts; each member's keys carry the stamp of their last answer (`stamp`,
    counted up), so that a scope's least recently answered id is found across members (`oldest`). An AgentMemories
    made without one has its own."""

    def __init__(
        self,
        max_ids: int = 100_000,
        max_bytes: float = 256 << 20,
        scope_ids: Optional[int] = None,
        scope_bytes: Optional[float] = None,
    ):
        self.max_ids, self.max_bytes = max_ids, max_bytes
        self.scope_ids = max_ids if scope_ids is None else scope_ids
        self.scope_bytes = max_bytes if scope_bytes is None else scope_bytes
        self.ids = self.nbytes = 0  # every member's together
        self.scopes: dict = {}  # scope -> [its ids, its bytes], every member's together
        self.members: dict = {}  # id(member) -> the AgentMemories counted here
        self.stamp = 0  # (the last answer's: each member's keys carry the stamp of their last answer)

    def room_in(self, scope: str, cost: int) -> bool:
        """Whether dropping this scope's own least recently answered ids (at its bound) makes room for a new one."""
        total = self.scopes.get(scope)
        return bool(total and total[0]) and (total[0] >= self.scope_ids or total[1] + cost > self.scope_bytes)

    def oldest(self, scope: str) -> Optional[tuple]:
        """(member, key): the scope's least recently answered id, whichever member holds it; None when none does."""
        found, first = None, None
        for member in self.members.values():
            held = member.scopes.get(scope)
            if held and held[0]:
                key = next(iter(held[0]))
                if found is None or held[0][key] < first:
                    found, first = (member, key), held[0][key]
        return found


class AgentMemories(dict):
    """LSTM memory per agent id (the stream's: the id's JSON text; serve's: its scope, the connection, before it;
    get_action's: the agent id), least recently answered first.

    Two bounds. Each scope (`keep`'s `scope`: a connection, the stream's one client) holds at most `scope_ids` ids
    and `scope_bytes` bytes: past them its own least recently answered id's memory is dropped, and recorded as
    dropped (`dropped`, at most `scope_ids` a scope), so that the id's next line is refused (`check`) rather than
    silently started from zeros. The whole holds at most `max_ids` ids and `max_bytes` bytes: past them a new id is
    refused (`keep` raises UsageError); no scope's memory is ever dropped for another's.

    `budget` (a MemoryBudget; serve: one for every lane, a version of a model): the bounds count these memories and
    every other member's together, each keeping its own keys (two members never share a memory). A scope's least
    recently answered id is then dropped in whichever member holds it, and recorded as dropped there. `release`
    gives the room back (a lane unloaded). Without one (the stream, get_action), the bounds are these memories'."""

    def __init__(
        self,
        max_ids: int = 100_000,
        max_bytes: float = 256 << 20,
        scope_ids: Optional[int] = None,
        scope_bytes: Optional[float] = None,
        budget: Optional[MemoryBudget] = None,
    ):
        super().__init__()
        self.join(budget if budget is not None else MemoryBudget(max_ids, max_bytes, scope_ids, scope_bytes))
        self.nbytes = 0  # (these memories' own; the budget's `nbytes` counts every member's)
        self.scopes: dict = {}  # scope -> [its keys, least recently answered first (key -> stamp), its bytes]
        self.dropped: dict = {}  # scope -> the keys dropped at its bound, oldest first (a dict of None)
        self.where: dict = {}  # key -> its scope

    def join(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.max_ids, self.max_bytes = budget.max_ids, budget.max_bytes
        self.scope_ids, self.scope_bytes = budget.scope_ids, budget.scope_bytes
        budget.members[id(self)] = self

    def release(self) -> None:
        """These memories are done with (a lane unloaded): forgotten, their room given back to the budget, which no
        longer counts them; anything kept after this counts in a budget of their own."""
        self.clear()
        budget = self.budget
        budget.members.pop(id(self), None)
        self.join(MemoryBudget(budget.max_ids, budget.max_bytes, budget.scope_ids, budget.scope_bytes))

    def bounds(self) -> dict:
        """The bounds, as the info answer reports them."""
        return {
            "memory_ids_per_connection": self.scope_ids,
            "memory_bytes_per_connection": _number(self.scope_bytes),
            "memory_ids": self.max_ids,
            "memory_bytes": _number(self.max_bytes),
        }

    @staticmethod
    def cost(key, memory: np.ndarray) -> int:
        return (len(key) if isinstance(key, str) else 8) + memory.nbytes + 256  # (+ the dict entry and objects)

    def check(self, key, ident, scope: str = "") -> None:
        """UsageError when `key`'s memory was dropped at its scope's bound (its next line must say "reset": true or
        carry its "memory")."""
        if key in self.dropped.get(scope, ()):
            raise UsageError(
                f"id {_shown_id(ident)}: its memory was dropped at this client's bound of "
                f"{self.scope_ids} ids / {_number(self.scope_bytes)} bytes (the least recently answered "
                f'go first); send "reset": true to start it from zeros, or its "memory"'
            )

    def keep(self, key, memory: np.ndarray, scope: str = "") -> None:
        kept = self.get(key)
        if kept is not None and kept.nbytes == memory.nbytes and self.where[key] == scope:
            del self[key]  # (an id answered again, its size the same: the counts stay, it goes last in line)
            self[key] = memory
            keys = self.scopes[scope][0]
            del keys[key]
            budget = self.budget
            budget.stamp += 1
            keys[key] = budget.stamp
            return
        cost = self.cost(key, memory)
        budget = self.budget
        if kept is not None:
            self.forget(key)
        elif (budget.ids >= self.max_ids or budget.nbytes + cost > self.max_bytes) and not budget.room_in(scope, cost):
            raise UsageError(
                f"the server holds its most LSTM memories ({self.max_ids} ids / "
                f"{_number(self.max_bytes)} bytes, every client together): no new id until a client "
                f"closes its connection"
            )
        total = budget.scopes.get(scope)
        if total is None:
            total = budget.scopes[scope] = [0, 0]
        while total[0] and (total[0] >= self.scope_ids or total[1] + cost > self.scope_bytes):
            found = budget.oldest(scope)
            if found is None:  # (never: the counts and the keys agree)
                break
            owner, old = found
            owner.forget(old)
            owner.mark_dropped(scope, old)
        if budget.ids >= self.max_ids or budget.nbytes + cost > self.max_bytes:  # (a known id grown past the whole's)
            self.mark_dropped(scope, key)
            raise UsageError(
                f"the server holds its most LSTM memories ({self.max_ids} ids / "
                f"{_number(self.max_bytes)} bytes, every client together): this id's memory is dropped"
            )
        held = self.scopes.get(scope)
        if held is None:
            held = self.scopes[scope] = [{}, 0]
        self[key] = memory
        self.where[key] = scope
        budget.stamp += 1
        held[0][key] = budget.stamp
        held[1] += cost
        self.nbytes += cost
        total[0] += 1
        total[1] += cost
        budget.ids += 1
        budget.nbytes += cost
        marks = self.dropped.get(scope)
        if marks and key in marks:
            del marks[key]

    def mark_dropped(self, scope: str, key) -> None:
        marks = self.dropped.setdefault(scope, {})
        marks[key] = None
        while len(marks) > self.scope_ids:
            del marks[next(iter(marks))]

    def keep_rows(self, keys: list, rows, scopes: Optional[list] = None) -> list:
        """keep(key, row, scope) for each key and its row of `rows` in turn; the indices of those refused (the whole's
        bound) with their errors."""
        refused = []
        for j, (key, row) in enumerate(zip(keys, rows)):
            try:
                self.keep(key, row, scopes[j] if scopes else "")
            except UsageError as exc:
                refused.append((j, str(exc)))
        return refused

    def forget(self, key) -> None:
        if key in self:
            memory = self.pop(key)
            cost = self.cost(key, memory)
            self.nbytes -= cost
            scope = self.where.pop(key, "")
            held = self.scopes.get(scope)
            if held is not None:
                held[0].pop(key, None)
                held[1] -= cost
            budget = self.budget
            budget.ids -= 1
            budget.nbytes -= cost
            total = budget.scopes.get(scope)
            if total is not None:
                total[0] -= 1
                total[1] -= cost

    def forget_scope(self, scope: str) -> None:
        """A scope (a connection) is gone: its memories and its record of dropped ones."""
        held = self.scopes.pop(scope, None)
        self.dropped.pop(scope, None)
        budget = self.budget
        total = budget.scopes.get(scope)
        for key in held[0] if held else ():
            memory = self.pop(key, None)
            self.where.pop(key, None)
            if memory is not None:
                cost = self.cost(key, memory)
                self.nbytes -= cost
                budget.ids -= 1
                budget.nbytes -= cost
                if total is not None:
                    total[0] -= 1
                    total[1] -= cost
        if total is not None and total[0] <= 0:
            del budget.scopes[scope]

    def clear(self) -> None:
        budget = self.budget
        for scope, held in self.scopes.items():
            total = budget.scopes.get(scope)
            if total is not None:
                total[0] -= len(held[0])
                total[1] -= held[1]
        budget.ids -= sum(len(held[0]) for held in self.scopes.values())
        budget.nbytes -= self.nbytes
        super().clear()
        self.nbytes = 0
        self.scopes.clear()
        self.dropped.clear()
        self.where.clear()


def _number(value):
    return value if not isinstance(value, float) or math.isfinite(value) else None


def _shown_id(ident) -> str:
    return json.dumps(ident)[:60]
