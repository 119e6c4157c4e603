"""batch over Parquet datasets: --obs-file X.parquet (a file or a folder of them) and --output
Y.parquet, checked against ML-Agents' own ONNX through a bare onnxruntime session. pyarrow is an
optional dependency of inference.py (imported on that path only); requirements.txt installs it
for these tests. Hostile files are refused in one line, the output untouched: bad columns, a
footer that miscounts its rows, a flipped byte in a checksummed page, duplicate or undecodable
column names, a FIFO named .parquet (never blocks); what a reader holds does not grow with the
file."""

import inspect
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa  # requirements.txt installs it for the tests (inference.py imports it on the Parquet path only)
import pyarrow.parquet as pq
import pytest
from conftest import (
    BUNDLED,
    BUNDLED_ONNX,
    EXAMPLES,
    ROOT,
    call,
    child_env,
    cli,
    fixed,
    huggy_obs,
    leftovers,
    ort_deterministic,
    refused,
    run,
)


def column(table, name) -> np.ndarray:
    return np.stack(table.column(name).to_numpy(zero_copy_only=False))


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
    code, out, err = call(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        folder,
        "--output",
        target,
        "--chunk",
        "512",
        "--keep-columns",
        "id,t",
        "--model-dir",
        BUNDLED,
    )
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
    session = ort.InferenceSession(
        str(EXAMPLES / "visual-simple" / "VisualSimple.onnx"), providers=["CPUExecutionProvider"]
    )
    want = session.run(["deterministic_continuous_actions"], {"obs_0": image, "obs_1": vector})[0]
    for source in (tmp_path / "cam.parquet", flat):
        target = tmp_path / f"out-{source.stem}.parquet"
        code, _, err = call(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            source,
            "--output",
            target,
            "--model-dir",
            EXAMPLES / "visual-simple",
        )
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
    table = pa.table(
        {"obs_0": fixed(obs), "action_masks": pa.array(masks.astype(np.int64).tolist()), "memory": fixed(memory)}
    )
    pq.write_table(table, tmp_path / "lstm.parquet")
    target = tmp_path / "out.parquet"
    code, _, err = call(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        tmp_path / "lstm.parquet",
        "--output",
        target,
        "--chunk",
        "128",
        "--model-dir",
        EXAMPLES / "lstm",
    )
    assert code == 0, err
    session = ort.InferenceSession(str(EXAMPLES / "lstm" / "Memory.onnx"), providers=["CPUExecutionProvider"])
    discrete, memory_out = session.run(
        ["deterministic_discrete_actions", "recurrent_out"],
        {"obs_0": obs, "action_masks": masks, "recurrent_in": memory[:, None]},
    )
    result = pq.read_table(target)
    assert result.column_names == ["discrete_actions", "memory"]
    assert result.schema.field("discrete_actions").type == pa.list_(pa.int64(), 1)
    assert np.array_equal(column(result, "discrete_actions"), discrete.reshape(rows, 1))
    assert np.abs(column(result, "memory") - memory_out.reshape(rows, 32)).max() <= 1e-5


def test_other_formats_to_and_from_parquet(capsys, tmp_path):
    obs = huggy_obs(100, 1)
    np.save(tmp_path / "in.npy", obs)
    code, _, err = call(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        tmp_path / "in.npy",
        "--output",
        tmp_path / "a.parquet",
        "--model-dir",
        BUNDLED,
    )
    assert code == 0, err
    want = ort_deterministic(BUNDLED_ONNX, obs)
    assert np.abs(column(pq.read_table(tmp_path / "a.parquet"), "continuous_actions") - want).max() <= 1e-5
    pq.write_table(pa.table({"obs_0": fixed(obs)}), tmp_path / "in.parquet")
    code, _, err = call(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        tmp_path / "in.parquet",
        "--output",
        tmp_path / "b.npz",
        "--model-dir",
        BUNDLED,
    )
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
    null_row = pa.array(
        [row.tolist() for row in obs[:2]] + [None] + [row.tolist() for row in obs[3:]], type=pa.list_(pa.float32())
    )
    return [
        (
            {"obs": good, "who": pa.array(range(len(obs))), "when": pa.array(range(len(obs)))},
            ["unknown column(s) who, when", "accepted: obs, obs_0"],
        ),
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
def test_hostile_files_refused_in_one_line(capsys, tmp_path, case):
    """Each bad dataset: exit 2, one line naming the problem, the existing output untouched, no temporary."""
    obs = huggy_obs(8, 2)
    columns, words = hostile_tables(obs)[case]
    pq.write_table(pa.table(columns), tmp_path / "bad.parquet")
    target = tmp_path / "out.parquet"
    target.write_bytes(b"precious")
    line = refused(
        run(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            tmp_path / "bad.parquet",
            "--output",
            target,
            "--chunk",
            "3",
            "--model-dir",
            BUNDLED,
        ),
        *words,
    )
    assert line.startswith("error: ")
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
        (
            ["--obs-file", mixed, "--keep-columns", "id", "--output", tmp_path / "o.parquet"],
            "b.parquet: its columns differ from those of a.parquet",
        ),
        (["--obs-file", tmp_path / "none.parquet"], "holds no rows"),
        (
            ["--obs-file", tmp_path / "ok.parquet", "--keep-columns", "ts", "--output", tmp_path / "o.parquet"],
            "--keep-columns: no column 'ts'",
        ),
        (
            ["--obs-file", tmp_path / "ok.parquet", "--keep-columns", "id", "--output", tmp_path / "o.npz"],
            "copies columns from a Parquet --obs-file to a Parquet --output",
        ),
        (["--obs-file", tmp_path / "ok.parquet", "--keep-columns", "id,id"], "distinct comma-separated"),
    ]
    for args, words in cases:
        refused(call(capsys, "--mode", "batch", *args, "--model-dir", BUNDLED), words)


def test_without_pyarrow_one_line_says_how_to_install(capsys, tmp_path, monkeypatch):
    """pyarrow is optional: where it cannot be imported (hidden from this process's imports) the Parquet path says
    'pip install pyarrow', exit 2; the other formats still run there."""
    np.save(tmp_path / "in.npy", huggy_obs(5))
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.setitem(sys.modules, name, None)
    base = ["--mode", "batch", "--model-dir", BUNDLED]
    for args in (
        ["--obs-file", tmp_path / "in.npy", "--output", tmp_path / "o.parquet"],
        ["--obs-file", tmp_path / "in.parquet"],
    ):
        (tmp_path / "in.parquet").write_bytes(b"x")
        refused(run(capsys, *base, *args), "pip install pyarrow")
    assert not (tmp_path / "o.parquet").exists()
    code, out, err = call(capsys, *base, "--obs-file", tmp_path / "in.npy", "--output", tmp_path / "o.npy")
    assert code == 0 and out["rows"] == 5, err


def test_million_rows_in_eight_files_bounded_memory(tmp_path):
    """1,000,000 Huggy rows in 8 files through a real process: peak RSS under 1.5 GB (the issue's bar),
    every row written in order, spot checks equal ML-Agents' ONNX."""
    rows, files = 1_000_000, 8
    folder = tmp_path / "big"
    folder.mkdir()
    per = rows // files
    for n in range(files):
        obs = np.random.RandomState(n).randn(per, 59).astype(np.float32)
        pq.write_table(
            pa.table({"row": np.arange(n * per, (n + 1) * per), "obs": fixed(obs)}),
            folder / f"part-{n:02d}.parquet",
            row_group_size=50_000,
        )
    target = tmp_path / "out.parquet"
    result = cli(
        "--mode",
        "batch",
        "--obs-file",
        folder,
        "--output",
        target,
        "--keep-columns",
        "row",
        "--model-dir",
        BUNDLED,
        "--json",
        timeout=900,
    )
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
        obs = np.random.RandomState(n).randn(per, 59).astype(np.float32)[offset : offset + table.num_rows]
        assert np.abs(column(table, "continuous_actions") - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5


def test_pyarrow_ray_and_orjson_stay_unimported():
    """The optional packages are imported on their own paths only: loading the program and running
    a .npy batch pulls in none of them (a fresh interpreter: this one has imported pyarrow)."""
    code = (
        "import sys; sys.path.insert(0, %r); import inference, numpy as np, tempfile, os; "
        "d = tempfile.mkdtemp(); np.save(os.path.join(d, 'o.npy'), np.zeros((3, 59), np.float32)); "
        "inference.main(['--mode', 'batch', '--obs-file', os.path.join(d, 'o.npy'), '--model-dir', %r, '--json']); "
        "print(sorted(m for m in ('pyarrow', 'ray', 'orjson') if m in sys.modules), file=sys.stderr)"
        % (str(ROOT), str(BUNDLED))
    )
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
        pq.write_table(
            pa.table({"id": np.arange(start, start + rows), "obs": fixed(huggy_obs(rows))}),
            tmp_path / "data" / f"{name}.parquet",
            row_group_size=groups,
        )
    source = ParquetSource.open(tmp_path / "data", load(BUNDLED).settings, ["id"])
    units = [(u["file"], u["groups"], u["first"], u["skip"], u["take"]) for u in read_units(source, chunk, 4)]
    seen = [(start, batch.column("id").to_numpy()) for unit in units for start, batch in source.batches(chunk, [unit])]
    assert all(len(ids) <= chunk and np.array_equal(ids, np.arange(start, start + len(ids))) for start, ids in seen)
    assert np.array_equal(np.concatenate([ids for _, ids in seen]), np.arange(4251))
    cut = sum(1 for u in units if u[0].endswith("b.parquet"))  # one row group of 1300 rows: cut for up to 4 actors
    assert 1 < cut <= 4 if chunk < 1300 else cut == 1


CHECKSUMS = "page_checksum_verification" in inspect.signature(pq.ParquetFile).parameters  # pyarrow 15 and later


# --- uint8 camera frames are pixels, as in .npz, image files and act() --------------------------------------


def test_uint8_frames_in_parquet_are_scaled_as_everywhere_else(capsys, tmp_path):
    import onnxruntime as ort

    rng = np.random.RandomState(5)
    pixels = rng.randint(0, 256, (40, 3, 36, 36)).astype(np.uint8)
    vector = rng.randn(40, 5).astype(np.float32)
    session = ort.InferenceSession(
        str(EXAMPLES / "visual-simple" / "VisualSimple.onnx"), providers=["CPUExecutionProvider"]
    )
    want = session.run(
        ["deterministic_continuous_actions"], {"obs_0": pixels.astype(np.float32) / 255, "obs_1": vector}
    )[0]
    nested = pa.array(pixels.tolist(), type=pa.list_(pa.list_(pa.list_(pa.uint8()))))
    pq.write_table(pa.table({"obs_0": nested, "obs_1": fixed(vector)}), tmp_path / "nested.parquet")
    pq.write_table(pa.table({"obs_0": fixed(pixels, None), "obs_1": fixed(vector)}), tmp_path / "flat.parquet")
    np.savez(tmp_path / "frames.npz", obs_0=pixels, obs_1=vector)
    for source in ("nested.parquet", "flat.parquet", "frames.npz"):
        target = tmp_path / f"out-{source}.parquet"
        code, _, err = run(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            tmp_path / source,
            "--output",
            target,
            "--model-dir",
            EXAMPLES / "visual-simple",
        )
        assert code == 0, err
        assert np.abs(column(pq.read_table(target), "continuous_actions") - want).max() <= 1e-5, source


# --- a footer's row count is held to the rows read; page checksums are verified -----------------------------


def tampered(path, rows: int, file_rows: int, group_rows: int):
    """`path` (one row group of `rows` rows) with the footer's row counts replaced: the file's and the row group's
    (two-byte zigzag varints in the Thrift footer, found by trying each place that holds `rows`)."""

    def varint(n: int) -> bytes:
        z = 2 * n
        assert 128 <= z < 1 << 14
        return bytes([0x80 | z & 0x7F, z >> 7])

    data = path.read_bytes()
    end = len(data) - 8
    start = end - struct.unpack("<i", data[end : end + 4])[0]
    places = [i for i in range(start, end - 1) if data[i : i + 2] == varint(rows)]
    out = data
    for place in places:
        trial = data[:place] + varint(rows + 1) + data[place + 2 :]
        path.write_bytes(trial)
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows != rows:
            out = out[:place] + varint(file_rows) + out[place + 2 :]
        elif meta.row_group(0).num_rows != rows:
            out = out[:place] + varint(group_rows) + out[place + 2 :]
    path.write_bytes(out)
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.row_group(0).num_rows) == (file_rows, group_rows)
    return path


@pytest.mark.parametrize("file_rows,group_rows", [(1200, 1000), (800, 1000), (1000, 1200), (1200, 1200)])
def test_a_footer_that_miscounts_the_rows_is_refused(capsys, tmp_path, file_rows, group_rows):
    obs = huggy_obs(1000, 4)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"obs": fixed(obs)}), source)
    tampered(source, 1000, file_rows, group_rows)
    for target in ("out.npy", "out.parquet", "out.npz"):
        refused(
            run(
                capsys,
                "--mode",
                "batch",
                "--obs-file",
                source,
                "--output",
                tmp_path / target,
                "--chunk",
                "256",
                "--model-dir",
                BUNDLED,
            ),
            "footer says",
        )
        assert not (tmp_path / target).exists()
    refused(run(capsys, "--mode", "batch", "--obs-file", source, "--model-dir", BUNDLED), "footer says")
    assert leftovers(tmp_path) == []


def test_a_flipped_byte_in_a_checksummed_page_is_refused(capsys, tmp_path):
    if not CHECKSUMS:
        pytest.skip("this pyarrow cannot verify page checksums (pyarrow 15 and later)")
    obs = huggy_obs(100, 6)
    source = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"obs": fixed(obs)}), source, write_page_checksum=True, compression="none", use_dictionary=False
    )
    data = bytearray(source.read_bytes())
    where = bytes(data).index(obs[50, 7].tobytes())
    data[where + 1] ^= 0x40  # one value a little changed: still a finite float
    source.write_bytes(bytes(data))
    refused(
        run(capsys, "--mode", "batch", "--obs-file", source, "--output", tmp_path / "out.npy", "--model-dir", BUNDLED),
        "--obs-file",
        "in.parquet",
    )
    assert not (tmp_path / "out.npy").exists() and leftovers(tmp_path) == []


# --- what a reader holds does not grow with the file; a FIFO never blocks -----------------------------------


READ_PEAK = """
import sys
from pathlib import Path
import pyarrow as pa
from mlagents_inference.core.inputs import ParquetSource
from mlagents_inference.core.spec import InputSpec, PolicySettings
def hwm():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) * 1024
settings = PolicySettings([InputSpec("obs_0", "vector", (59,))], 16, 1, False, continuous_size=2)
source = ParquetSource.open(Path(sys.argv[1]), settings)
base = hwm()
rows = sum(len(block[0]) for _, block, _, _, _ in source.chunks(4096, settings))
print(rows, pa.default_memory_pool().max_memory(), hwm() - base)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc")
def test_what_the_parquet_reader_holds_does_not_grow_with_the_file(tmp_path):
    """One row group each (pyarrow read whole column chunks, and pre-buffered every row group): 12 MB and 94 MB."""
    peaks = {}
    for rows in (50_000, 400_000):
        path = tmp_path / f"{rows}.parquet"
        pq.write_table(pa.table({"obs": fixed(huggy_obs(rows))}), path, row_group_size=rows)
        done = subprocess.run(
            [sys.executable, "-c", READ_PEAK, str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(PYTHONPATH=str(ROOT)),
        )
        assert done.returncode == 0, done.stderr
        read, pool, rss = map(int, done.stdout.split())
        assert read == rows
        peaks[rows] = pool, rss
        path.unlink()
    (small_pool, small_rss), (big_pool, big_rss) = peaks[50_000], peaks[400_000]
    assert big_pool - small_pool < 8 << 20, peaks  # the file grew by 82 MB
    assert big_rss - small_rss < 32 << 20, peaks


def test_a_fifo_named_parquet_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.parquet")
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"obs": fixed(huggy_obs(10))}), folder / "a.parquet")
    os.mkfifo(folder / "b.parquet")
    program = f"""
import contextlib, io, json, sys
sys.path.insert(0, {str(ROOT)!r})
import inference
answers = []
for source in {[str(tmp_path / "x.parquet"), str(folder)]!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = inference.main(["--mode", "batch", "--obs-file", source, "--model-dir", {str(BUNDLED)!r}])
    answers.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(answers))
"""
    try:  # (a process of its own, killed if it blocks)
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=180, env=child_env()
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("--obs-file blocked on a FIFO")
    assert done.returncode == 0, done.stderr[-2000:]
    for result in json.loads(done.stdout):
        refused(result, "not a regular file")


# --- duplicate and undecodable column names; several row groups and files -----------------------------------


def test_duplicate_and_undecodable_column_names_are_refused(capsys, tmp_path):
    obs = fixed(huggy_obs(20))
    pq.write_table(pa.Table.from_arrays([obs, obs], names=["obs", "obs"]), tmp_path / "two_obs.parquet")
    refused(
        run(capsys, "--mode", "batch", "--obs-file", tmp_path / "two_obs.parquet", "--model-dir", BUNDLED),
        "'obs' more than once",
    )
    steps = pa.array(range(20))
    pq.write_table(pa.Table.from_arrays([obs, steps, steps], names=["obs", "step", "step"]), tmp_path / "steps.parquet")
    refused(
        run(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            tmp_path / "steps.parquet",
            "--output",
            tmp_path / "o.parquet",
            "--keep-columns",
            "step",
            "--model-dir",
            BUNDLED,
        ),
        "'step' more than once",
    )
    odd = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"obs": obs, "colAAA": steps}), odd, store_schema=False)
    odd.write_bytes(odd.read_bytes().replace(b"colAAA", b"col\xff\xfe\xfd"))
    refused(
        run(capsys, "--mode", "batch", "--obs-file", odd, "--output", tmp_path / "o.parquet", "--model-dir", BUNDLED),
        "odd.parquet",
        "not a readable Parquet file",
    )
    assert not (tmp_path / "o.parquet").exists() and leftovers(tmp_path) == []


def test_a_whole_file_still_reads_right(capsys, tmp_path):
    """The reader's options (no pre-buffering, a 1 MiB buffer, checksums) over several row groups and files."""
    obs = huggy_obs(3000, 9)
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(
        pa.table({"obs": fixed(obs[:1700])}),
        folder / "a.parquet",
        row_group_size=500,
        **({"write_page_checksum": True} if CHECKSUMS else {}),
    )
    pq.write_table(pa.table({"obs": fixed(obs[1700:])}), folder / "b.parquet", row_group_size=1000)
    code, out, err = run(
        capsys,
        "--mode",
        "batch",
        "--obs-file",
        folder,
        "--output",
        tmp_path / "out.npy",
        "--chunk",
        "384",
        "--model-dir",
        BUNDLED,
    )
    assert code == 0, err
    assert np.abs(np.load(tmp_path / "out.npy") - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
