"""Policies from an ONNX alone (issue 26): a graph that a walk could loop in is refused in one line, never a hang;
--onnx given a FIFO or a folder says what it is."""
import os

import onnx
import pytest
from conftest import EXAMPLES, call, cli
from onnx import helper

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def example(kind: str):
    return next((EXAMPLES / kind).glob("*.onnx"))


def edited(kind_or_path, tmp_path, edit, name: str = "edited.onnx"):
    """A copy of an example's ONNX with `edit(graph)` applied (still a valid ONNX file)."""
    model = onnx.load(str(example(kind_or_path) if isinstance(kind_or_path, str) else kind_or_path))
    edit(model.graph)
    onnx.save(model, str(tmp_path / name))
    return tmp_path / name


def node(graph, op: str, *, reads: str = "", writes: str = ""):
    return next(n for n in graph.node if n.op_type == op and any(reads in i for i in n.input)
                and any(writes in o for o in n.output))


# --- 10. a graph a walk could loop in ------------------------------------------------------------------

def cycle(g):  # the body's first layer fed from its last
    node(g, "Gemm", reads="seq_layers.0.weight").input[0] = node(g, "Mul", writes="seq_layers.3/Mul").output[0]


def written_twice(g):  # the first layer's output written again, from the last layer's
    g.node.append(helper.make_node("Sigmoid", [node(g, "Mul", writes="seq_layers.3/Mul").output[0]],
                                   [node(g, "Gemm", reads="seq_layers.0.weight").output[0]]))


@pytest.mark.parametrize("edit, words", [(cycle, "which no node before it writes"), (written_twice, "a second time")])
def test_a_graph_with_a_cycle_is_refused_in_one_line_never_a_hang(tmp_path, edit, words):
    path = edited("vector", tmp_path, edit)
    for mode in ("info", "action"):
        r = cli("--mode", mode, "--onnx", path, timeout=60)  # (it looped for ever before)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr


# --- 17. --onnx names what the path is --------------------------------------------------------------

def test_onnx_given_a_fifo_or_a_folder_says_what_it_is(capsys, tmp_path):
    os.mkfifo(tmp_path / "pipe.onnx")
    (tmp_path / "folder.onnx").mkdir()
    for name, words in (("pipe.onnx", "not a regular file"), ("folder.onnx", "is a folder"), ("absent.onnx", "no such file")):
        code, _, err = call(capsys, "--mode", "info", "--onnx", tmp_path / name)
        assert code == 2 and err.strip() == f"error: --onnx {tmp_path / name}: {words}", err


