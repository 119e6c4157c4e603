"""The torch engine's opt-in compiled path (--compile on, load(compile=True)): torch.compile (torchair on an NPU) held
to the eager answer on a probe batch before it is used, and every failure running eager in one line that says why."""

import shutil
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import EXAMPLES, call, run

import inference
from mlagents_inference.core.errors import UsageError
from mlagents_inference.core.observations import random_inputs
from mlagents_inference.engines import torch_engine

HYBRID = EXAMPLES / "hybrid"  # continuous and discrete actions, masks: every kind of engine output
HAS_CXX = any(shutil.which(name) for name in ("c++", "g++", "clang++"))


def compiled_policy(folder=HYBRID):
    return inference.load(str(folder), device="cpu", engine="torch", compile=True)


def assert_same_actions(policy, eager, rows: int, seed: int, atol: float):
    obs = random_inputs(policy.settings, seed, rows)
    got, want = policy.act(obs), eager.act(obs)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol)


class Shifted(torch.nn.Module):
    """A stand-in for a compiled module that answers `shift` away from the module it wraps."""

    def __init__(self, module, shift: float):
        super().__init__()
        self.module, self.shift = module, shift

    def forward(self, *tensors):
        return tuple(x + self.shift if x.is_floating_point() else x for x in self.module(*tensors))


def note_lines(err: str) -> list:
    return [line for line in err.splitlines() if "compile off" in line]


def test_a_compile_that_fails_runs_eager_and_says_why_in_one_line(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise RuntimeError("the backend is not\nthere")

    monkeypatch.setattr(torch, "compile", refuse)
    policy, eager = compiled_policy(), inference.load(str(HYBRID), device="cpu", engine="torch")
    lines = note_lines(capsys.readouterr().err)
    assert lines == [
        "[note] compile off: torch.compile failed on cpu (RuntimeError: the backend is not there); running eager"
    ]
    assert policy.engine.compiled is None and policy.engine.compile_state.startswith("off: torch.compile failed")
    assert_same_actions(policy, eager, 7, 1, atol=0)


def test_a_compiled_module_that_differs_from_eager_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: Shifted(module, 1e-3))
    policy = compiled_policy()
    (line,) = note_lines(capsys.readouterr().err)
    assert "answered 0.001 away from eager" in line and line.endswith("; running eager")
    assert policy.engine.compiled is None


def test_a_difference_within_the_float32_bound_is_accepted(monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: Shifted(module, 1e-7))
    policy = compiled_policy()
    assert note_lines(capsys.readouterr().err) == []
    assert isinstance(policy.engine.compiled, Shifted) and policy.engine.compile_state.startswith("on: torch.compile")


def test_a_failure_after_the_check_runs_eager_from_then_on(monkeypatch, capsys):
    class BreaksLater(Shifted):
        calls = 0

        def forward(self, *tensors):
            BreaksLater.calls += 1
            if BreaksLater.calls > len(torch_engine.PROBE_ROWS):
                raise RuntimeError("recompile failed")
            return super().forward(*tensors)

    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: BreaksLater(module, 0.0))
    policy, eager = compiled_policy(), inference.load(str(HYBRID), device="cpu", engine="torch")
    capsys.readouterr()
    assert_same_actions(policy, eager, 3, 2, atol=0)
    (line,) = note_lines(capsys.readouterr().err)
    assert "RuntimeError: recompile failed" in line
    assert policy.engine.compiled is None
    assert_same_actions(policy, eager, 3, 2, atol=0)
    assert note_lines(capsys.readouterr().err) == []


def test_no_cpp_compiler_is_known_before_compiling(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled without a C++ compiler"))
    policy = compiled_policy()
    (line,) = note_lines(capsys.readouterr().err)
    assert "no C++ compiler" in line and policy.engine.compiled is None


def test_an_npu_compiles_with_torchairs_backend_and_without_torchair_says_so(monkeypatch):
    npu = SimpleNamespace(type="npu", index=0)  # (a torch without torch_npu cannot name the device)
    configs = []
    torchair = SimpleNamespace(
        CompilerConfig=lambda: configs.append("config") or "config",
        get_npu_backend=lambda compiler_config: ("npu backend", compiler_config),
    )
    monkeypatch.setitem(sys.modules, "torchair", torchair)
    assert torch_engine.compile_backend(npu) == (("npu backend", "config"), None)
    monkeypatch.setitem(sys.modules, "torchair", None)  # (import torchair raises ImportError)
    backend, refused = torch_engine.compile_backend(npu)
    assert backend is None and refused.startswith("torchair (torch_npu's graph mode) is not importable")


def test_compile_must_be_true_or_false_and_is_for_the_torch_engine(capsys):
    with pytest.raises(UsageError, match="compile="):
        inference.load(str(HYBRID), device="cpu", engine="torch", compile="yes")
    for engine in ("onnxruntime", "auto"):  # (auto on the CPU in float32: onnxruntime)
        with pytest.raises(UsageError, match="applies to the torch engine"):
            inference.load(str(HYBRID), device="cpu", engine=engine, compile=True)
    code, out, err = run(capsys, "--model-dir", HYBRID, "--device", "cpu", "--compile", "on")
    assert code == 2 and err.strip().splitlines() == [
        "error: --compile on applies to the torch engine (--engine torch), not onnxruntime"
    ]


def test_info_says_whether_the_compiled_module_runs(monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: Shifted(module, 1.0))
    code, result, err = call(capsys, "--model-dir", HYBRID, "--device", "cpu", "--engine", "torch", "--compile", "on")
    assert code == 0 and result["compiled"].startswith("off: the compiled module answered 1 away from eager")
    assert len(note_lines(err)) == 1
    code, result, err = call(capsys, "--model-dir", HYBRID, "--device", "cpu", "--engine", "torch")
    assert code == 0 and result["compiled"] is None and note_lines(err) == []


@pytest.mark.skipif(not HAS_CXX, reason="torch.compile's CPU code needs a C++ compiler (c++, g++ or clang++)")
def test_the_compiled_module_answers_as_eager_within_1e_5_on_the_cpu(capsys):
    policy, eager = compiled_policy(), inference.load(str(HYBRID), device="cpu", engine="torch")
    assert note_lines(capsys.readouterr().err) == []
    assert policy.engine.compile_state.startswith("on: torch.compile")
    for rows, seed in ((1, 3), (6, 4), (33, 5)):  # (batch 1 and the dynamic batch compiled at load)
        assert_same_actions(policy, eager, rows, seed, atol=1e-5)
    assert policy.engine.compiled is not None  # (no failure on the way)
