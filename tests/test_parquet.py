"""batch over Parquet datasets: --obs-file X.parquet (a file or a folder of them) and --output
Y.parquet, checked against ML-Agents' own ONNX through a bare onnxruntime session. pyarrow is an
optional dependency of inference.py (imported on that path only); requirements.txt installs it
for these tests."""
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa  # requirements.txt installs it for the tests (inference.py imports it on the Parquet path only)
import pyarrow.parquet as pq
import pytest
from conftest import BUNDLED, BUNDLED_ONNX, EXAMPLES, ROOT, call, child_env, cli, ort_deterministic


def fixed(values: np.ndarray):
    """[rows, ...] as a fixed_size_list<float32> column, each row flattened (C-order: channel first)."""
    values = np.ascontiguousarray(values, np.float32).reshape(len(values), int(np.prod(values.shape[1:])))
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def column(table, name) -> np.ndarray:
    return np.stack(table.column(name).to_numpy(zero_copy_only=False))


def huggy_obs(rows: int, seed: int = 0) -> np.ndarray:
    return (np.random.RandomState(seed).randn(rows, 59) * 2).astype(np.float32)


def only_outputs(folder, *names):
    """Nothing else in the folder: no temporary file left behind."""
    return sorted(p.name for p in folder.iterdir()) == sorted(names)


def test_folder_of_files_in_row_order_with_kept_columns(capsys, tmp_path):
    """Three files (row groups smaller and larger than --chunk) read in name order; actions equal
    ML-Agents' ONNX row for row; id and a timestamp column copied through."""
    obs = huggy_obs(2600)
    folder = tmp_path / "data"
    folder.mkdir()
    bounds = [0, 700, 1900, 2600]
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        table = pa.table({"id": np.arange(a, b), "t": [f"t{i}" for i in range(a, b)], "obs": fixed(obs[a:b])})
        pq.write_table(table, folder / f"part-{n}.parquet", row_group_size=[300, 1000, 200][n])
    target = tmp_path / "out.parquet"
    code, out, err = call(capsys, "--mode", "batch", "--obs-file", folder, "--output", target, "--chunk", "512",
                          "--keep-columns", "id,t", "--model-dir", BUNDLED)
    assert code == 0, err
    assert out["rows"] == 2600
    result = pq.read_table(target)
    assert result.column_names == ["continuous_actions", "id", "t"]
    assert result.schema.field("continuous_actions").type == pa.list_(pa.float32(), 21)
    assert result.column("id").to_pylist() == list(range(2600))
    assert result.column("t").to_pylist()[:2] == ["t0", "t1"]
    assert np.abs(column(result, "continuous_actions") - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
    assert only_outputs(tmp_path, "data", "out.parquet")


def test_nested_images_and_two_inputs(capsys, tmp_path):
    """A camera as nested lists [3][36][36] beside a vector: the same actions as ML-Agents' ONNX fed NCHW."""
    import onnxruntime as ort
    rng = np.random.RandomState(3)
    image = rng.rand(40, 3, 36, 36).astype(np.float32)
    vector = rng.randn(40, 5).astype(np.float32)
    nested = pa.array(image.tolist(), type=pa.list_(pa.list_(pa.list_(pa.float32()))))
    pq.write_table(pa.table({"obs_0": nested, "obs_1": fixed(vector)}), tmp_path / "cam.parquet")
    flat = tmp_path / "flat.parquet"
    pq.write_table(pa.table({"obs_0": fixed(image), "obs_1": pa.array(vector.tolist())}), flat)  # variable lists too
    session = ort.InferenceSession(str(EXAMPLES / "visual-simple" / "VisualSimple.onnx"),
                                   providers=["CPUExecutionProvider"])
    want = session.run(["deterministic_continuous_actions"], {"obs_0": image, "obs_1": vector})[0]
    for source in (tmp_path / "cam.parquet", flat):
        target = tmp_path / f"out-{source.stem}.parquet"
        code, _, err = call(capsys, "--mode", "batch", "--obs-file", source, "--output", target,
                            "--model-dir", EXAMPLES / "visual-simple")
        assert code == 0, err
        assert np.abs(column(pq.read_table(target), "continuous_actions") - want).max() <= 1e-5


def test_lstm_masks_and_memory_columns(capsys, tmp_path):
    """An LSTM policy with discrete actions: action_masks and memory columns in, discrete_actions
    (int64) and the next memory out, equal to ML-Agents' ONNX."""
    import onnxruntime as ort
    rng = np.random.RandomState(7)
    rows = 300
    obs = rng.randn(rows, 10).astype(np.float32)
    memory = (rng.randn(rows, 32) * 0.5).astype(np.float32)
    masks = (rng.rand(rows, 4) < 0.6).astype(np.float32)
    masks[np.arange(rows), rng.randint(0, 4, rows)] = 1  # every row allows an action
    table = pa.table({"obs_0": fixed(obs), "action_masks": pa.array(masks.astype(np.int64).tolist()),
                      "memory": fixed(memory)})
    pq.write_table(table, tmp_path / "lstm.parquet")
    target = tmp_path / "out.parquet"
    code, _, err = call(capsys, "--mode", "batch", "--obs-file", tmp_path / "lstm.parquet", "--output", target,
                        "--chunk", "128", "--model-dir", EXAMPLES / "lstm")
    assert code == 0, err
    session = ort.InferenceSession(str(EXAMPLES / "lstm" / "Memory.onnx"), providers=["CPUExecutionProvider"])
    discrete, memory_out = session.run(["deterministic_discrete_actions", "recurrent_out"],
                                       {"obs_0": obs, "action_masks": masks, "recurrent_in": memory[:, None]})
    result = pq.read_table(target)
    assert result.column_names == ["discrete_actions", "memory"]
    assert result.schema.field("discrete_actions").type == pa.list_(pa.int64(), 1)
    assert np.array_equal(column(result, "discrete_actions"), discrete.reshape(rows, 1))
    assert np.abs(column(result, "memory") - memory_out.reshape(rows, 32)).max() <= 1e-5


def test_other_formats_to_and_from_parquet(capsys, tmp_path):
    obs = huggy_obs(100, 1)
    np.save(tmp_path / "in.npy", obs)
    code, _, err = call(capsys, "--mode", "batch", "--obs-file", tmp_path / "in.npy", "--output",
                        tmp_path / "a.parquet", "--model-dir", BUNDLED)
    assert code == 0, err
    want = ort_deterministic(BUNDLED_ONNX, obs)
    assert np.abs(column(pq.read_table(tmp_path / "a.parquet"), "continuous_actions") - want).max() <= 1e-5
    pq.write_table(pa.table({"obs_0": fixed(obs)}), tmp_path / "in.parquet")
    code, _, err = call(capsys, "--mode", "batch", "--obs-file", tmp_path / "in.parquet", "--output",
                        tmp_path / "b.npz", "--model-dir", BUNDLED)
    assert code == 0, err
    assert np.abs(np.load(tmp_path / "b.npz")["continuous_actions"] - want).max() <= 1e-5


def hostile_tables(obs):
    good = fixed(obs)
    wrong_width = pa.FixedSizeListArray.from_arrays(pa.array(obs[:, :58].reshape(-1)), 58)
    ragged = pa.array([row.tolist() for row in obs[:3]] + [obs[3, :50].tolist()] + [row.tolist() for row in obs[4:]])
    with_nan = obs.copy()
    with_nan[4, 7] = np.nan
    huge = obs.astype(np.float64)
    huge[5, 0] = 1e39
    null_row = pa.array([row.tolist() for row in obs[:2]] + [None] + [row.tolist() for row in obs[3:]],
                        type=pa.list_(pa.float32()))
    return [
        ({"obs": good, "who": pa.array(range(len(obs))), "when": pa.array(range(len(obs)))},
         ["unknown column(s) who, when", "accepted: obs, obs_0"]),
        ({"obs": wrong_width}, ["column obs is fixed_size_list", "expected lists of 59 numbers"]),
        ({"obs": ragged}, ["column obs: row 3 holds 50 values where 59 belong"]),
        ({"obs": fixed(with_nan)}, ["row 4", "holds nan, inf"]),
        ({"obs": pa.array([row.tolist() for row in huge])}, ["row 5", "beyond float32"]),
        ({"obs": pa.array([[str(v) for v in row] for row in obs[:, :3]] * 1)}, ["column obs is list<", "string>"]),
        ({"obs": pa.array([f"{i}" for i in range(len(obs))])}, ["column obs is string"]),
        ({"obs": null_row}, ["column obs: row 2 is null"]),
        ({"obs": good, "obs_0": good}, ["holds both obs and obs_0"]),
        ({"x": good}, ["unknown column(s) x"]),
    ]


@pytest.mark.parametrize("case", range(10))
def test_hostile_files_refused_in_one_line(tmp_path, case):
    """Each bad dataset: exit 2, one line naming the problem, the existing output untouched, no temporary."""
    obs = huggy_obs(8, 2)
    columns, words = hostile_tables(obs)[case]
    pq.write_table(pa.table(columns), tmp_path / "bad.parquet")
    target = tmp_path / "out.parquet"
    target.write_bytes(b"precious")
    result = cli("--mode", "batch", "--obs-file", tmp_path / "bad.parquet", "--output", target, "--chunk", "3",
                 "--model-dir", BUNDLED)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert target.read_bytes() == b"precious" and only_outputs(tmp_path, "bad.parquet", "out.parquet")


def test_bad_datasets_and_options(capsys, tmp_path):
    obs = huggy_obs(10, 3)
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(pa.table({"obs": fixed(obs)}), mixed / "a.parquet")
    pq.write_table(pa.table({"obs": fixed(obs), "id": pa.array(range(10))}), mixed / "b.parquet")
    pq.write_table(pa.table({"obs": fixed(obs[:0])}), tmp_path / "none.parquet")
    pq.write_table(pa.table({"obs": fixed(obs), "id": pa.array(range(10))}), tmp_path / "ok.parquet")
    cases = [
        (["--obs-file", tmp_path / "empty"], "a folder without .parquet files"),
        (["--obs-file", tmp_path / "broken.parquet"], "not a readable Parquet file"),
        (["--obs-file", mixed, "--keep-columns", "id", "--output", tmp_path / "o.parquet"], "b.parquet: its columns differ from those of a.parquet"),
        (["--obs-file", tmp_path / "none.parquet"], "holds no rows"),
        (["--obs-file", tmp_path / "ok.parquet", "--keep-columns", "ts", "--output", tmp_path / "o.parquet"], "--keep-columns: no column 'ts'"),
        (["--obs-file", tmp_path / "ok.parquet", "--keep-columns", "id", "--output", tmp_path / "o.npz"],
         "copies columns from a Parquet --obs-file to a Parquet --output"),
        (["--obs-file", tmp_path / "ok.parquet", "--keep-columns", "id,id"], "distinct comma-separated"),
    ]
    for args, words in cases:
        code, _, err = call(capsys, "--mode", "batch", *args, "--model-dir", BUNDLED)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (args, err)


def test_without_pyarrow_one_line_says_how_to_install(tmp_path):
    """pyarrow is optional: a process where it cannot be imported says 'pip install pyarrow', exit 2;
    the other formats still run there."""
    np.save(tmp_path / "in.npy", huggy_obs(5))
    program = ("import sys; sys.modules['pyarrow'] = None; sys.path.insert(0, %r); import inference; "
               "sys.exit(inference.main(sys.argv[1:]))" % str(ROOT))
    base = [sys.executable, "-c", program, "--mode", "batch", "--model-dir", str(BUNDLED)]
    for args in (["--obs-file", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.parquet")],
                 ["--obs-file", str(tmp_path / "in.parquet")]):
        (tmp_path / "in.parquet").write_bytes(b"x")
        result = subprocess.run(base + args, capture_output=True, text=True, env=child_env(), timeout=300)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "pip install pyarrow" in result.stderr
    assert not (tmp_path / "o.parquet").exists()
    result = subprocess.run(base + ["--obs-file", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.npy"),
                                    "--json"], capture_output=True, text=True, env=child_env(), timeout=300)
    assert result.returncode == 0 and json.loads(result.stdout)["rows"] == 5, result.stderr


def test_million_rows_in_eight_files_bounded_memory(tmp_path):
    """1,000,000 Huggy rows in 8 files through a real process: peak RSS under 1.5 GB (the issue's bar),
    every row written in order, spot checks equal ML-Agents' ONNX."""
    rows, files = 1_000_000, 8
    folder = tmp_path / "big"
    folder.mkdir()
    per = rows // files
    for n in range(files):
        obs = np.random.RandomState(n).randn(per, 59).astype(np.float32)
        pq.write_table(pa.table({"row": np.arange(n * per, (n + 1) * per), "obs": fixed(obs)}),
                       folder / f"part-{n:02d}.parquet", row_group_size=50_000)
    target = tmp_path / "out.parquet"
    result = cli("--mode", "batch", "--obs-file", folder, "--output", target, "--keep-columns", "row",
                 "--model-dir", BUNDLED, "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["rows"] == rows and out["peak_rss_mb"] < 1500, out["peak_rss_mb"]
    written = pq.ParquetFile(target)
    assert written.metadata.num_rows == rows
    for group in (0, written.metadata.num_row_groups // 2, written.metadata.num_row_groups - 1):
        table = written.read_row_group(group)
        first = table.column("row")[0].as_py()
        assert table.column("row").to_pylist() == list(range(first, first + table.num_rows))
        n, offset = divmod(first, per)
        obs = np.random.RandomState(n).randn(per, 59).astype(np.float32)[offset:offset + table.num_rows]
        assert np.abs(column(table, "continuous_actions") - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5


def test_pyarrow_ray_and_orjson_stay_unimported():
    """The optional packages are imported on their own paths only: loading the program and running
    a .npy batch pulls in none of them (a fresh interpreter: this one has imported pyarrow)."""
    code = ("import sys; sys.path.insert(0, %r); import inference, numpy as np, tempfile, os; "
            "d = tempfile.mkdtemp(); np.save(os.path.join(d, 'o.npy'), np.zeros((3, 59), np.float32)); "
            "inference.main(['--mode', 'batch', '--obs-file', os.path.join(d, 'o.npy'), '--model-dir', %r, '--json']); "
            "print(sorted(m for m in ('pyarrow', 'ray', 'orjson') if m in sys.modules), file=sys.stderr)"
            % (str(ROOT), str(BUNDLED)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=300)
    assert result.returncode == 0 and result.stderr.strip().splitlines()[-1] == "[]", result.stderr


@pytest.mark.parametrize("chunk", [1, 7, 300, 5000])
def test_the_read_units_of_ray_cover_every_row_once_in_order(tmp_path, chunk):
    """What --ray hands its actors (datasets.read_units, read by ParquetSource.batches): small row
    groups together, a row group of many chunks cut in runs of record batches; read one after the
    other, every row comes once, in input order, its position right. (No Ray: the units alone.)"""
    from mlagents_inference.api.policy import load
    from mlagents_inference.core.inputs import ParquetSource
    from mlagents_inference.fronts.batch import read_units
    (tmp_path / "data").mkdir()
    for name, rows, groups in (("a", 2000, 90), ("b", 1300, None), ("c", 1, None), ("d", 950, 400)):
        start = {"a": 0, "b": 2000, "c": 3300, "d": 3301}[name]
        pq.write_table(pa.table({"id": np.arange(start, start + rows), "obs": fixed(huggy_obs(rows))}),
                       tmp_path / "data" / f"{name}.parquet", row_group_size=groups)
    source = ParquetSource.open(tmp_path / "data", load(BUNDLED).settings, ["id"])
    units = [(u["file"], u["groups"], u["first"], u["skip"], u["take"]) for u in read_units(source, chunk, 4)]
    seen = [(start, batch.column("id").to_numpy()) for unit in units for start, batch in source.batches(chunk, [unit])]
    assert all(len(ids) <= chunk and np.array_equal(ids, np.arange(start, start + len(ids))) for start, ids in seen)
    assert np.array_equal(np.concatenate([ids for _, ids in seen]), np.arange(4251))
    cut = sum(1 for u in units if u[0].endswith("b.parquet"))  # one row group of 1300 rows: cut for up to 4 actors
    assert 1 < cut <= 4 if chunk < 1300 else cut == 1
