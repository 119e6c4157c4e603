"""--threads N (load(threads=N)): the CPU engines' threads, torch's during the torch engine's calls (the caller's own
count restored after) and onnxruntime's intra-op threads."""

import pytest
import torch
from conftest import EXAMPLES, run

import inference
from mlagents_inference.core.errors import UsageError
from mlagents_inference.core.observations import random_inputs

VECTOR = EXAMPLES / "vector"


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_torch_engine_runs_on_the_threads_asked_for_and_restores_the_callers(two_threads):
    seen = []
    for threads in (1, None):
        policy = inference.load(str(VECTOR), device="cpu", engine="torch", threads=threads)
        forward = policy.engine.heads.forward

        def recorded(*tensors, **kwargs):
            seen.append(torch.get_num_threads())
            return forward(*tensors, **kwargs)

        policy.engine.heads.forward = recorded
        policy.act(random_inputs(policy.settings, 0, 9))
        policy.engine.run_device([torch.from_numpy(x) for x in random_inputs(policy.settings, 1, 3)])
        assert torch.get_num_threads() == 2
    assert seen == [1, 1, 2, 2]


def test_the_onnxruntime_engines_get_their_intra_op_threads():
    policy = inference.load(str(VECTOR), device="cpu", engine="onnxruntime", threads=1)
    assert policy.engine.session.get_session_options().intra_op_num_threads == 1
    default = inference.load(str(VECTOR), device="cpu", engine="onnxruntime")
    assert default.engine.session.get_session_options().intra_op_num_threads == 0  # (onnxruntime's own choice)


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_threads_must_be_a_whole_number_of_at_least_one(threads):
    with pytest.raises(UsageError, match="^threads .*at least 1"):
        inference.load(str(VECTOR), device="cpu", engine="torch", threads=threads)


def test_the_command_line_takes_threads(capsys):
    code, out, err = run(capsys, "--model-dir", VECTOR, "--device", "cpu", "--engine", "torch", "--threads", "1")
    assert code == 0 and err == ""
    code, out, err = run(capsys, "--model-dir", VECTOR, "--threads", "0")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--threads" in err
