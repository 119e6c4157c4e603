"""Stream lines as a hostile client writes them: random JSON (any shape, nesting, types), random
bytes and near-miss requests go through mode_stream in this process; every line gets exactly one
answer, in order, each answer strict JSON (no NaN/Infinity) that is either actions or an error,
and nothing escapes as an exception. Runs on a discrete LSTM policy and on the bundled continuous one."""

import json

import pytest
from conftest import BUNDLED, EXAMPLES, run_stream, strict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inference as I
from mlagents_inference.api.policy import load_checkpoint

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=8),
    st.floats(allow_nan=True, allow_infinity=True),
)
any_json = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=30,
)
keys = st.sampled_from(["obs", "obs_0", "obs_1", "id", "stochastic", "seed", "action_masks", "memory", "reset", "x"])
near_miss = st.dictionaries(
    keys,
    st.one_of(
        any_json, st.lists(st.floats(width=32), min_size=0, max_size=40), st.lists(st.integers(0, 1), max_size=12)
    ),
    max_size=6,
)
lines = st.lists(
    st.one_of(
        any_json.map(lambda v: json.dumps(v)),
        near_miss.map(lambda v: json.dumps(v)),
        st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
        st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture(scope="module")
def policies():
    out = {"huggy": I.Policy(load_checkpoint(BUNDLED / "Huggy" / "Huggy-600017.pt"))}
    out["lstm"] = I.load(EXAMPLES / "lstm")
    return out


@pytest.mark.parametrize("name", ["huggy", "lstm"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=lines)
def test_every_line_gets_one_strict_json_answer(policies, monkeypatch, name, batch):
    sent = [line.replace("\n", " ").replace("\r", " ") for line in batch]
    sent = [line for line in sent if line.strip()]  # blank lines are skipped, not answered
    answers = run_stream(policies[name], "".join(line + "\n" for line in sent), monkeypatch, max_line_bytes=4096)
    assert len(answers) == len(sent)
    for answer in answers:
        parsed = strict(answer)
        assert isinstance(parsed, dict) and "id" in parsed
        assert ("error" in parsed) != any(k in parsed for k in ("continuous_actions", "discrete_actions"))
        assert parsed["id"] is None or isinstance(parsed["id"], (str, int)) and not isinstance(parsed["id"], bool)
