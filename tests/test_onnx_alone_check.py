"""A policy rebuilt from an ONNX alone computes what the file computes (issue 26): the file itself is run by
onnxruntime on probe inputs when it is loaded, and a file whose graph computes something else than the rebuilt
modules is refused in one line; same-shaped heads are paired by what they feed, not by node order. Also: graphs
that a walk could loop in, files onnxruntime refuses, --onnx given a FIFO or a folder, and two forms of Unity's
trained 1.x files (an image input read directly, torch 1.7's Exp of the log_sigma parameter)."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from conftest import EXAMPLES, ROOT, acts_as_the_file, call, child_env, refused, run, sensor_inputs
from mlagents_reference import OnnxReference, with_legacy_inputs
from onnx import TensorProto, helper

import inference

pytestmark = pytest.mark.usefixtures("one_torch_thread")
REFUSED = "does not compute what the file computes"


def example(kind: str):
    return next((EXAMPLES / kind).glob("*.onnx"))


def edited(kind_or_path, tmp_path, edit, name: str = "edited.onnx"):
    """A copy of an example's ONNX with `edit(graph)` applied (still a valid ONNX file)."""
    model = onnx.load(str(example(kind_or_path) if isinstance(kind_or_path, str) else kind_or_path))
    edit(model.graph)
    onnx.save(model, str(tmp_path / name))
    return tmp_path / name


def node(graph, op: str, *, reads: str = "", writes: str = ""):
    return next(
        n
        for n in graph.node
        if n.op_type == op and any(reads in i for i in n.input) and any(writes in o for o in n.output)
    )


def put_first(graph, moved: list, before) -> None:
    """Move the nodes `moved` (in their order) to just before `before`: the same graph, other node order."""
    rest = [n for n in graph.node if n not in moved]
    at = rest.index(before)
    nodes = rest[:at] + moved + rest[at:]
    del graph.node[:]
    graph.node.extend(nodes)


def chain(graph, first, last) -> list:
    nodes = list(graph.node)
    return nodes[nodes.index(first) : nodes.index(last) + 1]


def without_deterministic_outputs(graph) -> None:
    kept = [o for o in graph.output if not o.name.startswith("deterministic_")]
    del graph.output[:]
    graph.output.extend(kept)


# --- 1. same-shaped heads in another node order ----------------------------------------------------


def sac_log_sigma_first(g):
    put_first(g, [node(g, "Gemm", reads="log_sigma.weight")], node(g, "Gemm", reads="mu.weight"))


def poca_branch_1_first(g):
    put_first(g, [node(g, "Gemm", reads="branches.1.weight")], node(g, "Gemm", reads="branches.0.weight"))


def poca_branch_1_first_no_deterministic_outputs(g):  # early 2.x: the branches' whole chains moved
    without_deterministic_outputs(g)
    put_first(
        g,
        chain(g, node(g, "Gemm", reads="branches.1.weight"), node(g, "Softmax", writes="Softmax_1")),
        node(g, "Gemm", reads="branches.0.weight"),
    )


@pytest.mark.parametrize(
    "kind, edit",
    [
        ("sac-continuous", sac_log_sigma_first),
        ("poca-discrete", poca_branch_1_first),
        ("poca-discrete", poca_branch_1_first_no_deterministic_outputs),
    ],
    ids=["sac-log_sigma-first", "poca-branch-1-first", "poca-no-deterministic"],
)
def test_same_shaped_heads_in_another_node_order_act_as_the_file(tmp_path, kind, edit):
    """The reference finds each head by its weight's name, whatever the node order."""
    path = edited(kind, tmp_path, edit)
    policy = inference.load(path, engine="torch")
    ref, feed = OnnxReference(path), sensor_inputs(path, 64, seed=11)
    acts_as_the_file(policy, ref, feed, list(feed.values()), 11, sac="log_sigma" in ref.extra)


# --- 2. the graph after the action heads is held to the rebuilt modules ----------------------------


def clip_max_1(g):
    clip = node(g, "Clip", writes="Clip_1")  # the deterministic action's clip(mu, -3, 3)
    clip.attribute.remove(next(a for a in clip.attribute if a.name == "max"))
    clip.attribute.append(helper.make_attribute("max", 1.0))


def negated(output: str):
    def edit(g):
        next(n for n in g.node if output in n.output).output[0] = "before"
        g.node.extend(
            [
                helper.make_node(
                    "Constant", [], ["minus_one"], value=helper.make_tensor("m", TensorProto.FLOAT, [], [-1.0])
                ),
                helper.make_node("Mul", ["before", "minus_one"], [output]),
            ]
        )

    return edit


def argmin(g):
    node(g, "ArgMax").op_type = "ArgMin"


def branches_swapped(g):
    concat = node(g, "Concat", writes="deterministic_discrete_actions")
    a, b, *rest = concat.input
    del concat.input[:]
    concat.input.extend([b, a, *rest])


def branch_0_masked_by_branch_1(g):
    mul = node(g, "Mul", reads="branches.0/Gemm")
    mul.input[1] = mul.input[1].replace("Slice_output_0", "Slice_1_output_0")


@pytest.mark.parametrize(
    "kind, edit",
    [
        ("vector", clip_max_1),
        ("vector", negated("deterministic_continuous_actions")),
        ("poca-discrete", argmin),
        ("poca-discrete", branches_swapped),
        ("poca-discrete", branch_0_masked_by_branch_1),
        ("lstm", negated("recurrent_out")),
        ("hybrid", negated("deterministic_continuous_actions")),
    ],
    ids=["clip-max-1", "mul-minus-1", "argmin", "branches-swapped", "mask-of-branch-1", "memory-negated", "hybrid"],
)
def test_a_graph_that_computes_something_else_is_refused_in_one_line(capsys, tmp_path, kind, edit):
    path = edited(kind, tmp_path, edit)
    onnx.checker.check_model(onnx.load(str(path)))
    with pytest.raises(inference.UsageError, match=REFUSED):
        inference.load(path, engine="torch")
    for mode in ("action", "info"):
        refused(run(capsys, "--mode", mode, "--onnx", path), REFUSED, "differ")


# --- 10. a graph a walk could loop in; 15. files onnxruntime refuses ----------------------------------


def cycle(g):  # the body's first layer fed from its last
    node(g, "Gemm", reads="seq_layers.0.weight").input[0] = node(g, "Mul", writes="seq_layers.3/Mul").output[0]


def written_twice(g):  # the first layer's output written again, from the last layer's
    g.node.append(
        helper.make_node(
            "Sigmoid",
            [node(g, "Mul", writes="seq_layers.3/Mul").output[0]],
            [node(g, "Gemm", reads="seq_layers.0.weight").output[0]],
        )
    )


@pytest.mark.parametrize("edit, words", [(cycle, "which no node before it writes"), (written_twice, "a second time")])
def test_a_graph_with_a_cycle_is_refused_in_one_line_never_a_hang(tmp_path, edit, words):
    """In a process of its own, killed if it loops (it looped for ever before): info, then action."""
    path = edited("vector", tmp_path, edit)
    program = f"""
import contextlib, io, json, sys
sys.path.insert(0, {str(ROOT)!r})
import inference
answers = []
for mode in ("info", "action"):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = inference.main(["--mode", mode, "--onnx", {str(path)!r}])
    answers.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(answers))
"""
    try:
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=child_env()
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("a graph with a cycle made the walk loop")
    assert done.returncode == 0, done.stderr[-2000:]
    for answer in json.loads(done.stdout):
        refused(answer, words)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m.opset_import[0].__setattr__("version", 99), "Opset 99"),
        (
            lambda m: m.graph.output.append(helper.make_tensor_value_info("ghost", TensorProto.FLOAT, None)),
            "Graph output (ghost) does not exist",
        ),
    ],
    ids=["opset-99", "output-no-node-writes"],
)
def test_a_file_onnxruntime_refuses_is_no_policy(capsys, tmp_path, edit, words):
    model = onnx.load(str(example("vector")))
    edit(model)
    onnx.save(model, str(tmp_path / "bad.onnx"))
    with pytest.raises(inference.UsageError, match="onnxruntime cannot load it"):
        inference.load(tmp_path / "bad.onnx", engine="torch")
    line = refused(run(capsys, "--mode", "action", "--onnx", tmp_path / "bad.onnx", "--engine", "torch"), words)
    assert "onnxruntime_src" not in line


def test_an_image_smaller_than_its_encoder_accepts_is_refused_in_one_line(capsys, tmp_path):
    """(a fresh pass over this change) the template export failed in the encoder's convolutions: a traceback."""

    def small(g):
        for dim, size in zip(g.input[0].type.tensor_type.shape.dim[2:], (10, 12)):
            dim.dim_value = size

    path = edited("visual-simple", tmp_path, small)
    assert inference.main(["--mode", "info", "--onnx", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"error: {path}: obs_0 is 10x12, smaller than the simple encoder accepts (20)"]


# --- 17. --onnx names what the path is --------------------------------------------------------------


def test_onnx_given_a_fifo_or_a_folder_says_what_it_is(capsys, tmp_path):
    os.mkfifo(tmp_path / "pipe.onnx")
    (tmp_path / "folder.onnx").mkdir()
    for name, words in (
        ("pipe.onnx", "not a regular file"),
        ("folder.onnx", "is a folder"),
        ("absent.onnx", "no such file"),
    ):
        line = refused(call(capsys, "--mode", "info", "--onnx", tmp_path / name))
        assert line == f"error: --onnx {tmp_path / name}: {words}"


# --- 19. Unity's trained 1.x forms --------------------------------------------------------------------


def direct_1x_inputs(path, tmp_path):
    """visual-simple as a 1.x file whose sensors are read directly: the image `visual_observation_0` [C, H, W]
    (as GridFoodCollector's grid sensor) and the one vector sensor `vector_observation`, not sliced."""

    def rename(g):
        names = {"obs_0": "visual_observation_0", "obs_1": "vector_observation"}
        for value in g.input:
            value.name = names.get(value.name, value.name)
        for n in g.node:
            for k, name in enumerate(n.input):
                n.input[k] = names.get(name, name)

    return edited(path, tmp_path, rename, "GridLike.onnx")


def exp_of_log_sigma(path, tmp_path):
    """log_sigma as torch 1.7 exported it (VisualFoodCollector): Exp of the parameter, no `mu * 0 + log_sigma`."""

    def edit(g):
        add = node(g, "Add", reads="log_sigma")
        mul = next(n for n in g.node if add.input[0] in n.output)
        node(g, "Exp", reads=add.output[0]).input[0] = "action_model._continuous_distribution.log_sigma"
        kept = [n for n in g.node if n is not add and n is not mul]
        del g.node[:]
        g.node.extend(kept)

    return edited(path, tmp_path, edit, "VisualExp.onnx")


def test_a_1x_file_that_reads_its_inputs_directly_keeps_their_names(tmp_path):
    original = example("visual-simple")
    path = direct_1x_inputs(original, tmp_path)
    policy = inference.load(path, engine="torch")
    assert [(i.name, list(i.shape)) for i in policy.settings.inputs] == [
        ("visual_observation_0", [3, 36, 36]),
        ("vector_observation", [5]),
    ]
    obs = sensor_inputs(original, 64, seed=12)
    feed = {"visual_observation_0": obs["obs_0"], "vector_observation": obs["obs_1"]}
    acts_as_the_file(policy, OnnxReference(original), feed, list(obs.values()), 12, sac=False)


def test_exp_of_the_log_sigma_parameter_is_read(tmp_path):
    original = example("visual-simple")
    path = exp_of_log_sigma(with_legacy_inputs(original, tmp_path / "legacy.onnx", channels_last=True), tmp_path)
    assert any(n.op_type == "Exp" and n.input[0].endswith("log_sigma") for n in onnx.load(str(path)).graph.node)
    policy = inference.load(path, engine="torch")
    obs = sensor_inputs(original, 64, seed=13)
    feed = {"vector_observation": obs["obs_1"], "visual_observation_0": obs["obs_0"].transpose(0, 2, 3, 1)}
    ref = OnnxReference(original)
    acts_as_the_file(policy, ref, feed, list(obs.values()), 13, sac=False)
    log_sigma = policy.checkpoint.actor.action_model._continuous_distribution.log_sigma
    np.testing.assert_array_equal(log_sigma.detach().numpy(), ref.log_sigma_param)  # sampling reads the file's
