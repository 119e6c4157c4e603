"""Hostile and unlucky input, round four (issue 26), files: one same-file rule for every input (files,
folders, links), uint8 camera frames in Parquet read as pixels, --mask with --obs-file, a Parquet
footer's row count held to the rows read, page checksums, a reader's memory bound independent of the
file's size, FIFOs named .parquet, duplicate and non-UTF-8 column names. Each refusal: exit 2 and one
line on stderr, the input unchanged, nothing left behind."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import BUNDLED

import inference as I
from mlagents_inference.outputs import refuse_same_file

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
