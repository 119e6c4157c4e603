"""The accelerator paths held to their sources without an accelerator (issue 33). No test here has a GPU or an NPU: each
drives the device logic through a stand-in for the device API only, written from the sources it stands for, and
recording which card, stream and context each call runs on and which provider options a session gets. torch and
onnxruntime themselves stay real: the engines' tensors are CPU tensors, and the stand-in onnxruntime runs every session
on the real CPU provider.

- FakeCards stands for torch.cuda / torch.npu (torch/cuda/graphs.py; torch_npu/npu/graphs.py, streams and utils.py and
  csrc/core/npu/NPUGraph.cpp at v7.3.0-pytorch2.9.0);
- FakeOrt stands for onnxruntime-cann / onnxruntime-gpu (provider_options_utils.h: an unknown key refuses the session;
  cann_graph.cc: without a precision mode CANN's graph engine keeps its default, force_fp16).
"""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime
import pytest
import torch
from conftest import EXAMPLES, ROOT, child_env

import inference
from mlagents_inference.core import buckets, extras, sessions
from mlagents_inference.core.errors import UsageError
from mlagents_inference.core.observations import random_inputs, random_masks
from mlagents_inference.engines import devices, factory, torch_devices, torch_engine

sys.path.insert(0, str(ROOT / "tools"))
VECTOR = EXAMPLES / "vector"
TASK_QUEUE_2 = "Do not support TASK_QUEUE_ENABLE = 2 during NPU graph capture, please export TASK_QUEUE_ENABLE=1/0."


# ---------------------------------------------------------------------------------------------------------------------
# Device graphs: the card, the stream and the context of every call
# ---------------------------------------------------------------------------------------------------------------------


class FakeStream:
    def __init__(self, cards, card: int):
        self.cards, self.card = cards, card

    def wait_stream(self, other):
        self.cards.touched.add(self.card)

    def synchronize(self):  # (the host waits for the stream)
        self.cards.touched.add(self.card)
        self.cards.waits.append(("stream", self))


class FakeEvent:
    def __init__(self, cards):
        self.cards, self.stream = cards, None

    def record(self, stream=None):
        self.stream = stream if stream is not None else self.cards.streams[self.cards.current]

    def synchronize(self):
        self.cards.waits.append(("event", self.stream))

    def elapsed_time(self, other):
        return 0.0


class CopyLog(torch.overrides.TorchFunctionMode):
    """Every Tensor.copy_ while it is entered, with the stream current on the card then and its non_blocking, and
    every read of a tensor's values to the host (.cpu(), .item(), .tolist(): on a card, each one a wait)."""

    def __init__(self, cards):
        super().__init__()
        self.cards = cards

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        c = self.cards
        if func is torch.Tensor.copy_:
            dst, src = args[0], args[1]
            blocking = not kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            c.copies.append((c.kind(src), c.kind(dst), c.streams[c.current], blocking))
        elif func in (torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.tolist):
            c.waits.append((func.__name__, c.streams[c.current]))
        return func(*args, **kwargs)


class FakeGraph:
    """NPUGraph / CUDAGraph: capture_begin records the current card and its current stream (NPUGraph.cpp
    capture_dev_ = current_device(), capture_stream_ = getCurrentNPUStream()) and refuses the default stream; replay
    runs what was recorded, in place, on the card it was captured on."""

    def __init__(self, cards):
        self.cards, self.recorded, self.capture_dev, self.capture_stream = cards, None, None, None

    def capture_begin(self):
        c = self.cards
        if c.refuse:
            raise RuntimeError(c.refuse)
        if c.streams[c.current] is c.defaults[c.current]:
            raise RuntimeError("NPU graphs must be captured on a non-default stream.")
        self.capture_dev, self.capture_stream, c.capturing = c.current, c.streams[c.current], self

    def capture_end(self):
        c = self.cards
        c.capturing = None
        if c.streams[c.current] is not self.capture_stream:
            raise RuntimeError("Capture must end on the same stream it began on.")

    def replay(self):
        self.cards.touched.add(self.capture_dev)
        self.cards.replays.append(self.capture_dev)
        self.cards.replay_streams.append(self.cards.streams[self.cards.current])  # (a replay runs on the current one)
        if self.recorded is not None:
            forward, tensors, out = self.recorded
            with torch.inference_mode():
                for dst, src in zip(out, forward(tensors)):
                    dst.copy_(src)


class FakeCards:
    """torch.cuda / torch.npu as the torch engine uses them, for engines whose CPU tensors stand for tensors on a card:
    - device(i): the current card for the context (torch_npu utils.device);
    - stream(s): s current on its card, and that card current (set_stream sets the stream's device), both restored on
      exit (StreamContext);
    - graph(g, stream=None): its default capture stream made on the *current* card once and cached (torch_npu makes it
      even when a stream is given); __enter__ enters its stream context and then capture_begin, which may raise with the
      stream context left entered; __exit__ capture_end, then the stream context's exit;
    - an engine's work runs on its tensors' card and that card's current stream, and is recorded into a capture only
      when that is the capture's card and stream (work elsewhere is not captured: the graph replays nothing).
    `touched` holds every card a call ran on (a context opened there), `replays` the card of each replay."""

    def __init__(self, cards: int = 2):
        self.current = 0
        self.defaults = {c: FakeStream(self, c) for c in range(cards)}
        self.streams = dict(self.defaults)
        self.touched, self.replays = set(), []
        self.capturing = self.refuse = self.default_capture_stream = None
        self.broken = False  # a capture that records nothing, wherever it runs
        self.tensor_card = 0
        self.waits, self.replay_streams, self.copies = [], [], []  # (copies: recorded inside CopyLog)
        self.pinned_storages, self.card_storages = set(), set()  # pinned host memory; what the card computed
        self.pinned_made, self.held = 0, []

    def kind(self, tensor) -> str:
        """'pinned' (host memory made by the engine's pinned()), 'card' (what a forward computed) or 'other'."""
        ptr = tensor.untyped_storage().data_ptr()
        return "pinned" if ptr in self.pinned_storages else "card" if ptr in self.card_storages else "other"

    def Event(self, enable_timing=False, blocking=False):
        return FakeEvent(self)

    def NPUGraph(self):
        return FakeGraph(self)

    CUDAGraph = NPUGraph

    def attach(self, engine, card: int):
        """`engine`'s tensors stand for tensors on `card`, and this is its device API."""
        forward = engine._forward

        def on_card(tensors, names=None):
            self.touched.add(card)
            out = forward(tensors, names)
            self.card_storages.update(o.untyped_storage().data_ptr() for o in out)
            self.held += out  # (held: a freed block's address must not come back as host memory)
            g = self.capturing
            if g is not None and not self.broken and g.capture_dev == card and self.streams[card] is g.capture_stream:
                g.recorded = (forward, tensors, out)
            return out

        def pinned(shape, dtype=torch.float32):  # (torch.empty(pin_memory=True) needs a card: recorded instead)
            tensor = torch.empty(shape, dtype=dtype)
            self.pinned_storages.add(tensor.untyped_storage().data_ptr())
            self.held.append(tensor)
            self.pinned_made += 1
            return tensor

        engine._forward, engine.pinned, self.tensor_card = on_card, pinned, card
        engine.api = engine.graph_api = self
        engine.graph_cls, engine.card = self.NPUGraph, card
        return engine

    def _card(self, device) -> int:
        if device is None:
            return self.current
        return device if isinstance(device, int) else self.tensor_card  # (a torch.device: the engine's own card)

    def current_device(self):
        return self.current

    def Stream(self, device=None, priority=0):
        card = self._card(device)
        self.touched.add(card)
        return FakeStream(self, card)

    def current_stream(self, device=None):
        card = self._card(device)
        self.touched.add(card)
        return self.streams[card]

    def synchronize(self, device=None):
        self.touched.add(self._card(device))
        self.waits.append(("device", device))

    def empty_cache(self):
        self.touched.add(self.current)

    @contextlib.contextmanager
    def device(self, index):
        previous, self.current = self.current, self._card(index)
        self.touched.add(self.current)
        try:
            yield
        finally:
            self.current = previous

    def _set_stream(self, stream):
        self.streams[stream.card], self.current = stream, stream.card

    def stream(self, stream):
        cards = self

        class StreamContext:  # (a class, as torch's: one left entered stays entered; nothing restores it later)
            def __enter__(self):
                self.src, self.dst = cards.streams[cards.current], cards.streams[stream.card]
                cards._set_stream(stream)

            def __exit__(self, *exc):
                if self.src.card != stream.card:
                    cards._set_stream(self.dst)
                cards._set_stream(self.src)

        return StreamContext()

    def graph(self, graph, pool=None, stream=None, capture_error_mode="global"):
        cards = self
        if self.default_capture_stream is None:
            self.default_capture_stream = self.Stream()
        capture_stream = stream if stream is not None else self.default_capture_stream

        class Capture:
            def __enter__(self):
                cards.synchronize()
                cards.empty_cache()
                self.ctx = cards.stream(capture_stream)
                self.ctx.__enter__()
                graph.capture_begin()

            def __exit__(self, *exc):
                graph.capture_end()
                self.ctx.__exit__(*exc)

        return Capture()


def torch_policy(folder=VECTOR, graphs=True):
    return inference.load(str(folder), device="cpu", engine="torch", graphs=graphs)


def observations(policy, rows: int, seed: int) -> list:
    return random_inputs(policy.settings, seed, rows)


def same_actions(policy, eager, obs):
    got, want = policy.act(obs)["continuous_actions"], eager.act(obs)["continuous_actions"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_graphs_on_the_second_card_are_captured_and_replayed_there_and_card_0_is_never_touched():
    """Issue 33, 1: captured with torch_npu's default capture stream (made on the current card, 0) the work of card 1
    was not captured, the replay did nothing and every call answered the all-zeros warm-up."""
    cards, eager = FakeCards(), torch_policy(graphs=False)
    policy = torch_policy()
    cards.attach(policy.engine, 1)
    for call, rows in enumerate([3, 3, 5, 3, 5]):
        same_actions(policy, eager, observations(policy, rows, call))
    assert cards.replays and set(cards.replays) == {1}
    assert 0 not in cards.touched, "a call ran on card 0 (a context opened there)"
    assert cards.current == 0 and cards.streams == cards.defaults  # (the contexts and streams restored)
    assert factory.engine_report(policy.engine)["graphs"] == "on: captured for buckets 4, 8"


def test_two_policies_on_two_cards_in_one_process():
    cards, eager = FakeCards(), torch_policy(graphs=False)
    first, second = torch_policy(), torch_policy()
    cards.attach(first.engine, 0)
    cards.attach(second.engine, 1)
    for call in range(4):
        for policy in (second, first):
            same_actions(policy, eager, observations(policy, 4, call))
    assert cards.replays.count(0) == cards.replays.count(1) == 4  # (the capture check replays once)


def test_a_capture_that_fails_leaves_the_streams_clean_runs_eager_and_says_so_once(capsys):
    """torch_npu's capture_begin raises under TASK_QUEUE_ENABLE=2 after graph.__enter__ has entered its stream context:
    the card's stream must not stay the capture stream, and graphs must not be reported on."""
    cards, eager = FakeCards(), torch_policy(graphs=False)
    cards.refuse = TASK_QUEUE_2
    policy = torch_policy()
    cards.attach(policy.engine, 1)
    for call in range(3):
        same_actions(policy, eager, observations(policy, 2, call))
        assert cards.current == 0 and cards.streams == cards.defaults
    report = factory.engine_report(policy.engine)["graphs"]
    assert report.startswith("off: capture failed") and "TASK_QUEUE_ENABLE = 2" in report
    assert policy.engine.graph_api is None and not cards.replays
    (note,) = capsys.readouterr().err.strip().splitlines()
    assert note.startswith("[note] device graphs off: capture failed") and note.endswith("running eager")


def test_task_queue_2_is_known_before_capture(monkeypatch):
    npu, cuda = SimpleNamespace(type="npu"), SimpleNamespace(type="cuda")
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "2")
    assert "TASK_QUEUE_ENABLE=2" in torch_engine.capture_refused(npu) and torch_engine.capture_refused(cuda) is None
    monkeypatch.setenv("ASCEND_LAUNCH_BLOCKING", "1")  # (the queue is off then: OptionsManager::GetTaskQueueEnable)
    assert torch_engine.capture_refused(npu) is None
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "1")
    monkeypatch.delenv("ASCEND_LAUNCH_BLOCKING")
    assert torch_engine.capture_refused(npu) is None


def test_a_graph_whose_replay_differs_from_eager_is_refused(capsys):
    cards, eager = FakeCards(), torch_policy(graphs=False)
    cards.broken = True  # captured on the right card and stream, yet replaying nothing
    policy = torch_policy()
    cards.attach(policy.engine, 1)
    for call in range(3):
        same_actions(policy, eager, observations(policy, 3, call))
    assert "replayed" in factory.engine_report(policy.engine)["graphs"] and len(cards.replays) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def on_card(folder=VECTOR, card: int = 1):
    """A torch policy whose engine runs on the stand-in card `card`: (policy, cards)."""
    cards, policy = FakeCards(), torch_policy(folder)
    cards.attach(policy.engine, card)
    return policy, cards


def test_bucket_sizes_are_fixed_and_every_batch_size_lands_in_the_smallest_one_that_holds_it():
    sizes = buckets.bucket_sizes()
    assert sizes[:7] == [1, 2, 4, 8, 16, 32, 64] and sizes[-1] == buckets.MAX_BUCKET == 65_536
    assert sizes == sorted(set(sizes)) and len(sizes) <= 64  # (each a capture: a bounded few)
    engine = torch_policy().engine
    for rows in [*range(1, 300), 4095, 4096, 4097, 65_535, 65_536]:
        bucket = engine.bucket_of(rows)
        assert bucket in sizes and bucket >= rows and (rows <= 64 or bucket - rows < bucket / 4), (rows, bucket)
        assert all(s < rows for s in sizes if s < bucket), (rows, bucket)
    assert engine.bucket_of(65_537) is None and buckets.bucket_sizes(100)[-1] == 100


def test_every_batch_size_replays_a_graph_after_warm_up_and_answers_as_eager():
    """Issue 41, 3: only the first 8 distinct batch sizes were captured, the others ran eager for good (the stream's
    and serve's sizes vary). Now each bucket is captured once, and no call within the largest bucket runs eager."""
    policy, cards = on_card()
    eager = torch_policy(graphs=False)
    sizes = [3, 17, 1, 100, 5, 64, 65, 2, 9, 33, 200, 7, 130, 11, 4, 6, 250, 90]
    for call, rows in enumerate(sizes):
        same_actions(policy, eager, observations(policy, rows, call))
    buckets = {policy.engine.bucket_of(rows) for rows in sizes}
    assert policy.engine.counts == {"captures": len(buckets), "replays": len(sizes), "eager": 0}
    before = dict(policy.engine.counts)
    for call, rows in enumerate(reversed(sizes)):  # (warm: every size replays, nothing is captured again)
        same_actions(policy, eager, observations(policy, rows, 100 + call))
    assert policy.engine.counts == {**before, "replays": before["replays"] + len(sizes)}
    assert set(cards.replays) == {1} and len(cards.replays) == 2 * len(sizes)
    report = factory.engine_report(policy.engine)
    assert report["graphs"].startswith("on: captured for buckets 1, 2, 4, 8, 16,")
    assert report["graph_calls"] == policy.engine.counts


@pytest.mark.parametrize("folder", ["lstm", "hybrid", "discrete-multi", "attention"])
def test_padded_rows_never_reach_an_answer_and_a_memory_row_stays_with_its_agent(folder):
    """A call of 8 rows then calls of 5 and 6 in the same bucket (8): the rows the bucket pads with hold the earlier
    call's agents, and no answer shows them; each agent's answer (its memory too) is eager's for its own row."""
    policy, cards = on_card(EXAMPLES / folder)
    eager = torch_policy(EXAMPLES / folder, graphs=False)
    s = policy.settings
    rng = np.random.RandomState(7)
    for call, rows in enumerate([8, 5, 6, 5]):
        obs = observations(policy, rows, call)
        masks = None
        if s.discrete_branches:
            masks = (rng.rand(rows, sum(s.discrete_branches)) < 0.7).astype(np.float32)
            at = 0
            for width in s.discrete_branches:  # (each branch keeps one action allowed)
                masks[np.arange(rows), at + rng.randint(width, size=rows)] = 1.0
                at += width
        memory = rng.randn(rows, s.memory_size).astype(np.float32) if s.memory_size else None
        got, want = policy.act(obs, masks, memory=memory), eager.act(obs, masks, memory=memory)
        assert set(got) == set(want)
        for key in want:
            assert got[key].shape[0] == rows, key
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=key)
        for row in range(rows):  # (each agent's row alone: the same answer as in the batch)
            alone = eager.act(
                [x[row : row + 1] for x in obs],
                None if masks is None else masks[row : row + 1],
                memory=None if memory is None else memory[row : row + 1],
            )
            for key in want:
                np.testing.assert_allclose(got[key][row : row + 1], alone[key], rtol=0, atol=1e-5, err_msg=key)
    assert policy.engine.counts == {"captures": 1, "replays": 4, "eager": 0}


def test_copies_go_through_pinned_buffers_on_the_engines_stream_with_one_wait_per_call():
    """Issue 41, 2: torch.from_numpy's pageable memory went to a blocking copy_, and each output came back with its own
    .cpu() (a wait each) on the card's current stream."""
    policy, cards = on_card(EXAMPLES / "hybrid")
    for rows in (3, 30):  # (warm-up: buckets 4 and 32 captured)
        policy.act(observations(policy, rows, 0), deterministic=False, seed=1)
    made = cards.pinned_made
    for call, rows in enumerate([3, 4, 30, 3, 31, 25]):
        obs = observations(policy, rows, call)
        cards.waits.clear(), cards.copies.clear(), cards.replay_streams.clear()
        with CopyLog(cards):
            policy.act(obs, deterministic=False, seed=call)  # (every engine output fetched: mu, probabilities)
        own = policy.engine.stream
        assert own is not None and own not in cards.defaults.values()
        assert len(cards.waits) == 1, cards.waits  # one wait for the whole call
        assert cards.replay_streams == [own]
        into = [c for c in cards.copies if c[0] == "pinned"]  # pinned host -> the card
        out = [c for c in cards.copies if c[0] == "card" and c[1] != "card"]  # the card -> host (not the replay's own)
        assert len(into) == len(policy.settings.inputs) + 1  # (the observations and the mask)
        assert len(out) == 2 and all(c[1] == "pinned" for c in out)
        assert all(stream is own and not blocking for _, _, stream, blocking in into + out), into + out
    assert policy.engine.counts["eager"] == 0
    # pinned input buffers are made once per bucket: only the answers' own (torch's caching host allocator) since
    assert cards.pinned_made - made == 6 * 2


def test_an_answer_is_not_overwritten_by_the_next_call():
    """Arrays handed back never alias a buffer that a later call writes (the graph's static outputs, a pinned
    buffer): hold call 1's answer, make call 2, and call 1's answer is unchanged."""
    for folder in ("vector", "lstm"):
        policy, cards = on_card(EXAMPLES / folder)
        first_obs, second_obs = observations(policy, 4, 1), observations(policy, 4, 2)
        first = policy.act(first_obs)
        kept = {key: value.copy() for key, value in first.items()}
        second = policy.act(second_obs)
        for key in first:
            assert not np.array_equal(second[key], kept[key]), key  # (the two calls do answer differently)
            np.testing.assert_array_equal(first[key], kept[key], err_msg=key)
        assert policy.engine.counts["replays"] == 2


@pytest.mark.parametrize(
    "folder", [ROOT / "assets" / "ppo-Huggy-sample", *(EXAMPLES / f for f in ("lstm", "hybrid", "attention"))]
)
def test_tensors_on_the_policys_device_are_answered_with_tensors_there(folder):
    """Issue 41, 4: a tensor on the policy's device was copied to the host and the answer came back as numpy. CPU
    tensors on a CPU torch policy are the vehicle: the answer is tensors on that device, eager's own values."""
    policy = torch_policy(folder)
    s = policy.settings
    obs = observations(policy, 6, 3)
    memory = np.random.RandomState(4).randn(6, s.memory_size).astype(np.float32) if s.memory_size else None
    want = policy.act(obs, memory=memory)
    got = policy.act([torch.from_numpy(x) for x in obs], memory=None if memory is None else torch.from_numpy(memory))
    assert set(got) == set(want)
    for key, value in got.items():
        assert isinstance(value, torch.Tensor) and value.device == policy.device, key
        np.testing.assert_allclose(value.numpy(), want[key], rtol=0, atol=1e-6, err_msg=key)
    one = policy.act({i.name: torch.from_numpy(x[0]) for i, x in zip(s.inputs, obs)})
    assert all(isinstance(v, torch.Tensor) and v.shape[0] == want[k].shape[1] for k, v in one.items() if k != "memory")
    sampled = policy.act([torch.from_numpy(x) for x in obs], deterministic=False, seed=5, memory=None)
    for key, value in policy.act(obs, deterministic=False, seed=5).items():  # (the same noise: drawn on the CPU)
        np.testing.assert_allclose(sampled[key].numpy(), value, rtol=0, atol=1e-6, err_msg=key)


def test_tensors_on_the_card_stay_there_checked_with_one_wait_and_answers_kept():
    """On the stand-in card: no pinned host buffer and no copy to the host; the replay runs on the caller's current
    stream (in order with what made the inputs); the only wait is the one read of the checks' verdicts; an answer is
    not overwritten by the next call."""
    policy, cards = on_card(EXAMPLES / "hybrid")
    eager = torch_policy(EXAMPLES / "hybrid", graphs=False)
    first_obs = observations(policy, 5, 0)
    first = policy.act([torch.from_numpy(x) for x in first_obs])  # (warm-up: bucket 8 captured)
    kept = {k: v.clone() for k, v in first.items()}
    made = cards.pinned_made
    cards.waits.clear(), cards.copies.clear(), cards.replay_streams.clear()
    obs = observations(policy, 7, 1)
    with CopyLog(cards):
        got = policy.act([torch.from_numpy(x) for x in obs])
    assert cards.pinned_made == made and not [c for c in cards.copies if "pinned" in c[:2]]
    assert [w[0] for w in cards.waits] == ["tolist"]  # (the checks' verdicts: one read)
    assert cards.replay_streams == [cards.defaults[1]] and policy.engine.counts["eager"] == 0
    want = eager.act(obs)
    for key, value in got.items():
        np.testing.assert_allclose(value.numpy(), want[key], rtol=0, atol=1e-6, err_msg=key)
        assert torch.equal(first[key], kept[key]), key


def test_tensors_on_the_device_are_checked_there_as_arrays_are():
    policy = torch_policy(EXAMPLES / "hybrid")
    x = torch.from_numpy(observations(policy, 4, 0)[0])
    fine = policy.act([x], action_masks=torch.tensor([[1.0, 0.0]] * 4))
    assert isinstance(fine["discrete_actions"], torch.Tensor) and (fine["discrete_actions"] == 0).all()
    for call, words in (
        (lambda: policy.act([x * float("nan")]), "obs_0: a value is nan or infinite"),
        (lambda: policy.act([x[:, :5]]), "shape"),
        (lambda: policy.act([x], action_masks=torch.zeros(4, 2)), "branch 0 allows no action"),
        (lambda: policy.act([x], action_masks=torch.full((4, 2), 0.5)), "values must be 0"),
        (lambda: policy.act([x], action_masks=torch.ones(4, 2, dtype=torch.bool)), "bool"),
        (lambda: policy.act([x], action_masks=np.ones((4, 2), np.float32)), "a tensor on cpu"),
        (lambda: policy.act([x, x]), "2 observation tensor"),
    ):
        with pytest.raises(UsageError, match=words):
            call()


def test_the_probe_splits_a_call_with_the_cards_events_on_the_engines_stream():
    """tools/device_check.sh's probe (tools/device_probe.py): copy in, replay and copy out between events recorded on
    the engine's own stream, where the bucket's graph runs; the forwards of one act() counted."""
    import device_probe

    policy, cards = on_card(EXAMPLES / "hybrid")
    assert device_probe.event_split(policy, 3, 4, 0) is None  # (bucket 4 not captured yet: nothing to split)
    policy.act(observations(policy, 3, 0))
    recorded = []
    event = cards.Event

    def recording(**kwargs):
        made = event(**kwargs)
        recorded.append(made)
        return made

    cards.Event = recording
    split = device_probe.event_split(policy, 3, 4, 0)
    assert set(split) == {"copy_in_ms", "replay_ms", "copy_out_ms"} and len(recorded) == 16
    assert all(e.stream is policy.engine.stream for e in recorded)
    assert policy.engine.counts == {"captures": 1, "replays": 1, "eager": 0}  # (the probe's replays are its own)
    counted = device_probe.forwards_per_act(EXAMPLES / "hybrid", torch.device("cpu"))
    assert set(counted) == {"deterministic", "sampled"} and all(n >= 1 for n in counted.values())


def test_info_benchmark_and_the_stream_stats_count_captures_replays_and_eager_calls(capsys, monkeypatch):
    from conftest import run_stream

    from mlagents_inference.fronts import stream

    policy, cards = on_card()
    lines = "".join(json.dumps({"id": i, "obs": [[0.1 * i] * 8] * (1 + i % 3)}) + "\n" for i in range(6))
    run_stream(policy, lines, monkeypatch)
    ctx = SimpleNamespace(
        policy=policy,
        engine_name="torch",
        device="npu:1",
        args=SimpleNamespace(max_line_bytes=1 << 20, stream_stats=True),
    )
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    stream.mode_stream(ctx)
    (said,) = capsys.readouterr().err.strip().splitlines()
    counts = policy.engine.counts
    assert counts["eager"] == 0 and counts["captures"] >= 1
    assert f"graphs=captures:{counts['captures']},replays:{counts['replays']},eager:0" in said, said
    assert factory.engine_report(policy.engine)["graph_calls"] == counts
    assert factory.engine_report(torch_policy().engine)["graph_calls"] is None  # (the CPU: no device graphs)


def test_info_precision_and_benchmark_say_what_ran(capsys):
    from mlagents_inference.fronts.benchmark import show_benchmark
    from mlagents_inference.fronts.verify import show_precision

    for mode, extra in (("info", []), ("precision", []), ("benchmark", ["--runs", "20"])):
        assert inference.main(["--mode", mode, "--model-dir", str(VECTOR), "--engine", "torch", "--json", *extra]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert out["precision"] == "float32 (CPU)" and out["graphs"] is None, (mode, out)
    assert inference.main(["--mode", "info", "--model-dir", str(VECTOR), "--engine", "onnxruntime"]) == 0
    assert "[policy] precision = float32 (CPUExecutionProvider)" in capsys.readouterr().out
    said = {"graphs": "off: capture failed on npu:1 (...)", "precision": "float32, HF32 off; ..."}
    bench = {
        "device": "npu:1",
        "dtype": "float32",
        "engine": "torch",
        "runs": 1,
        "warmup": 1,
        "batch": 1,
        "avg_ms": 1,
        "p50_ms": 1,
        "p95_ms": 1,
        "p99_ms": 1,
        "max_ms": 1,
        "throughput_per_s": 1,
        "onnxruntime_p50_ms": None,
        "plot": None,
        "graph_calls": {"captures": 2, "replays": 40, "eager": 0},
        **said,
    }
    assert "  device graphs: off: capture failed on npu:1 (...)" in show_benchmark(bench)
    assert "  device graph calls: captures 2, replays 40, eager 0" in show_benchmark(bench)
    c = {"cos": 1.0, "max_abs_err": 0.0, "bitwise_equal_ratio": 1.0}
    precision = {
        **bench,
        **c,
        "samples": 1,
        "seed": 0,
        "max_rel_err": 0.0,
        "compared": "x",
        "vs_cpu_float32": c,
        "min_cos": 0.999,
        "tol": 0.01,
        "passed": True,
    }
    assert "  ran as: float32, HF32 off; ..." in show_precision(precision)


# ---------------------------------------------------------------------------------------------------------------------
# What float32 runs as: TF32, HF32, CANN's precision mode; bfloat16 on an NPU before the 910B
# ---------------------------------------------------------------------------------------------------------------------


def test_tf32_overrides_are_detected_and_the_flags_read_back(monkeypatch):
    cuda = torch.device("cuda", 1)
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    try:
        torch_devices.full_float32(cuda)
        said = torch_devices.float32_report(cuda, "float32")
        assert said.startswith("float32, TF32 off") and "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in said
        assert "NVIDIA_TF32_OVERRIDE=1" in said
        torch.backends.cuda.matmul.allow_tf32 = True  # (what an override left on is said as on)
        assert "TF32 ON for cuBLAS matmul" in torch_devices.float32_report(cuda, "float32")
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def fake_npu(name: str, bf16: bool):
    flags = {g: SimpleNamespace(allow_hf32=True) for g in ("conv", "matmul", "aclnn")}
    return SimpleNamespace(is_bf16_supported=lambda: bf16, get_device_name=lambda index=None: name, **flags)


def test_an_npu_before_the_910b_refuses_bfloat16_in_one_line_and_says_its_float32_is_float16(monkeypatch):
    """torch_npu: IsBF16Supported and the default ACL_PRECISION_MODE both test SocVersion >= Ascend910B1; the 310P and
    the 910A default to allow_fp32_to_fp16."""
    npu = SimpleNamespace(type="npu", index=0)
    actor = torch_policy().checkpoint.actor
    monkeypatch.setattr(torch, "npu", fake_npu("Ascend310P3", False), raising=False)
    with pytest.raises(UsageError, match=r"bfloat16: Ascend310P3 \(.*\) has no bfloat16.*use --dtype float16"):
        torch_engine.TorchEngine(actor, npu, "bfloat16")
    torch_devices.full_float32(npu)
    said = torch_devices.float32_report(npu, "float32")
    assert "HF32 off" in said and "allow_fp32_to_fp16" in said and "Ascend310P3" in said and "cannot hold" in said
    monkeypatch.setattr(torch, "npu", fake_npu("Ascend910B3", True), raising=False)
    torch_devices.check_dtype(npu, "bfloat16")
    assert "must_keep_origin_dtype (torch_npu's default on Ascend910B3)" in torch_devices.float32_report(npu, "float32")


# ---------------------------------------------------------------------------------------------------------------------
# onnxruntime's providers: the options each session gets, and what the provider ran
# ---------------------------------------------------------------------------------------------------------------------

CANN_V1 = {
    "device_id",
    "npu_mem_limit",
    "arena_extend_strategy",
    "enable_cann_graph",
    "dump_graphs",
    "dump_om_model",
    "precision_mode",
    "op_select_impl_mode",
    "optypelist_for_implmode",
    "enable_cann_subgraph",
}  # 1.24.4's
CANN_V2 = CANN_V1 - {"precision_mode"} | {"precision_mode_v2"}  # onnxruntime's main branch


class FakeSession:
    """A session as a provider wheel's: on the provider asked for (CPU after it), with the options it took; run by the
    real CPU session. CANN without a precision mode runs float32 as float16 (cann_graph.cc: CANN's default)."""

    def __init__(self, real, providers):
        self.real, self.taken = real, providers
        self._sess = real._sess
        first, options = providers[0] if isinstance(providers[0], tuple) else (providers[0], {})
        self.first, self.options = first, {k: str(v) for k, v in options.items()}
        self.half = first == "CANNExecutionProvider" and not ({"precision_mode", "precision_mode_v2"} & set(options))
        self.rows = []  # the batch size of every run the provider was given
        self.runs = []  # session.run and run_with_iobinding calls: what was bound, the graph id
        if self.half:
            run = real._sess.run
            self._sess = SimpleNamespace(
                run=lambda *a: [
                    np.asarray(x).astype(np.float16).astype(x.dtype) if np.asarray(x).dtype == np.float32 else x
                    for x in run(*a)
                ]
            )

        inner = self._sess.run

        def recorded(names, feed, options=None):
            self.rows.append(len(next(iter(feed.values()))))
            return inner(names, feed, options)

        self._sess = SimpleNamespace(run=recorded)

    def get_providers(self):
        return [self.first, "CPUExecutionProvider"]

    def get_provider_options(self):
        return {self.first: self.options, "CPUExecutionProvider": {}}

    def get_inputs(self):
        return self.real.get_inputs()

    def get_outputs(self):
        return self.real.get_outputs()

    def run(self, names, feed, options=None):
        self.runs.append(
            ("run", len(next(iter(feed.values()))), options and options.get_run_config_entry("gpu_graph_id"))
        )
        return self._sess.run(names, feed, options)

    def io_binding(self):
        return FakeBinding(self.real.io_binding())

    def run_with_iobinding(self, binding, options=None):
        """Records the graph id and the buffers bound (the CUDA provider captures a graph per id over these exact
        addresses), then runs the real CPU session on them."""
        graph = options.get_run_config_entry("gpu_graph_id") if options is not None else None
        self.runs.append(("bound", dict(binding.inputs), dict(binding.outputs), graph))
        self.real.run_with_iobinding(binding.real, options)


class FakeDeviceValue:
    """onnxruntime.OrtValue on a card as the CUDA provider's wheel makes it: records its device; its bytes live in a
    real CPU OrtValue, and every copy into it is recorded."""

    made: list = []

    def __init__(self, shape, dtype, device_type, device_id):
        self.real = onnxruntime.OrtValue.ortvalue_from_shape_and_type(shape, dtype)
        self.device, self.shape, self.writes = (device_type, device_id), tuple(shape), []
        FakeDeviceValue.made.append(self)

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape, element_type, device_type="cpu", device_id=0):
        return cls(shape, element_type, device_type, device_id)

    def update_inplace(self, array):
        self.writes.append(np.array(array))
        self.real.update_inplace(array)

    def numpy(self):
        return self.real.numpy()


class FakeBinding:
    def __init__(self, real):
        self.real, self.inputs, self.outputs = real, {}, {}

    def bind_ortvalue_input(self, name, value):
        self.inputs[name] = value
        self.real.bind_ortvalue_input(name, value.real)

    def bind_ortvalue_output(self, name, value):
        self.outputs[name] = value
        self.real.bind_ortvalue_output(name, value.real)


class FakeOrt:
    """onnxruntime as a provider wheel shows it: its providers available, every session recorded (providers, options,
    keywords); an option key its release does not know refuses the session as ProviderOptionsParser does."""

    SessionOptions, GraphOptimizationLevel = onnxruntime.SessionOptions, onnxruntime.GraphOptimizationLevel
    RunOptions, OrtValue = onnxruntime.RunOptions, FakeDeviceValue

    def __init__(self, **known):
        self.known = {
            "CUDAExecutionProvider": {"device_id", "use_tf32", "enable_cuda_graph"},
            "OpenVINOExecutionProvider": {"device_type"},
            "CANNExecutionProvider": CANN_V1,
            **{k + "ExecutionProvider": v for k, v in known.items()},
        }
        self.sessions = []

    def get_available_providers(self):
        return [*self.known, "CPUExecutionProvider"]

    def InferenceSession(self, source, options, providers, **kwargs):
        self.sessions.append((providers, kwargs))
        for name, given in (p for p in providers if isinstance(p, tuple)):
            unknown = sorted(set(given) - self.known.get(name, set()))
            if unknown:
                raise RuntimeError(f'[ONNXRuntimeError] : 1 : FAIL : Unknown provider option: "{unknown[0]}".')
        return FakeSession(onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"]), providers)


@pytest.fixture
def fake_ort(monkeypatch):
    def install(**known):
        ort = FakeOrt(**known)
        monkeypatch.setattr(sessions, "import_onnxruntime", lambda: ort)
        monkeypatch.setattr(devices, "import_onnxruntime", lambda: ort)
        return ort

    return install


def test_cann_keeps_float32_with_the_key_this_release_knows(fake_ort):
    """Issue 33, 2: only device_id was passed, so CANN's graph engine ran float32 as float16 (~1e-3 off, no error)."""
    cpu = inference.load(str(VECTOR), device="cpu", engine="onnxruntime")
    obs = observations(cpu, 16, 0)
    for known, key, value in (
        (CANN_V1, "precision_mode", "must_keep_origin_dtype"),
        (CANN_V2, "precision_mode_v2", "origin"),
    ):
        ort = fake_ort(CANN=known)
        policy = inference.load(str(VECTOR), device="npu:1", engine="onnxruntime")
        (name, options), *_ = ort.sessions[-1][0]
        assert name == "CANNExecutionProvider" and options == {key: value, "device_id": "1"}
        assert ort.sessions[-1][1].get("enable_fallback") == 0  # (no silent fallback banner on stdout)
        np.testing.assert_array_equal(policy.act(obs)["continuous_actions"], cpu.act(obs)["continuous_actions"])
        said = factory.engine_report(policy.engine)["precision"]
        assert said.startswith(f"float32 kept ({key} {value}) on CANNExecutionProvider")
        assert "batch sizes padded to fixed buckets" in said
    fake_ort(CANN=CANN_V1 - {"precision_mode"})
    with pytest.raises(UsageError, match="does not take precision_mode or precision_mode_v2.*force_fp16"):
        inference.load(str(VECTOR), device="npu:0", engine="onnxruntime")


def test_cann_compiles_a_graph_a_bucket_not_a_batch_size(fake_ort):
    """Issue 41: CANN's graph engine compiles a graph for each new input shape, and the stream's and serve's batch
    sizes vary. Both onnxruntime paths (ML-Agents' modules exported; ML-Agents' file itself) pad a call's rows to its
    bucket (every action allowed in a padded row) and slice the answer: the provider sees the buckets only."""
    from mlagents_inference.loaders.onnx_file import MLAgentsOnnx

    folder = EXAMPLES / "discrete-multi"
    cpu = inference.load(str(folder), device="cpu", engine="onnxruntime")
    fake_ort(CANN=CANN_V1)
    policy = inference.load(str(folder), device="npu:0", engine="onnxruntime")
    session = policy.engine.session
    on_file = MLAgentsOnnx(folder / "DiscreteMulti.onnx", policy.settings, providers=[("CANNExecutionProvider", {})])
    sizes = [3, 5, 6, 7, 1, 100, 90, 33]
    for call, rows in enumerate(sizes):
        obs, masks = observations(cpu, rows, call), random_masks(cpu.settings, call, rows)
        want = cpu.act(obs, masks)
        got = policy.act(obs, masks)
        np.testing.assert_array_equal(got["discrete_actions"], want["discrete_actions"])
        flat = cpu.prepare(obs, masks)[0]
        direct = on_file.run(flat)["deterministic_discrete_actions"]
        np.testing.assert_array_equal(direct, want["discrete_actions"])
        sampled = policy.act(obs, masks, deterministic=False, seed=call)["discrete_actions"]
        np.testing.assert_array_equal(sampled, cpu.act(obs, masks, deterministic=False, seed=call)["discrete_actions"])
    buckets = [4, 8, 8, 8, 1, 112, 96, 64]
    assert session.rows == [b for b in buckets for _ in range(2)]  # (a deterministic and a sampled call each)
    assert on_file.session.rows == buckets


def test_cuda_runs_float32_without_tf32_and_openvino_names_its_device(fake_ort, monkeypatch):
    """Issue 33, 3 and 9: use_tf32 defaults to true in the CUDA provider; OpenVINO without device_type runs on its
    build's default device."""
    ort = fake_ort()
    policy = inference.load(str(VECTOR), device="cuda:1", engine="onnxruntime")
    assert ort.sessions[-1][0][0] == (
        "CUDAExecutionProvider",
        {"use_tf32": "0", "device_id": "1", "enable_cuda_graph": "1"},
    )
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    said = factory.engine_report(policy.engine)["precision"]
    assert "TF32 off (use_tf32=0)" in said and "NVIDIA_TF32_OVERRIDE=0" in said
    policy = inference.load(str(VECTOR), providers=["openvino"], engine="onnxruntime")
    assert ort.sessions[-1][0][0] == ("OpenVINOExecutionProvider", {"device_type": "CPU"})
    assert "device_type CPU" in factory.engine_report(policy.engine)["precision"]
    fake_ort(CUDA={"device_id"})  # (a release before use_tf32)
    with pytest.raises(UsageError, match="onnxruntime-gpu does not take use_tf32.*TF32 on"):
        inference.load(str(VECTOR), device="cuda", engine="onnxruntime")


def test_cuda_runs_a_graph_a_bucket_over_bound_device_buffers(fake_ort):
    """Issue 41, 5: onnxruntime's CUDA provider with enable_cuda_graph, each batch-size bucket's inputs and outputs
    bound to device buffers made once, its own graph id; a call's rows padded into them (every action allowed in a
    padded row) and the answer sliced: the padding never reaches an answer."""
    folder = EXAMPLES / "discrete-multi"
    cpu = inference.load(str(folder), device="cpu", engine="onnxruntime")
    ort = fake_ort()
    FakeDeviceValue.made.clear()
    policy = inference.load(str(folder), device="cuda:1", engine="onnxruntime")
    assert ort.sessions[-1][0][0] == (
        "CUDAExecutionProvider",
        {"use_tf32": "0", "device_id": "1", "enable_cuda_graph": "1"},
    )
    session, sizes = policy.engine.session, [3, 5, 3, 1, 100, 90, 4]
    for call, rows in enumerate(sizes):
        obs, masks = observations(cpu, rows, call), random_masks(cpu.settings, call, rows)
        got = policy.act(obs, masks)
        assert got["discrete_actions"].shape[0] == rows
        np.testing.assert_array_equal(got["discrete_actions"], cpu.act(obs, masks)["discrete_actions"])
        sampled = policy.act(obs, masks, deterministic=False, seed=call)["discrete_actions"]
        np.testing.assert_array_equal(sampled, cpu.act(obs, masks, deterministic=False, seed=call)["discrete_actions"])
    assert all(kind == "bound" for kind, *_ in session.runs)  # (no run with onnxruntime's own copies)
    sizes_run = [b for b in [4, 8, 4, 1, 112, 96, 4] for _ in range(2)]
    seen: dict = {}
    for (_, inputs, outputs, graph), bucket in zip(session.runs, sizes_run):
        assert graph == str(buckets.bucket_sizes().index(bucket) + 1)  # (one graph a bucket; 0 is onnxruntime's)
        values = list(inputs.values()) + list(outputs.values())
        assert all(v.device == ("cuda", 1) and v.shape[0] == bucket for v in values)
        assert seen.setdefault(bucket, [id(v) for v in values]) == [id(v) for v in values]  # (the same addresses)
    assert len(FakeDeviceValue.made) == len(seen) * len(values)  # (made once a bucket)
    masks_in = next(v for k, v in session.runs[0][1].items() if k == "action_masks")
    obs_in = next(v for k, v in session.runs[0][1].items() if k != "action_masks")
    assert (masks_in.writes[0][3:] == 1).all() and (obs_in.writes[0][3:] == 0).all()  # (call 0: 3 rows in bucket 4)
    report = factory.engine_report(policy.engine)
    assert report["graphs"].startswith("on: onnxruntime captures each bucket")
    assert report["graph_calls"] == {"captures": 5, "replays": 9, "eager": 0}


def test_cuda_without_cuda_graphs_runs_without_in_one_line_and_graphs_off_asks_for_none(fake_ort, capsys):
    folder = EXAMPLES / "discrete-multi"
    cpu = inference.load(str(folder), device="cpu", engine="onnxruntime")
    obs, masks = observations(cpu, 6, 0), random_masks(cpu.settings, 0, 6)
    ort = fake_ort(CUDA={"device_id", "use_tf32"})  # (a release that does not know enable_cuda_graph)
    capsys.readouterr()
    policy = inference.load(str(folder), device="cuda", engine="onnxruntime")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert line.startswith("[note] CUDA graphs off: the CUDA provider refused enable_cuda_graph") and "\n" not in line
    assert ort.sessions[-1][0][0] == ("CUDAExecutionProvider", {"use_tf32": "0", "device_id": "0"})
    assert policy.engine.bound is None and factory.engine_report(policy.engine)["graphs"].startswith("off: the CUDA")
    np.testing.assert_array_equal(policy.act(obs, masks)["discrete_actions"], cpu.act(obs, masks)["discrete_actions"])
    ort = fake_ort()
    policy = inference.load(str(folder), device="cuda", engine="onnxruntime", graphs=False)
    assert ort.sessions[-1][0][0] == ("CUDAExecutionProvider", {"use_tf32": "0", "device_id": "0"})
    assert policy.engine.bound is None and factory.engine_report(policy.engine)["graphs"] == "off (--graphs off)"


def test_the_device_check_compares_a_provider_with_the_cpu_and_names_float16_sized_errors(
    fake_ort, capsys, monkeypatch
):
    """Issue 33, 10: step 4b printed CANN's actions beside the CPU's and never compared them."""
    import device_compare

    assert [device_compare.verdict(e, 1e-5) for e in (0.0, 1e-5, 3e-5, 1e-4, 2e-3)] == [
        "holds",
        "holds",
        "misses",
        "float16-sized",
        "float16-sized",
    ]
    fake_ort(CANN=CANN_V1)
    assert device_compare.main(["providers", "--device", "npu:0", "--model-dir", str(VECTOR)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "holds" and out["max_err"] == 0.0 and "float32 kept" in out["precision"]
    # a CANN session without a precision mode (float16): the comparison fails and says float16-sized
    monkeypatch.setattr(sessions, "FLOAT32_OPTIONS", {})
    assert device_compare.main(["providers", "--device", "npu:0", "--model-dir", str(VECTOR)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "float16-sized" and out["max_err"] > 1e-4
    assert device_compare.main(["graphs", "--device", "cpu", "--model-dir", str(VECTOR), "--rows", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "holds"


def test_device_check_has_the_new_steps():
    script = (ROOT / "tools" / "device_check.sh").read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / "tools" / "device_check.sh")]).returncode == 0
    for step in (
        "device_compare.py providers",
        'device_compare.py graphs --device "$DEV2" --second',
        "TASK_QUEUE_ENABLE=2",
        "TORCH_DEVICE_BACKEND_AUTOLOAD=0",
        "-u ASCEND_OPP_PATH",
        '--mode onnx-compare --model-dir "$m" --tol "$PARITY_TOL"',
        '--mode precision --dtype float32 --model-dir "$m" --tol "$PARITY_TOL"',
        'PARITY_TOL="${PARITY_TOL:-1e-5}"',
        'tools/device_probe.py --device "$DEVICE"',
        "--model-dir examples/attention",
        'COMMIT_FILE="${COMMIT_FILE:-COMMIT}"',
    ):
        assert step in script, step


# ---------------------------------------------------------------------------------------------------------------------
# The host: ASCEND_RT_VISIBLE_DEVICES, one onnxruntime build, torch_npu's autoload
# ---------------------------------------------------------------------------------------------------------------------


def test_ascend_rt_visible_devices_is_honoured(monkeypatch, fake_ort):
    import glob

    monkeypatch.setattr(
        glob, "glob", lambda pattern: ["/dev/davinci0", "/dev/davinci1"] if "davinci" in pattern else []
    )
    monkeypatch.setattr(sys, "platform", "linux")
    fake_ort(CANN=CANN_V1)
    for hidden in ("", "-1"):  # (the device files show two NPUs; this process may use none)
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", hidden)
        assert not devices.host_has_device("npu") and devices.ort_device("auto") == devices.OrtDevice("cpu")
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    assert devices.visible_devices("npu") == 2 and devices.ort_device("auto") == devices.OrtDevice("npu", 0)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1")
    assert devices.visible_devices("npu") == 1


class FakeDistribution:
    def __init__(self, name, version, where, top="onnxruntime"):
        self.metadata, self.version, self.where, self.top, self.files = {"Name": name}, version, where, top, None

    def read_text(self, name):
        return self.top if name == "top_level.txt" else None

    def locate_file(self, path):
        return Path(self.where) / path


def test_exactly_one_onnxruntime_build_is_installed_here_and_two_in_one_folder_are_refused(monkeypatch):
    """Issue 33, 7: onnxruntime beside onnxruntime-cann or -gpu in one folder overwrite each other's files
    (microsoft/onnxruntime#26996). Read from the installed distributions' metadata."""
    assert sessions.onnxruntime_builds() == [("onnxruntime", onnxruntime.__version__)]
    both = [
        FakeDistribution("onnxruntime", "1.32.0", "/site"),
        FakeDistribution("onnxruntime-cann", "1.24.4", "/site"),
        FakeDistribution("numpy", "2.0", "/site", top="numpy"),
    ]
    assert sessions.onnxruntime_builds(both) == [("onnxruntime", "1.32.0"), ("onnxruntime-cann", "1.24.4")]
    apart = [FakeDistribution("onnxruntime", "1.32.0", "/venv"), FakeDistribution("onnxruntime-gpu", "1.24", "/user")]
    assert len(sessions.onnxruntime_builds(apart)) == 1  # (two folders: the first on sys.path is imported, whole)
    monkeypatch.setattr(sessions, "onnxruntime_distributions", lambda: both)
    monkeypatch.setattr(sessions, "_CHECKED_BUILDS", [])
    with pytest.raises(UsageError, match="installed more than once.*pip uninstall -y onnxruntime onnxruntime-cann"):
        sessions.import_onnxruntime()


def fake_torch_npu(tmp_path: Path) -> dict:
    """A distribution that registers itself as torch's backend autoload (group torch.backends) as torch_npu does, and
    fails as torch_npu does without CANN's environment; it writes down ASCEND_GLOBAL_LOG_LEVEL as it is loaded."""
    info = tmp_path / "fake_npu-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-npu\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = fake_npu_autoload:_autoload\n")
    (tmp_path / "fake_npu_autoload.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['FAKE_NPU_RECORD']).write_text(os.environ.get('ASCEND_GLOBAL_LOG_LEVEL', 'unset'))\n"
        "raise ImportError('libascendcl.so: cannot open shared object file: No such file or directory')\n"
    )
    return child_env(PYTHONPATH=str(tmp_path), FAKE_NPU_RECORD=str(tmp_path / "record"))


def test_torch_npus_autoload_gets_its_settings_first_and_its_failure_is_one_line(tmp_path):
    """Issue 33, 6: `import torch` imports torch_npu (torch.backends entry point); without CANN's environment every
    torch mode failed with torch's RuntimeError, --device cpu included. The process start is what is tested."""
    env = fake_torch_npu(tmp_path)
    args = [
        sys.executable,
        str(ROOT / "inference.py"),
        "--mode",
        "action",
        "--model-dir",
        str(VECTOR),
        "--device",
        "cpu",
        "--engine",
        "torch",
    ]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert "libascendcl.so" in line and "set_env.sh" in line and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in line
    assert (tmp_path / "record").read_text() == "3"  # (CANN's log level set before torch loaded its extension)
    r = subprocess.run(
        args, env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_torch_that_cannot_start_is_a_usage_error_in_process(monkeypatch):
    import importlib

    def fail(name, package=None):
        try:
            raise ImportError("libhccl.so: cannot open shared object file")
        except ImportError as cause:
            raise RuntimeError(
                "Failed to load the backend extension: torch_npu. You can disable extension auto-loading "
                "with TORCH_DEVICE_BACKEND_AUTOLOAD=0."
            ) from cause

    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(importlib, "import_module", fail)
    with pytest.raises(UsageError, match="libhccl.so.*set_env.sh.*TORCH_DEVICE_BACKEND_AUTOLOAD=0"):
        extras.torch_available()


def test_a_benchmark_on_a_card_waits_for_the_card_after_each_block(monkeypatch):
    """benchmark on --device cuda once ended in AttributeError before its first figure (a run context attribute gone
    in the regrouping; seen on an H200 by tools/device_check.sh): the torch engine on a card is waited for once per
    block of timed calls, on that card. The card is a stand-in: the policy's tensors stay on the CPU."""
    from mlagents_inference.fronts.benchmark import mode_benchmark
    from mlagents_inference.fronts.cli import parse_args
    from mlagents_inference.services.context import Context

    ctx = Context(parse_args(["--mode", "benchmark", "--model-dir", str(VECTOR), "--engine", "torch", "--runs", "30"]))
    ctx.policy  # (made on the CPU before the device is swapped for the stand-in card)
    card = SimpleNamespace(type="cuda", index=0)
    ctx.__dict__["device"] = card
    waited = []
    monkeypatch.setattr(torch_devices, "synchronize", waited.append)
    result, passed = mode_benchmark(ctx)
    assert passed and result["runs"] == 30 and result["engine"] == "torch"
    assert waited and all(device is card for device in waited)
