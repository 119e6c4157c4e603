"""One pass of the network per call, and no small work repeated (issue 41, the CPU/model half).

The torch engine runs ML-Agents' network body once per act(), whatever the policy kind and however many outputs it
hands back; the graph the onnxruntime engine exports does the network's work (its Gemm, MatMul, Conv and LSTM nodes)
exactly as often as ML-Agents' own ONNX beside the checkpoint; the normaliser's divisor is computed when the
statistics are loaded or cast, not on every call; PPO's fixed log_sigma (mu * 0 + log_sigma), which no engine output
reads, is not computed; Swish is torch's one silu kernel when running (an export keeps ML-Agents' Sigmoid and Mul:
tests/test_export_graph.py holds that node for node)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from conftest import BUNDLED, EXAMPLES
from torch.utils._python_dispatch import TorchDispatchMode

import inference
from mlagents_inference.engines import onnx_engine
from mlagents_inference.engines.torch_devices import cast_actor
from mlagents_inference.model.encoders import Normalizer
from mlagents_inference.model.networks import NetworkBody

NETWORK_OPS = {"Gemm", "MatMul", "Conv", "LSTM"}  # the network's work in an ONNX graph


def inputs(policy, rows: int, seed: int = 0):
    """Observations (vectors, images in [0, 1), entity rows), all-allowed masks and a memory, for `rows` agents."""
    s, rng = policy.settings, np.random.RandomState(seed)
    obs = [
        (rng.rand(rows, *i.shape) if i.kind == "visual" else rng.randn(rows, *i.shape)).astype(np.float32)
        for i in s.inputs
    ]
    masks = np.ones((rows, sum(s.discrete_branches)), np.float32) if s.discrete_branches else None
    memory = rng.randn(rows, s.memory_size).astype(np.float32) if s.memory_size else None
    return obs, masks, memory


def network_passes(fn) -> int:
    """How many times ML-Agents' network body ran inside fn() (a global forward hook: whatever holds the modules)."""
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: calls.append(1) if isinstance(module, NetworkBody) else None
    )
    try:
        fn()
    finally:
        handle.remove()
    return len(calls)


class Kernels(TorchDispatchMode):
    """The aten operators run inside the block, counted by name (aten.addmm, aten.sqrt, ...)."""

    def __init__(self):
        super().__init__()
        self.count = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "folder",
    [BUNDLED, EXAMPLES / "lstm", EXAMPLES / "hybrid", EXAMPLES / "attention"],
    ids=["sample", "lstm", "hybrid", "attention"],
)
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "sampled"])
def test_torch_engine_runs_the_network_once_per_act(folder, deterministic):
    policy = inference.load(folder, engine="torch")
    obs, masks, memory = inputs(policy, 5)
    given = [x.copy() for x in obs]
    kwargs = {"memory": memory} if memory is not None else {}
    assert network_passes(lambda: policy.act(obs, masks, deterministic=deterministic, seed=1, **kwargs)) == 1
    assert all(np.array_equal(a, b) for a, b in zip(obs, given))  # (no kernel works in place on the caller's arrays)


def engine_graph(folder) -> onnx.ModelProto:
    """The graph the onnxruntime engine exports for the checkpoint in `folder` and hands to its session."""
    seen = []
    real = onnx_engine.onnx_session

    def keep(model_bytes, *args, **kwargs):
        seen.append(model_bytes)
        return real(model_bytes, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnx_engine, "onnx_session", keep)
        inference.load(folder, engine="onnxruntime")
    assert len(seen) == 1
    return onnx.load_from_string(seen[0])


def network_ops(model: onnx.ModelProto) -> dict:
    return dict(sorted(Counter(n.op_type for n in model.graph.node if n.op_type in NETWORK_OPS).items()))


def test_onnxruntime_engine_graph_for_an_lstm_holds_one_lstm_node():
    assert network_ops(engine_graph(EXAMPLES / "lstm"))["LSTM"] == 1


def test_onnxruntime_engine_graph_does_the_network_work_as_often_as_mlagents_onnx_for_every_kind():
    """Every example folder with a checkpoint and ML-Agents' ONNX of it: the same count of each network operator
    (our graph's outputs differ from ML-Agents': no sampling nodes, the probabilities and mu added)."""
    ours, theirs = {}, {}
    for folder in sorted(p for p in EXAMPLES.iterdir() if p.is_dir() and list(p.glob("*/*.pt"))):
        mlagents = sorted(folder.glob("*.onnx"))
        if len(mlagents) != 1:
            continue
        ours[folder.name] = network_ops(engine_graph(folder))
        theirs[folder.name] = network_ops(onnx.load(str(mlagents[0])))
    assert len(ours) >= 15 and {"lstm", "attention", "hybrid", "sac-continuous", "visual-resnet"} <= set(ours)
    assert ours == theirs


def test_torch_engine_step_on_the_sample_runs_no_repeated_small_work():
    """Huggy (normalised 59 -> 512 x 3 -> 21, PPO): one deterministic step is 4 Linear layers, 3 silu kernels, no
    square root (the divisor is ready), no sigmoid or mul (Swish is silu, PPO's mu * 0 + log_sigma is not run)."""
    policy = inference.load(BUNDLED, engine="torch")
    obs, _, _ = inputs(policy, 8)
    flat = policy.prepare(obs)[0]
    for deterministic in (True, False):
        with Kernels() as kernels:
            out = policy.engine.run(flat, policy.fetch[deterministic])
        layers = kernels.count["linear"] or kernels.count["addmm"]  # (linear, or addmm where it is decomposed)
        assert layers == 4 and kernels.count["silu"] + kernels.count["silu_"] == 3, kernels.count
        assert not {"sqrt", "sigmoid", "mul", "exp"} & set(kernels.count), kernels.count
        assert all(np.isfinite(v).all() for v in out.values())


def test_normaliser_divisor_is_computed_when_loaded_or_cast_and_is_no_checkpoint_key():
    actor = inference.load(BUNDLED, engine="torch").checkpoint.actor
    assert not any("divisor" in key for key in actor.state_dict())  # (a strict load of the checkpoint still fits)
    norm = actor.network_body.processors[0].normalizer
    assert torch.equal(norm.divisor, torch.sqrt(norm.running_variance / norm.normalization_steps))
    assert norm.divisor.dtype == torch.float32
    import copy

    wide = cast_actor(copy.deepcopy(actor), torch.float64).network_body.processors[0].normalizer
    assert wide.divisor.dtype == torch.float64  # the precision reference's own float64 square root, not float32's
    assert torch.equal(wide.divisor, torch.sqrt(norm.running_variance.double() / norm.normalization_steps))
    half = cast_actor(copy.deepcopy(actor), torch.float16).network_body.processors[0].normalizer
    assert half.divisor.dtype == torch.float32 and torch.equal(half.divisor, norm.divisor)
    fresh = Normalizer(norm.running_mean.numel())
    fresh.load_state_dict(norm.state_dict(), strict=True)
    assert torch.equal(fresh.divisor, norm.divisor)
