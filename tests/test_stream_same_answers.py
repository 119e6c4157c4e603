"""The stream's shared engine call for plain lines (answer_waiting's fast path: a group's observations read and
checked as one array, answers built together, memories kept in one pass) gives every line, good or bad, the bytes it
gets answered alone by stream_answer, the one place the stream's rules and messages live, with the memories carried
line by line. Mixed lines as a careless or hostile client writes them: ids of every type (too long, beyond 2^53,
bool, float, null, absent), repeated ids, NaN and values beyond float32, wrong lengths, strings and bools among the
numbers, batched observations, masks (good, empty branch, wrong length, bool, per-branch lists), memories (good,
short, nested, beyond float32), resets, stochastic lines with seeds, unknown keys, not JSON; whole, and in groups
of random sizes (a group is what one read returns)."""

import json
import random

import numpy as np
import orjson
import pytest
from conftest import BUNDLED, EXAMPLES

import inference as I
from mlagents_inference.core.errors import UsageError
from mlagents_inference.core.observations import AgentMemories
from mlagents_inference.services.protocol import answer_texts, answer_waiting, echoed_id, json_codec, stream_answer

IDS = [0, 1, 2, 3, -7, 2**53, -(2**53), 2**53 + 1, "a", "b", "é✓", "x" * 256, "y" * 257, None, 1.5, True, [1], 10**30]


def mixed_lines(settings, count: int, seed: int) -> list:
    rng = random.Random(seed)
    sizes = [(i.name, i.shape[0]) for i in settings.inputs]
    branches, memory_size = settings.discrete_branches, settings.memory_size

    def vector(n):
        values = [
            rng.choice([rng.gauss(0, 2), round(rng.gauss(0, 2), 3), rng.randint(-3, 3), 0.0, 1e-45]) for _ in range(n)
        ]
        for _ in range(rng.choice([0] * 24 + [1, 3])):  # finite in float32, but the actions need not be
            values[rng.randrange(n)] = rng.choice([3.4e38, -3.4e38])
        return values

    def odd(n):  # a near-miss observation
        return rng.choice(
            [
                vector(n - 1),
                vector(n + 1),
                [],
                vector(n - 1) + ["1"],
                vector(n - 1) + [True],
                vector(n - 1) + [None],
                vector(n - 1) + [3.4e38 * 10],
                vector(n - 1) + [10**30],
                vector(n - 1) + [10**400],
                [vector(n), vector(n)],
                "abc",
            ]
        )

    lines = []
    for _ in range(count):
        msg = {"id": rng.choice(IDS[:5] if rng.random() < 0.6 else IDS)} if rng.random() < 0.93 else {}
        for name, n in sizes:
            msg["obs" if len(sizes) == 1 and rng.random() < 0.9 else name] = (
                odd(n) if rng.random() < 0.08 else vector(n)
            )
        if branches and rng.random() < 0.3:
            mask = [1 if rng.random() < 0.75 else 0 for _ in range(sum(branches))]
            msg["action_masks"] = rng.choice(
                [
                    mask,
                    mask,
                    mask,
                    [0] * len(mask),
                    mask[:-1],
                    [bool(m) for m in mask],
                    [float(m) for m in mask],
                    [[1] * b for b in branches],
                    [0.5] + mask[1:],
                ]
            )
        if rng.random() < (0.12 if memory_size else 0.03):
            mem = vector(memory_size or 4)
            msg["memory"] = rng.choice([mem, mem, mem[:-1], [mem], mem[:-1] + [1e39]])
        if rng.random() < 0.1:
            msg["reset"] = rng.choice([True, True, False, "yes"])
        if rng.random() < 0.06:
            msg["stochastic"] = rng.choice([True, True, False, 1])
            msg["seed"] = rng.choice([0, 3, 2**63 - 1, 2**63, -1, 1.5])
        if rng.random() < 0.02:
            msg[rng.choice(["x", "obs_9", "obs_0"])] = vector(3)
        text = json.dumps(msg)
        if rng.random() < 0.02 and "obs" in msg:
            text = text.replace('"obs": [', '"obs": [NaN, ', 1)
        lines.append(
            rng.choice([b"not json", b"[1, 2]", b"{}", b'{"obs": [1e999]}']) if rng.random() < 0.01 else text.encode()
        )
    return lines


def alone(policy, lines: list, memories: AgentMemories) -> list:
    """Each line answered by itself through stream_answer (loads, then its rules), the memories carried in order."""
    loads, answers = json_codec()[0], []
    for raw in lines:
        msg = None
        try:
            try:
                msg = loads(raw)
            except ValueError:
                raise UsageError("line is not JSON (or nested too deep)")
            answers.append(stream_answer(policy, msg, memories))
        except UsageError as exc:
            answers.append({"id": echoed_id(msg), "error": str(exc)})
    return answers


@pytest.fixture(scope="module")
def policies():
    return {
        name: I.load(path)
        for name, path in (
            ("lstm", EXAMPLES / "lstm"),
            ("hybrid", EXAMPLES / "hybrid"),
            ("multi", EXAMPLES / "discrete-multi"),
            ("huggy", BUNDLED),
            ("vector", EXAMPLES / "vector"),
        )
    }


@pytest.mark.parametrize(
    "name, max_ids",
    [("lstm", 100_000), ("lstm", 6), ("hybrid", 100_000), ("multi", 100_000), ("huggy", 100_000), ("vector", 100_000)],
)
def test_every_line_gets_the_bytes_it_gets_alone(policies, name, max_ids):
    """(max_ids 6: the memories' bound reached all the time, an id dropped to make room on almost every line; there a
    group's memories are read when its lines arrive, so only lines answered as they come match line by line.)"""
    policy = policies[name]
    lines = mixed_lines(policy.settings, 1200, seed=len(name))
    if len(policy.settings.inputs) > 1:  # ("obs" beside obs_0, obs_1: a plain line answers it, stream_answer refuses)
        lines = [line for line in lines if b'"obs":' not in line]
    loads, dumps = json_codec()
    want = answer_texts(orjson.dumps, alone(policy, lines, AgentMemories(max_ids)))
    sizes = [1, 2, 5, 64, 300] if max_ids > len(lines) else [1]
    with np.errstate(over="ignore"):
        whole = answer_texts(dumps, answer_waiting(policy, lines, AgentMemories(max_ids), loads, 1 << 20))
        rng, memories, grouped, start = random.Random(7), AgentMemories(max_ids), [], 0
        while start < len(lines):
            size = rng.choice(sizes)
            grouped += answer_texts(
                dumps, answer_waiting(policy, lines[start : start + size], memories, loads, 1 << 20)
            )
            start += size
    assert sum(b'"error"' not in t for t in want) > len(lines) // 3  # (enough good lines to matter)
    if name == "vector":  # (its unnormalised input: 3.4e38 drives some actions beyond float32)
        assert any(b"non-finite actions" in t for t in want)
    for i, (w, a, b) in enumerate(zip(want, whole, grouped)):
        assert (a == w or max_ids < len(lines)) and b == w, (i, lines[i][:200], w[:200], a[:200], b[:200])
