"""An observation given as {"b64": base64 of its little-endian float32 bytes} (TF Serving's REST form for binary
values), on stream and serve's JSON lines: the bits are the values (answers equal the number form's for the same
float32), plain lines keep one engine call for a whole write, binary and number lines mix, and every malformed
binary input is refused with one error answer while the connection goes on (docs/inputs.md)."""

import base64
import json
import re
import urllib.request

import numpy as np
import pytest
from conftest import BUNDLED, EXAMPLES, count_engine_calls, dial, exchange, huggy_obs, local_server, run_stream

import inference

AGENTS = 64


def b64(values) -> dict:
    return {"b64": base64.b64encode(np.ascontiguousarray(values, "<f4").tobytes()).decode()}


def numbers(values) -> list:
    return np.asarray(values, np.float32).tolist()  # (each float32 as the double it is: read back exactly)


def edge_observations(rows: int) -> np.ndarray:
    """[rows, 59] float32: random normal values with the edges sprinkled in (subnormals of either sign, +-0, the
    least and greatest normal, the greatest float32, 1/3, 0.1), one or two a row."""
    obs = huggy_obs(rows, seed=43)
    edges = np.array(
        [1e-45, -1e-45, 1.4e-42, -3.3e-39, 0.0, -0.0, 1.1754944e-38, -1.1754942e-38, 3.4028235e38, -3.4028235e38]
        + [1 / 3, 0.1, 16777217.0],
        np.float32,
    )
    rng = np.random.RandomState(7)
    for row in range(rows):
        obs[row, rng.randint(0, 59, 2)] = edges[rng.randint(0, len(edges), 2)]
    return obs


def lines_text(lines: list) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.fixture(scope="module")
def huggy():
    return inference.load(BUNDLED)


def test_binary_observations_answer_as_their_float32_in_numbers_do_in_one_engine_call(huggy, monkeypatch):
    obs = edge_observations(AGENTS)
    as_numbers = run_stream(huggy, lines_text([{"id": k, "obs": numbers(o)} for k, o in enumerate(obs)]), monkeypatch)
    calls = count_engine_calls(huggy, monkeypatch)
    as_bytes = run_stream(huggy, lines_text([{"id": k, "obs": b64(o)} for k, o in enumerate(obs)]), monkeypatch)
    assert calls == [AGENTS]  # the 64 binary lines (one read) in one engine call
    assert as_bytes == as_numbers
    assert sum('"error"' not in a for a in as_bytes) >= AGENTS // 2  # (most rows give finite actions)


def test_binary_and_number_lines_mix_in_one_engine_call(huggy, monkeypatch):
    obs = huggy_obs(AGENTS, seed=5)
    want = run_stream(huggy, lines_text([{"id": k, "obs": numbers(o)} for k, o in enumerate(obs)]), monkeypatch)
    calls = count_engine_calls(huggy, monkeypatch)
    mixed = [{"id": k, "obs": b64(o) if k % 3 else numbers(o)} for k, o in enumerate(obs)]
    assert run_stream(huggy, lines_text(mixed), monkeypatch) == want
    assert calls == [AGENTS]
    for answer in map(json.loads, want):
        assert "error" not in answer and len(answer["continuous_actions"]) == 21


def test_several_rows_in_one_binary_input_and_lines_beyond_the_plain_path_answer_as_numbers_do(huggy, monkeypatch):
    obs = edge_observations(5)
    asked = [
        ({"id": "rows", "obs": b64(obs)}, {"id": "rows", "obs": numbers(obs)}),  # [5, 59]: a list of lists
        (
            {"id": 1, "obs": b64(obs[1]), "stochastic": True, "seed": 3},
            {"id": 1, "obs": numbers(obs[1]), "stochastic": True, "seed": 3},
        ),
        (
            {"id": 2, "obs": b64(obs[2:4]), "stochastic": True, "seed": 9},
            {"id": 2, "obs": numbers(obs[2:4]), "stochastic": True, "seed": 9},
        ),
    ]
    got = run_stream(huggy, lines_text([a for a, _ in asked]), monkeypatch)
    want = run_stream(huggy, lines_text([b for _, b in asked]), monkeypatch)
    assert got == want
    rows = json.loads(got[0])
    assert "error" not in rows and np.shape(rows["continuous_actions"]) == (5, 21)


def test_named_inputs_take_the_binary_form_beside_numbers():
    policy = inference.load(EXAMPLES / "discrete-multi")
    rng = np.random.RandomState(2)
    a, b = rng.randn(8, 20).astype(np.float32), rng.randn(8, 6).astype(np.float32)
    want = policy.act([a, b])["discrete_actions"].tolist()
    lines = [{"id": k, "obs_0": b64(a[k]) if k % 2 else numbers(a[k]), "obs_1": b64(b[k])} for k in range(8)]
    lines.append({"id": "both", "obs_0": b64(a), "obs_1": b64(b)})
    with local_server(EXAMPLES / "discrete-multi") as (_, said), dial(said["listen"]) as sock:
        got = exchange(sock, lines)
    assert [answer["discrete_actions"] for answer in got[:8]] == want
    assert got[8]["discrete_actions"] == want


def test_an_image_given_as_float32_bytes_answers_as_its_nested_numbers(monkeypatch):
    """A camera input (3 x 36 x 36, channel-first) as one row of bytes in C order, beside a vector input as numbers:
    the answer the nested lists get (the path beyond the plain lines)."""
    policy = inference.load(EXAMPLES / "visual-simple")
    rng = np.random.RandomState(3)
    image, vector = rng.rand(2, 3, 36, 36).astype(np.float32), rng.randn(2, 5).astype(np.float32)
    lines = [{"id": k, "obs_0": numbers(image[k]), "obs_1": numbers(vector[k])} for k in range(2)]
    want = run_stream(policy, lines_text(lines), monkeypatch)
    lines = [{"id": k, "obs_0": b64(image[k]), "obs_1": numbers(vector[k])} for k in range(2)]
    assert run_stream(policy, lines_text(lines), monkeypatch) == want
    assert all("error" not in json.loads(answer) for answer in want)


def floats_of(value: dict) -> np.ndarray:
    assert set(value) == {"b64"}, value
    return np.frombuffer(base64.b64decode(value["b64"], validate=True), "<f4")


def test_answers_asked_as_float32_bytes_hold_the_bits_of_the_number_answers(huggy, monkeypatch):
    """A line with "answer_b64": true gets its answer's float arrays as {"b64": ...} (several rows: their bytes one
    after another), the very float32 the number answer writes; plain lines so asked still share one engine call,
    and a line without the key is answered as before."""
    obs = huggy_obs(AGENTS, seed=8)
    want = [
        json.loads(a)
        for a in run_stream(huggy, lines_text([{"id": k, "obs": numbers(o)} for k, o in enumerate(obs)]), monkeypatch)
    ]
    calls = count_engine_calls(huggy, monkeypatch)
    asked = [{"id": k, "obs": b64(o), **({"answer_b64": True} if k % 4 else {})} for k, o in enumerate(obs)]
    got = [json.loads(a) for a in run_stream(huggy, lines_text(asked), monkeypatch)]
    assert calls == [AGENTS]
    for k, (answer, expected) in enumerate(zip(got, want)):
        if k % 4 == 0:
            assert answer == expected
            continue
        assert (
            set(answer) == {"id", "continuous_actions", "actions"} and answer["actions"] == answer["continuous_actions"]
        )
        assert np.array_equal(floats_of(answer["continuous_actions"]), np.float32(expected["continuous_actions"]))
    rows = [
        {"id": "r", "obs": b64(obs[:3]), "answer_b64": True},
        {"id": "s", "obs": b64(obs[3]), "answer_b64": True, "stochastic": True, "seed": 2},
    ]
    want = [
        json.loads(a)
        for a in run_stream(huggy, lines_text([{**line, "answer_b64": False} for line in rows]), monkeypatch)
    ]
    got = [json.loads(a) for a in run_stream(huggy, lines_text(rows), monkeypatch)]
    for answer, expected in zip(got, want):
        assert np.array_equal(
            floats_of(answer["continuous_actions"]), np.float32(expected["continuous_actions"]).ravel()
        )
    refused = json.loads(
        run_stream(huggy, lines_text([{"id": 1, "obs": b64(obs[0]), "answer_b64": 1}]), monkeypatch)[0]
    )
    assert refused == {"id": 1, "error": '"answer_b64" must be true or false'}


def test_an_lstm_answer_asked_as_bytes_gives_its_memory_so_and_its_discrete_actions_as_numbers(monkeypatch):
    policy = inference.load(EXAMPLES / "lstm")
    obs = np.random.RandomState(4).randn(3, 10).astype(np.float32)
    plain = [{"id": "a", "obs": numbers(o)} for o in obs]
    want = [json.loads(a) for a in run_stream(policy, lines_text(plain), monkeypatch)]
    got = [
        json.loads(a)
        for a in run_stream(policy, lines_text([{**line, "answer_b64": True} for line in plain]), monkeypatch)
    ]
    for answer, expected in zip(got, want):
        assert answer["discrete_actions"] == expected["discrete_actions"]
        assert np.array_equal(floats_of(answer["memory"]), np.float32(expected["memory"]))


@pytest.mark.parametrize("kind", ["huggy", "lstm"])
def test_lines_that_all_ask_for_bytes_are_answered_byte_for_byte_as_beside_a_line_that_does_not(
    kind, huggy, monkeypatch
):
    """Where every line of an engine call asks for its floats as bytes, they are written so at once: the answer lines
    are byte for byte those the same lines get in a call beside a line that asks for numbers (continuous actions and
    their "actions" again; an LSTM's memory as bytes, its discrete actions as numbers)."""
    if kind == "huggy":
        policy, obs = huggy, huggy_obs(AGENTS, seed=9)
    else:
        policy, obs = inference.load(EXAMPLES / "lstm"), np.random.RandomState(5).randn(AGENTS, 10).astype(np.float32)
    asked = [{"id": k, "obs": b64(o), "answer_b64": True} for k, o in enumerate(obs)]
    calls = count_engine_calls(policy, monkeypatch)
    alone = run_stream(policy, lines_text(asked), monkeypatch)
    beside = run_stream(policy, lines_text(asked + [{"id": "n", "obs": numbers(obs[0])}]), monkeypatch)
    assert calls == [AGENTS, AGENTS + 1]
    assert alone == beside[:AGENTS]
    assert all('"b64"' in line for line in alone) and '"b64"' not in beside[AGENTS]


REFUSED = [
    ({"b64": "AAAA"}, r'^"obs": "b64" holds 3 bytes, not a whole number of rows of 59 float32 \(236 bytes each\)$'),
    ({"b64": ""}, r'^"obs": "b64" holds 0 bytes, not a whole number of rows'),
    ("short", r'"b64" holds 232 bytes, not a whole number of rows of 59 float32'),
    ("row and a half", r'"b64" holds 352 bytes, not a whole number of rows of 59 float32'),
    ("no padding", r'^"obs": "b64" is not base64 \(RFC 4648, padded, no white space\)$'),
    ("white space", r'^"obs": "b64" is not base64'),
    ("url alphabet", r'^"obs": "b64" is not base64'),
    ("nan", r'^"obs" holds nan, inf or values beyond float32$'),
    ("inf", r'^"obs" holds nan, inf or values beyond float32$'),
    ({"b64": 5}, r'^"obs" as an object must be \{"b64": "<base64 of little-endian float32 bytes>"\} and nothing else$'),
    ("extra key", r'^"obs" as an object must be \{"b64": '),
    ({}, r'^"obs" as an object must be \{"b64": '),
]


def refused_lines() -> list:
    good = huggy_obs(2, seed=1)
    text = b64(good[0])["b64"]
    nan, inf = good[0].copy(), good[0].copy()
    nan[7], inf[58] = np.nan, -np.inf
    special = {
        "short": b64(good[0][:58]),
        "row and a half": b64(np.concatenate([good[0], good[1][:29]])),
        "no padding": {"b64": text.rstrip("=")},
        "white space": {"b64": text[:40] + "\n" + text[40:]},
        "url alphabet": {"b64": base64.urlsafe_b64encode(np.full(59, 0x3FFFFFFF, "<u4").tobytes()).decode()},
        "nan": b64(nan),
        "inf": b64(inf),
        "extra key": {"b64": text, "dtype": "float32"},
    }
    assert "-" in special["url alphabet"]["b64"] or "_" in special["url alphabet"]["b64"]
    assert not special["no padding"]["b64"].endswith("=") and text.endswith("=")
    return [{"id": k, "obs": special[value] if type(value) is str else value} for k, (value, _) in enumerate(REFUSED)]


def check_refusals(answers: list, good_after: dict) -> None:
    for k, ((_, pattern), answer) in enumerate(zip(REFUSED, answers)):
        assert answer["id"] == k and set(answer) - {"model", "version"} == {"id", "error"}, answer
        assert re.search(pattern, answer["error"]), (k, answer["error"])
    assert answers[len(REFUSED)] == good_after  # the line after them is answered as ever


def test_malformed_binary_inputs_get_one_error_answer_each_on_stream(huggy, monkeypatch):
    obs = huggy_obs(1, seed=2)[0]
    want = json.loads(run_stream(huggy, lines_text([{"id": "after", "obs": numbers(obs)}]), monkeypatch)[0])
    got = run_stream(huggy, lines_text(refused_lines() + [{"id": "after", "obs": b64(obs)}]), monkeypatch)
    check_refusals([json.loads(line) for line in got], want)


def test_serve_takes_binary_lines_in_one_engine_call_and_refuses_malformed_ones_keeping_the_connection():
    pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")
    obs = edge_observations(AGENTS)
    with local_server(BUNDLED, "127.0.0.1:0", "--http", "127.0.0.1:0") as (_, said), dial(said["listen"]) as sock:
        metrics = "http://" + said["http"] + "/metrics"

        def batches() -> tuple:
            with urllib.request.urlopen(metrics, timeout=60) as response:
                text = response.read().decode()
            return tuple(
                float(re.search(rf"^mlagents_serve_batch_lines_{name}(?:{{[^}}]*}})? (\S+)$", text, re.M).group(1))
                for name in ("count", "sum")
            )

        want = exchange(sock, [{"id": k, "obs": numbers(o)} for k, o in enumerate(obs)])
        before = batches()
        got = [exchange(sock, [{"id": k, "obs": b64(o)} for k, o in enumerate(obs)]) for _ in range(5)]
        calls, rows = (x - y for x, y in zip(batches(), before))
        refusals = exchange(sock, refused_lines() + [{"id": "after", "obs": b64(obs[3])}])
        mixed = exchange(sock, [{"id": k, "obs": b64(o) if k % 2 else numbers(o)} for k, o in enumerate(obs)])
    assert all(answers == want for answers in got)
    assert mixed == want
    assert rows == 5 * AGENTS and rows / calls >= AGENTS / 2, (calls, rows)  # (a write may come in two reads)
    check_refusals(refusals, {**want[3], "id": "after"})
