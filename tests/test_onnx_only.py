"""Policies from an ML-Agents ONNX alone (no checkpoint): every example's <Behavior>.onnx and the
bundled Huggy.onnx, the older 1.x interface (vector_observation, visual_observation_k) built from
them with ML-Agents' own graph after the inputs, and Unity's trained 1.x files (examples/trained/).
The reference is a bare onnxruntime session on the file itself (tests/mlagents_reference.py)."""

import shutil

import numpy as np
import onnx
import pytest
from conftest import BUNDLED, EXAMPLES, TRAINED, acts_as_the_file, call, refused, run, sensor_inputs
from mlagents_reference import (
    TRAINED_SPLITS,
    OnnxReference,
    discrete_mismatches,
    random_masks,
    vector_obs,
    with_legacy_inputs,
)

import inference

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ONNX_ONLY = "settings and weights from the ONNX (no checkpoint)"
FILES = sorted(p for p in EXAMPLES.glob("*/*.onnx") if p.parent.name != "onnx-interfaces") + [BUNDLED / "Huggy.onnx"]
INTERFACES = EXAMPLES / "onnx-interfaces"  # the older interfaces, one file each (its README)
ROWS = 64


@pytest.mark.parametrize("engine", ["torch", "onnxruntime"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)
def test_every_example_onnx_alone_acts_as_the_file(path, engine):
    policy = inference.load(path, engine=engine)
    ref = OnnxReference(path)
    feed = sensor_inputs(path, ROWS, seed=len(path.name))
    assert policy.info["settings_source"] == ONNX_ONLY and policy.info["behavior"] == path.stem
    assert [i.name for i in policy.settings.inputs] == list(feed)  # named and ordered as the file's inputs
    assert bool(policy.settings.memory_size) == ref.recurrent
    acts_as_the_file(policy, ref, feed, list(feed.values()), len(path.name), sac="log_sigma" in ref.extra)
    if "log_sigma" not in ref.extra and ref.log_sigma_param is not None:  # sampling reads the file's log_sigma
        log_sigma = policy.checkpoint.actor.action_model._continuous_distribution.log_sigma
        np.testing.assert_array_equal(log_sigma.detach().numpy(), ref.log_sigma_param)


LEGACY = [
    "multi-continuous",
    "discrete-multi",
    "hybrid",
    "sac-continuous",
    "lstm",
    "visual-simple",
    "attention",
    "cameras-after-vector",
]


@pytest.mark.parametrize("kind", LEGACY)
def test_the_older_interface_takes_vector_observation_as_the_file_has_it(kind, tmp_path):
    """ML-Agents' 1.1.0 graph given the inputs its serializer wrote before obs_N: the policy takes
    vector_observation (its sensors concatenated) and visual_observation_k as the file declares them;
    the reference is the untouched 1.1.0 file fed the same numbers."""
    original = next((EXAMPLES / kind).glob("*.onnx"))
    legacy = with_legacy_inputs(original, tmp_path / original.name)
    policy = inference.load(legacy, engine="torch")
    obs = sensor_inputs(original, ROWS, seed=3)
    vectors = [x for x in obs.values() if x.ndim == 2]
    feed = {"vector_observation": np.concatenate(vectors, axis=1)} if vectors else {}
    feed.update({f"visual_observation_{k}": x for k, x in enumerate(x for x in obs.values() if x.ndim == 4)})
    feed.update({name: x for name, x in obs.items() if x.ndim == 3})
    wanted = [i.name for i in onnx.load(str(legacy)).graph.input if i.name not in ("action_masks", "recurrent_in")]
    assert [i.name for i in policy.settings.inputs] == wanted
    assert sorted(feed) == sorted(wanted)
    ref = OnnxReference(original)
    acts_as_the_file(policy, ref, feed, list(obs.values()), 3, sac="log_sigma" in ref.extra)


@pytest.mark.parametrize("kind", ["hybrid", "lstm-camera-nonsquare", "attention"])
def test_a_2x_file_without_deterministic_outputs(capsys, tmp_path, kind):
    """ML-Agents 2.x before the deterministic_* outputs: obs_N inputs, continuous_actions and
    discrete_actions sampled. The policy and onnx-compare's reference go by mu and the masked logits."""
    original = next((EXAMPLES / kind).glob("*.onnx"))

    def strip(graph):
        kept = [o for o in graph.output if not o.name.startswith("deterministic_")]
        del graph.output[:]
        graph.output.extend(kept)

    path = edited(original, tmp_path, strip)
    policy = inference.load(path, engine="torch")
    feed = sensor_inputs(path, ROWS, seed=4)
    acts_as_the_file(policy, OnnxReference(path), feed, list(feed.values()), 4, sac=False)
    code, r, err = call(capsys, "--mode", "onnx-compare", "--onnx", path, "--tol", "1e-5")
    assert code == 0 and r["passed"] and r["legacy_interface"], err


@pytest.mark.parametrize("kind", ["visual-simple", "lstm-camera-nonsquare", "cameras-after-vector"])
def test_a_channels_last_image_of_the_older_interface_is_taken_as_declared(kind, tmp_path):
    """[H, W, C] images, as the first torch exporter declared them (its graph transposes them)."""
    original = next((EXAMPLES / kind).glob("*.onnx"))
    legacy = with_legacy_inputs(original, tmp_path / original.name, channels_last=True)
    policy = inference.load(legacy, engine="onnxruntime")
    obs = sensor_inputs(original, ROWS, seed=6)
    vectors = [x for x in obs.values() if x.ndim == 2]
    feed = {"vector_observation": np.concatenate(vectors, axis=1)}
    feed.update(
        {
            f"visual_observation_{k}": x.transpose(0, 2, 3, 1)
            for k, x in enumerate(x for x in obs.values() if x.ndim == 4)
        }
    )
    declared = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim][1:] for i in onnx.load(str(legacy)).graph.input
    }
    assert {i.name: list(i.shape) for i in policy.settings.inputs} == {k: declared[k] for k in feed}
    acts_as_the_file(policy, OnnxReference(original), feed, list(obs.values()), 6, sac=False)


@pytest.mark.parametrize(
    "name, inputs",
    [
        ("Crawlerish-1x", {"vector_observation": [38]}),
        ("LstmCam-1x", {"vector_observation": [3], "visual_observation_0": [1, 24, 30]}),
        ("VisualSimple-1x-channels-last", {"vector_observation": [5], "visual_observation_0": [36, 36, 3]}),
        ("Hybrid-2x", {"obs_0": [12]}),
    ],
)
def test_the_interface_example_files(capsys, name, inputs):
    """The README's file per interface: the policy takes the file's inputs, onnx-compare holds."""
    path = INTERFACES / f"{name}.onnx"
    code, r, err = call(capsys, "--mode", "info", "--onnx", path)
    assert code == 0 and {i["name"]: i["shape"] for i in r["inputs"]} == inputs, err
    code, r, err = call(capsys, "--mode", "onnx-compare", "--onnx", path, "--tol", "1e-5", "--engine", "torch")
    assert code == 0 and r["passed"] and r["legacy_interface"], err


@pytest.mark.parametrize("name", sorted(TRAINED_SPLITS))
def test_unity_trained_files_alone(name):
    """Unity's trained example models (1.x interface, torch 1.7 export), given as the ONNX alone."""
    path = TRAINED / name / f"{name}.onnx"
    ref = OnnxReference(path, TRAINED_SPLITS[name])
    rng = np.random.RandomState(5)
    obs = [vector_obs(rng, ROWS, width) for width in TRAINED_SPLITS[name]]
    for engine in ("torch", "onnxruntime"):
        policy = inference.load(path, engine=engine)
        assert [i.name for i in policy.settings.inputs] == ["vector_observation"]
        acts_as_the_file(policy, ref, {"vector_observation": np.concatenate(obs, axis=1)}, obs, 5, sac=False)


def test_info_describes_the_given_onnx_not_the_bundled_sample(capsys):
    code, r, err = call(capsys, "--mode", "info", "--onnx", EXAMPLES / "vector" / "Vector.onnx")
    assert code == 0, err
    assert r["behavior"] == "Vector" and r["settings_source"] == ONNX_ONLY and r["obs_dim"] == 8
    assert r["checkpoint"].endswith("Vector.onnx") and r["note"] is None
    code, _, _ = call(capsys, "--mode", "info", "--onnx", EXAMPLES / "vector" / "Vector.onnx")
    inference.main(["--mode", "info", "--onnx", str(EXAMPLES / "vector" / "Vector.onnx")])
    assert ONNX_ONLY in capsys.readouterr().out


def test_a_folder_holding_only_the_onnx_and_checkpoint_option(capsys, tmp_path):
    shutil.copy(EXAMPLES / "hybrid" / "Hybrid.onnx", tmp_path / "Hybrid.onnx")
    code, r, err = call(capsys, "--mode", "action", "--model-dir", tmp_path, "--mask", "1,0")
    assert code == 0, err
    assert r["discrete_actions"] == [0] and len(r["continuous_actions"]) == 3
    code, r2, err = call(capsys, "--mode", "action", "--checkpoint", tmp_path / "Hybrid.onnx", "--mask", "1,0")
    assert code == 0 and r2["continuous_actions"] == r["continuous_actions"]
    assert inference.main(["--mode", "checkpoints", "--model-dir", str(tmp_path)]) == 2
    assert "ONNX alone has no checkpoints" in capsys.readouterr().err
    shutil.copy(EXAMPLES / "vector" / "Vector.onnx", tmp_path / "Vector.onnx")
    with pytest.raises(inference.UsageError, match='several ONNX files .*path="FILE.onnx"'):
        inference.load(tmp_path)


@pytest.mark.parametrize("kind", ["lstm", "visual-resnet", "goal-two-signals"])
def test_onnx_compare_and_precision_hold_for_the_onnx_alone(capsys, kind):
    path = next((EXAMPLES / kind).glob("*.onnx"))
    code, r, err = call(capsys, "--mode", "onnx-compare", "--onnx", path, "--tol", "1e-5")
    assert code == 0 and r["passed"] and r["reference"] == str(path), err
    code, r, err = call(capsys, "--mode", "precision", "--onnx", path, "--engine", "torch")
    assert code == 0 and r["passed"], err


def test_export_writes_the_1_1_0_interface_from_the_onnx_alone(capsys, tmp_path):
    source = EXAMPLES / "attention" / "Attention.onnx"
    code, r, err = call(capsys, "--mode", "export-onnx", "--onnx", source, "--output", tmp_path / "out.onnx")
    assert code == 0, err
    assert r["inputs"] == ["obs_0", "obs_1", "action_masks"] and "deterministic_discrete_actions" in r["outputs"]
    feed = sensor_inputs(source, ROWS, seed=9)
    masks = random_masks(np.random.RandomState(9), ROWS, [3, 3])
    theirs, ours = (
        OnnxReference(source).run(list(feed.values()), masks),
        OnnxReference(tmp_path / "out.onnx").run(list(feed.values()), masks),
    )
    assert discrete_mismatches(ours["discrete"], theirs)[0] == 0


def edited(path, tmp_path, edit):
    model = onnx.load(str(path))
    edit(model.graph)
    out = tmp_path / path.name
    onnx.save(model, str(out))
    return out


def _set_attr(graph, op: str, name: str, value) -> None:
    node = next(n for n in graph.node if n.op_type == op)
    attr = next(a for a in node.attribute if a.name == name)
    attr.CopyFrom(onnx.helper.make_attribute(name, value))


@pytest.mark.parametrize(
    "kind, op, attr, value, node_word",
    [
        ("multi-continuous", "Clip", "max", 4.0, "Clip"),  # a normaliser clamped at 4, not ML-Agents' 5
        ("visual-simple", "Conv", "strides", [3, 3], "Conv"),  # a convolution no ML-Agents encoder has
        ("visual-simple", "LeakyRelu", "alpha", 0.2, "LeakyRelu"),
    ],
)
def test_patterns_ml_agents_never_writes_are_refused_naming_the_node(
    capsys, tmp_path, kind, op, attr, value, node_word
):
    path = edited(next((EXAMPLES / kind).glob("*.onnx")), tmp_path, lambda g: _set_attr(g, op, attr, value))
    with pytest.raises(inference.UsageError, match=f"node .*\\({node_word}\\)"):
        inference.load(path)
    refused(run(capsys, "--mode", "info", "--onnx", path), "not an ML-Agents policy")


def test_onnx_files_that_are_no_ml_agents_policy_are_refused_in_one_line(capsys, tmp_path):
    from onnx import TensorProto, helper

    relu = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    onnx.save(helper.make_model(relu), str(tmp_path / "relu.onnx"))
    (tmp_path / "ext").mkdir()
    onnx.save_model(
        onnx.load(str(EXAMPLES / "vector" / "Vector.onnx")),
        str(tmp_path / "ext" / "Vector.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    (tmp_path / "garbage.onnx").write_bytes(b"not a protobuf at all")
    for path, words in (
        (tmp_path / "relu.onnx", "input x"),
        (tmp_path / "ext" / "Vector.onnx", "external files"),
        (tmp_path / "garbage.onnx", "not an ONNX file"),
    ):
        with pytest.raises(inference.UsageError, match=words):
            inference.load(path)
        refused(run(capsys, "--mode", "info", "--onnx", path), words)
