"""ONNX files that are foreign, damaged, crafted or another policy's, given with --onnx or found beside a
checkpoint: refused in one line, or named "not this policy" (exit 1); never a traceback, never a file written.
(What onnxruntime itself would print of them: test_signals_and_stdio.py.)"""

import json
import shutil
from pathlib import Path

import pytest
from conftest import BUNDLED, EXAMPLES, call, copy_run, refused, run, wider_outputs

import inference as I

# --- foreign files ------------------------------------------------------------------------------------------


def test_foreign_onnx_files_refused(capsys, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    old = helper.make_graph(
        [helper.make_node("Identity", ["vector_observation"], ["action"])],
        "old",
        [helper.make_tensor_value_info("vector_observation", TensorProto.FLOAT, [1, 59])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, [1, 59])],
    )
    model = helper.make_model(old, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "old.onnx"))
    (tmp_path / "garbage.onnx").write_bytes(b"garbage")
    for name, words in (
        ("old.onnx", "cannot compare"),
        ("garbage.onnx", "not an ONNX file"),
        ("missing.onnx", "no such file"),
    ):
        refused(call(capsys, "--mode", "onnx-compare", "--model-dir", BUNDLED, "--onnx", tmp_path / name), words)


# --- crafted shapes and outputs -----------------------------------------------------------------------------


def crafted_attention(tmp_path: Path, entities: int) -> Path:
    import onnx

    folder = copy_run(EXAMPLES / "attention", tmp_path, f"attention_{entities}")
    model = onnx.load(str(folder / "Attention.onnx"))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = entities  # obs_0: [batch, entities, 5]
    onnx.save(model, str(folder / "Attention.onnx"))
    return folder


@pytest.mark.parametrize("entities", [0, -3, 100_000])
def test_crafted_entity_counts_are_one_line(capsys, tmp_path, entities):
    folder = crafted_attention(tmp_path, entities)
    refused(
        run(capsys, "--mode", "export-onnx", "--model-dir", folder, "--output", tmp_path / "out.onnx"),
        "Attention.onnx",
        f"[{entities}, 5]",
    )
    assert not (tmp_path / "out.onnx").exists()


def test_an_entity_count_of_a_billion_is_refused_before_anything_is_allocated(tmp_path):
    with pytest.raises(I.UsageError, match="more than 4096 entities"):
        I.load(crafted_attention(tmp_path, 10**9), engine="torch")


def test_a_reference_with_wider_outputs_is_not_this_policy(capsys, tmp_path):
    wide = wider_outputs(tmp_path)
    code, out, err = run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", wide, "--json")
    result = json.loads(out)
    assert code == 1 and not result["passed"] and "[64, 4]" in result["not_this_policy"], (out, err)
    assert "Traceback" not in err
    code, out, err = run(
        capsys,
        "--mode",
        "export-onnx",
        "--model-dir",
        EXAMPLES / "vector",
        "--onnx",
        wide,
        "--output",
        tmp_path / "out.onnx",
        "--json",
    )  # named with --onnx: a failure, never "no ONNX"
    result = json.loads(out)
    assert code == 1 and not result["passed"] and "[64, 4]" in result["not_this_policy"], (out, err)
    assert not (tmp_path / "out.onnx").exists()


# --- the older interface (vector_observation): crafted widths, external data, empty slices ------------------


def legacy_vector_onnx(tmp_path: Path, name: str = "legacy.onnx", mu_only: bool = False) -> Path:
    """The vector example's ONNX with ML-Agents 1.x's input (vector_observation); `mu_only`: without
    the deterministic outputs either, as 1.x files were (the reference then reads mu)."""
    import onnx
    from mlagents_reference import with_legacy_inputs

    path = with_legacy_inputs(EXAMPLES / "vector" / "Vector.onnx", tmp_path / name)
    if mu_only:
        model = onnx.load(str(path))
        kept = [o for o in model.graph.output if not o.name.startswith("deterministic_")]
        del model.graph.output[:]
        model.graph.output.extend(kept)
        onnx.save(model, str(path))
    return path


def test_a_legacy_input_declared_1e12_wide_is_one_line(capsys, tmp_path):
    import onnx

    path = legacy_vector_onnx(tmp_path)
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 10**12
    onnx.save(model, str(path))
    refused(run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", path), "legacy.onnx")


@pytest.mark.parametrize("where", ["outside", "absolute", "missing"])
def test_legacy_onnx_with_external_data_it_cannot_read_is_one_line(capsys, tmp_path, where):
    import onnx

    legacy = legacy_vector_onnx(tmp_path, mu_only=True)
    assert run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", legacy)[0] == 0
    folder = tmp_path / "model"
    folder.mkdir()
    model = onnx.load(str(legacy))
    onnx.save(
        model,
        str(folder / "x.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="x.bin",
        size_threshold=0,
    )
    shutil.copy(folder / "x.bin", tmp_path / "outside.bin")
    location = {"outside": "../outside.bin", "absolute": str(tmp_path / "outside.bin"), "missing": "gone.bin"}[where]
    model = onnx.load(str(folder / "x.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(folder / "x.onnx"))
    refused(
        run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", folder / "x.onnx"), "x.onnx"
    )


def test_a_zero_width_legacy_slice_is_no_phantom_input(capsys, tmp_path):
    import onnx
    from onnx import helper

    run_dir = copy_run(EXAMPLES / "vector", tmp_path)
    path = legacy_vector_onnx(tmp_path)
    model = onnx.load(str(path))
    model.graph.node.insert(
        0, helper.make_node("Slice", ["vector_observation"], ["nothing"], axes=[1], starts=[8], ends=[8])
    )
    onnx.save(model, str(run_dir / "Vector.onnx"))
    (run_dir / "Vector" / "Vector-50000.onnx").unlink(missing_ok=True)
    line = refused(run(capsys, "--mode", "info", "--model-dir", run_dir), "Vector.onnx", "[0]")
    assert "obs_1" not in line


# --- another policy's ONNX beside the checkpoint ------------------------------------------------------------


def test_an_unusable_onnx_beside_the_checkpoint_says_why(capsys, tmp_path):
    run_dir = copy_run(EXAMPLES / "visual-simple", tmp_path)
    shutil.copy(EXAMPLES / "vector" / "Vector.onnx", run_dir / "VisualSimple.onnx")  # another policy's ONNX
    code, out, err = run(capsys, "--mode", "info", "--model-dir", run_dir, "--json")
    source = json.loads(out)["settings_source"]
    assert code == 0 and "VisualSimple.onnx not used" in source and "[[8]]" in source, source
    assert "no ML-Agents ONNX beside it" not in source
    run_dir = copy_run(EXAMPLES / "attention", tmp_path, "attention")
    shutil.copy(EXAMPLES / "vector" / "Vector.onnx", run_dir / "Attention.onnx")
    line = refused(run(capsys, "--mode", "info", "--model-dir", run_dir), "Attention.onnx not used", "--onnx")
    assert "beside it or pass" not in line
