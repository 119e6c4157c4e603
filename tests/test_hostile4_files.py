"""Hostile and unlucky input, round four (issue 26), files: one same-file rule for every input (files,
folders, links), uint8 camera frames in Parquet read as pixels, --mask with --obs-file, a Parquet
footer's row count held to the rows read, page checksums, a reader's memory bound independent of the
file's size, FIFOs named .parquet, duplicate and non-UTF-8 column names. Each refusal: exit 2 and one
line on stderr, the input unchanged, nothing left behind."""
import inspect
import os
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import BUNDLED, BUNDLED_ONNX, EXAMPLES, ROOT, child_env, cli, ort_deterministic

import inference as I
from mlagents_inference.core.files import refuse_same_file

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CHECKSUMS = "page_checksum_verification" in inspect.signature(pq.ParquetFile).parameters  # pyarrow 15 and later


def run(capsys, *args):
    code = I.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def refused(result, *words) -> str:
    code, _, err = result
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert all(word in err for word in words), (words, err)
    return lines[0]


def leftovers(folder) -> list:
    return sorted(p.name for p in folder.rglob(".*tmp*"))


def fixed(values: np.ndarray):
    values = np.ascontiguousarray(values).reshape(len(values), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def huggy_obs(rows: int, seed: int = 0) -> np.ndarray:
    return (np.random.RandomState(seed).randn(rows, 59) * 2).astype(np.float32)


def column(table, name) -> np.ndarray:
    return np.stack(table.column(name).to_numpy(zero_copy_only=False))


# --- 4. one same-file rule: the input file, a file inside an input folder, a link to either -------

def test_output_inside_an_input_folder_or_behind_a_link_is_refused(capsys, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"obs": fixed(huggy_obs(50))}), data / "a.parquet")
    pq.write_table(pa.table({"obs": fixed(huggy_obs(30, 1))}), tmp_path / "real.parquet")
    (data / "b.parquet").symlink_to(tmp_path / "real.parquet")  # an input of the folder, stored outside it
    (tmp_path / "to_a.parquet").symlink_to(data / "a.parquet")
    os.link(data / "a.parquet", tmp_path / "hard_a.parquet")
    (tmp_path / "via").symlink_to(data)
    before = {p: p.read_bytes() for p in (data / "a.parquet", tmp_path / "real.parquet")}
    targets = [data / "a.parquet", data / "new.parquet", data / "new.npz", data / "b.parquet", tmp_path / "real.parquet",
               tmp_path / "to_a.parquet", tmp_path / "hard_a.parquet", tmp_path / "via" / "a.parquet",
               data / ".." / "data" / "x.npy"]
    for target in targets:
        for source in (data, tmp_path / "via"):
            refused(run(capsys, "--mode", "batch", "--obs-file", source, "--output", target, "--model-dir", BUNDLED),
                    "--output", "input")
        assert not (data / "new.parquet").exists() and not (data / "new.npz").exists()
    refused(run(capsys, "--mode", "batch", "--obs-file", tmp_path / "real.parquet", "--output", data / "b.parquet",
                "--model-dir", BUNDLED), "is the input file")
    assert {p: p.read_bytes() for p in before} == before
    assert leftovers(tmp_path) == []
    code, _, err = run(capsys, "--mode", "batch", "--obs-file", data, "--output", tmp_path / "out.parquet",
                       "--model-dir", BUNDLED)  # beside the folder: written
    assert code == 0, err
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 80


def test_refuse_same_file_takes_folders(tmp_path):
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    refuse_same_file(tmp_path / "out.npz", [folder])
    refuse_same_file(tmp_path / "in2" / "out.npz", [folder])  # a name that only starts like the folder's
    for output in (folder, folder / "out.npz", folder / "sub" / "out.npz", tmp_path / "x" / ".." / "in" / "o.npy"):
        with pytest.raises(I.UsageError, match="input folder"):
            refuse_same_file(output, [folder])


# --- 5. uint8 camera frames in Parquet are pixels, as in .npz, image files and act() ---------------

def test_uint8_frames_in_parquet_are_scaled_as_everywhere_else(capsys, tmp_path):
    import onnxruntime as ort
    rng = np.random.RandomState(5)
    pixels = rng.randint(0, 256, (40, 3, 36, 36)).astype(np.uint8)
    vector = rng.randn(40, 5).astype(np.float32)
    session = ort.InferenceSession(str(EXAMPLES / "visual-simple" / "VisualSimple.onnx"), providers=["CPUExecutionProvider"])
    want = session.run(["deterministic_continuous_actions"], {"obs_0": pixels.astype(np.float32) / 255, "obs_1": vector})[0]
    nested = pa.array(pixels.tolist(), type=pa.list_(pa.list_(pa.list_(pa.uint8()))))
    pq.write_table(pa.table({"obs_0": nested, "obs_1": fixed(vector)}), tmp_path / "nested.parquet")
    pq.write_table(pa.table({"obs_0": fixed(pixels), "obs_1": fixed(vector)}), tmp_path / "flat.parquet")
    np.savez(tmp_path / "frames.npz", obs_0=pixels, obs_1=vector)
    for source in ("nested.parquet", "flat.parquet", "frames.npz"):
        target = tmp_path / f"out-{source}.parquet"
        code, _, err = run(capsys, "--mode", "batch", "--obs-file", tmp_path / source, "--output", target,
                           "--model-dir", EXAMPLES / "visual-simple")
        assert code == 0, err
        assert np.abs(column(pq.read_table(target), "continuous_actions") - want).max() <= 1e-5, source


# --- 6. --mask applies with --obs-file, or is refused beside the file's own masks ------------------

def test_mask_applies_to_every_row_of_an_obs_file(capsys, tmp_path):
    import onnxruntime as ort
    obs = (np.random.RandomState(2).randn(200, 12) * 2).astype(np.float32)
    pq.write_table(pa.table({"obs": fixed(obs)}), tmp_path / "obs.parquet")
    np.savez(tmp_path / "obs.npz", obs=obs)
    session = ort.InferenceSession(str(EXAMPLES / "hybrid" / "Hybrid.onnx"), providers=["CPUExecutionProvider"])
    free = session.run(["deterministic_discrete_actions"], {"obs_0": obs, "action_masks": np.ones((200, 2), np.float32)})[0]
    assert (free == 1).any()  # the mask below changes rows
    for source in ("obs.parquet", "obs.npz"):
        target = tmp_path / f"out-{source}.npz"
        code, _, err = run(capsys, "--mode", "batch", "--obs-file", tmp_path / source, "--output", target, "--mask", "1,0",
                           "--model-dir", EXAMPLES / "hybrid")
        assert code == 0, err
        assert (np.load(target)["discrete_actions"] == 0).all(), source
    masks = np.ones((200, 2), np.int64)
    pq.write_table(pa.table({"obs": fixed(obs), "action_masks": fixed(masks)}), tmp_path / "held.parquet")
    np.savez(tmp_path / "held.npz", obs=obs, action_masks=masks)
    for source in ("held.parquet", "held.npz"):
        refused(run(capsys, "--mode", "batch", "--obs-file", tmp_path / source, "--mask", "1,0",
                    "--model-dir", EXAMPLES / "hybrid"), "--mask", "action_masks")
    np.save(tmp_path / "huggy.npy", huggy_obs(10))
    refused(run(capsys, "--mode", "batch", "--obs-file", tmp_path / "huggy.npy", "--mask", "1,0", "--model-dir", BUNDLED),
            "--mask", "no discrete actions")


# --- 7. a Parquet footer's row count is held to the rows read ---------------------------------------

def tampered(path, rows: int, file_rows: int, group_rows: int):
    """`path` (one row group of `rows` rows) with the footer's row counts replaced: the file's and the row group's
    (two-byte zigzag varints in the Thrift footer, found by trying each place that holds `rows`)."""
    def varint(n: int) -> bytes:
        z = 2 * n
        assert 128 <= z < 1 << 14
        return bytes([0x80 | z & 0x7F, z >> 7])
    data = path.read_bytes()
    end = len(data) - 8
    start = end - struct.unpack("<i", data[end:end + 4])[0]
    places = [i for i in range(start, end - 1) if data[i:i + 2] == varint(rows)]
    out = data
    for place in places:
        trial = data[:place] + varint(rows + 1) + data[place + 2:]
        path.write_bytes(trial)
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows != rows:
            out = out[:place] + varint(file_rows) + out[place + 2:]
        elif meta.row_group(0).num_rows != rows:
            out = out[:place] + varint(group_rows) + out[place + 2:]
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
        refused(run(capsys, "--mode", "batch", "--obs-file", source, "--output", tmp_path / target, "--chunk", "256",
                    "--model-dir", BUNDLED), "footer says")
        assert not (tmp_path / target).exists()
    refused(run(capsys, "--mode", "batch", "--obs-file", source, "--model-dir", BUNDLED), "footer says")
    assert leftovers(tmp_path) == []


# --- 8. page checksums are verified -------------------------------------------------------------------

def test_a_flipped_byte_in_a_checksummed_page_is_refused(capsys, tmp_path):
    if not CHECKSUMS:
        pytest.skip("this pyarrow cannot verify page checksums (pyarrow 15 and later)")
    obs = huggy_obs(100, 6)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"obs": fixed(obs)}), source, write_page_checksum=True, compression="none",
                   use_dictionary=False)
    data = bytearray(source.read_bytes())
    where = bytes(data).index(obs[50, 7].tobytes())
    data[where + 1] ^= 0x40  # one value a little changed: still a finite float
    source.write_bytes(bytes(data))
    refused(run(capsys, "--mode", "batch", "--obs-file", source, "--output", tmp_path / "out.npy", "--model-dir", BUNDLED),
            "--obs-file", "in.parquet")
    assert not (tmp_path / "out.npy").exists() and leftovers(tmp_path) == []


# --- 9. what a reader holds does not grow with the file ----------------------------------------------

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
        done = subprocess.run([sys.executable, "-c", READ_PEAK, str(path)], capture_output=True, text=True, timeout=300,
                              env=child_env(PYTHONPATH=str(ROOT)))
        assert done.returncode == 0, done.stderr
        read, pool, rss = map(int, done.stdout.split())
        assert read == rows
        peaks[rows] = pool, rss
        path.unlink()
    (small_pool, small_rss), (big_pool, big_rss) = peaks[50_000], peaks[400_000]
    assert big_pool - small_pool < 8 << 20, peaks  # the file grew by 82 MB
    assert big_rss - small_rss < 32 << 20, peaks


# --- 10. a FIFO named .parquet, given or inside a folder, is refused and never blocks ---------------

def test_a_fifo_named_parquet_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.parquet")
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"obs": fixed(huggy_obs(10))}), folder / "a.parquet")
    os.mkfifo(folder / "b.parquet")
    for source in (tmp_path / "x.parquet", folder):
        try:
            done = cli("--mode", "batch", "--obs-file", source, "--model-dir", BUNDLED, timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"--obs-file {source} blocked")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "not a regular file" in lines[0], done.stderr


# --- 11. duplicate and non-UTF-8 column names ----------------------------------------------------------

def test_duplicate_and_undecodable_column_names_are_refused(capsys, tmp_path):
    obs = fixed(huggy_obs(20))
    pq.write_table(pa.Table.from_arrays([obs, obs], names=["obs", "obs"]), tmp_path / "two_obs.parquet")
    refused(run(capsys, "--mode", "batch", "--obs-file", tmp_path / "two_obs.parquet", "--model-dir", BUNDLED),
            "'obs' more than once")
    steps = pa.array(range(20))
    pq.write_table(pa.Table.from_arrays([obs, steps, steps], names=["obs", "step", "step"]), tmp_path / "steps.parquet")
    refused(run(capsys, "--mode", "batch", "--obs-file", tmp_path / "steps.parquet", "--output", tmp_path / "o.parquet",
                "--keep-columns", "step", "--model-dir", BUNDLED), "'step' more than once")
    odd = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"obs": obs, "colAAA": steps}), odd, store_schema=False)
    odd.write_bytes(odd.read_bytes().replace(b"colAAA", b"col\xff\xfe\xfd"))
    refused(run(capsys, "--mode", "batch", "--obs-file", odd, "--output", tmp_path / "o.parquet", "--model-dir", BUNDLED),
            "odd.parquet", "not a readable Parquet file")
    assert not (tmp_path / "o.parquet").exists() and leftovers(tmp_path) == []


def test_a_whole_file_still_reads_right(capsys, tmp_path):
    """The reader's options (no pre-buffering, a 1 MiB buffer, checksums) over several row groups and files."""
    obs = huggy_obs(3000, 9)
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"obs": fixed(obs[:1700])}), folder / "a.parquet", row_group_size=500,
                   **({"write_page_checksum": True} if CHECKSUMS else {}))
    pq.write_table(pa.table({"obs": fixed(obs[1700:])}), folder / "b.parquet", row_group_size=1000)
    code, out, err = run(capsys, "--mode", "batch", "--obs-file", folder, "--output", tmp_path / "out.npy", "--chunk", "384",
                         "--model-dir", BUNDLED)
    assert code == 0, err
    assert np.abs(np.load(tmp_path / "out.npy") - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
