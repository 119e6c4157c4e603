"""README.md and docs/ as a newcomer reads them in a clean clone: every command that names the
repository's files runs and ends as the text says, README stays a first page, and no page points
outside the repository.

Which commands run: the lines of ```bash blocks that start with `python inference.py`,
`python -c`, `cp` or `printf` (continuations joined), and inline `python inference.py …` spans,
unless they hold a placeholder (DIR, FILE, …, [--option], /data/...). A trailing `# exit N` gives
the exit code the text promises (default 0). Each page's commands run in order in a folder of
their own that links the repository's top-level entries, so the files a page tells the reader to
make land there. Runs of plain `python inference.py ARGS` lines go through one interpreter each
(`inference.main(ARGS)` per line, in that folder): the process boundary is not what is tested
here, and one torch import per run instead of per line keeps the file near a minute on 2 cores.
Pipes and the other lines run in bash, with `python` meaning this interpreter."""
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, child_env

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUNS = re.compile(r"^(python (inference\.py|-c)|cp|printf)$")
PLACEHOLDER = re.compile(r"\b(DIR|FILE|REPO_ID|HEX|MODE|ARGS)\b|…|\[(--|options)|/data/|path/to")
PROMISED_EXIT = re.compile(r"#\s*exit (\d+)")
SHELL_OPERATOR = re.compile(r"^[();<>|&]+$")
FENCE = re.compile(r"^\s*```(\S*)\s*$")
INLINE = re.compile(r"`(python inference\.py[^`]*)`")
# written by another change (the Python API page); linked from README before it lands
PAGES_WRITTEN_ELSEWHERE = {"docs/python-api.md", "docs/serve.md"}  # (serve.md: issue 27, the socket server)


def tokens(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def commands(page: Path) -> list[tuple[int, str]]:
    """(line number, command) in reading order: bash-block lines and inline spans."""
    found, lang, pending, start = [], None, "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            lang = (fence.group(1) or "text") if lang is None else None
            continue
        if lang in ("bash", "sh"):
            start = start or number
            text = pending + line.strip()
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            if text:
                found.append((start, text))
            pending, start = "", 0
        elif lang is None:
            found.extend((number, span) for span in INLINE.findall(line))
    return found


def runnable(text: str) -> bool:
    words = tokens(text)
    head = " ".join(words[:2]) if words[:1] == ["python"] else words[0] if words else ""
    return bool(RUNS.match(head)) and not PLACEHOLDER.search(" ".join(words))


def plain_inference(text: str) -> bool:
    words = tokens(text)
    return words[:2] == ["python", "inference.py"] and not any(SHELL_OPERATOR.match(w) for w in words)


def promised_exit(text: str) -> int:
    match = PROMISED_EXIT.search(text)
    return int(match.group(1)) if match else 0


RUN_MAIN = r"""
import contextlib, io, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import inference

results = []
for argv in json.load(sys.stdin):
    out, err, t0 = io.StringIO(), io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = inference.main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue(), "seconds": time.perf_counter() - t0})
print(json.dumps(results))
"""


def workspace(base: Path, page: Path) -> tuple[Path, dict]:
    """A folder linking the repository's top-level entries, and an environment in which
    `python` is this interpreter."""
    folder = base / page.stem
    folder.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "logs") and not entry.name.startswith("."):
            (folder / entry.name).symlink_to(entry)
    bin_dir = base / f"{page.stem}-bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = child_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder, env


def run_page(base: Path, page: Path) -> list[dict]:
    """Run a page's commands in order; one record per command."""
    folder, env = workspace(base, page)
    todo = [(n, text) for n, text in commands(page) if runnable(text)]
    records, i = [], 0
    while i < len(todo):
        if plain_inference(todo[i][1]):
            batch = []
            while i < len(todo) and plain_inference(todo[i][1]):
                batch.append(todo[i])
                i += 1
            done = subprocess.run([sys.executable, "-c", RUN_MAIN, str(ROOT)], cwd=folder, env=env, text=True,
                                  input=json.dumps([tokens(text)[2:] for _, text in batch]),
                                  capture_output=True, timeout=600)
            assert done.returncode == 0, f"{page.name}: the runner failed: {done.stderr[-2000:]}"
            results = json.loads(done.stdout.splitlines()[-1])
            records += [{"line": n, "command": text, **r} for (n, text), r in zip(batch, results)]
        else:
            n, text = todo[i]
            i += 1
            t0 = time.perf_counter()
            done = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=folder, env=env, text=True,
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
            records.append({"line": n, "command": text, "code": done.returncode, "out": done.stdout,
                            "err": done.stderr, "seconds": time.perf_counter() - t0})
    return records


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every page's commands, pages side by side (two at a time), the longest first."""
    base = tmp_path_factory.mktemp("pages")
    order = sorted(PAGES, key=lambda p: -sum(runnable(t) for _, t in commands(p)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {page: pool.submit(run_page, base, page) for page in order}
        return {page: future.result() for page, future in futures.items()}


def problems(records: list[dict]) -> list[str]:
    found = []
    for r in records:
        want = promised_exit(r["command"])
        said = [line for line in r["err"].splitlines() if line.strip() and not line.startswith("[note]")]
        if r["code"] != want:
            found.append(f"line {r['line']}: exit {r['code']}, the text says {want}: {r['command']}\n{r['err'][-800:]}")
        elif "Traceback" in r["err"]:
            found.append(f"line {r['line']}: a traceback: {r['command']}\n{r['err'][-800:]}")
        elif want == 2 and not (len(said) == 1 and said[0].startswith("error: ")):
            found.append(f"line {r['line']}: exit 2 without one 'error:' line: {r['command']}\n{r['err'][-800:]}")
        elif want == 0 and r["command"].startswith("python inference.py") and not r["out"].strip():
            found.append(f"line {r['line']}: printed nothing: {r['command']}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_command_on_the_page_ends_as_the_text_says(ran, page):
    records = ran[page]
    assert not problems(records), "\n".join(problems(records))


def test_the_commands_cover_every_example_folder_and_the_bundled_sample(ran):
    """README's table runs each examples/ folder; the bundled default runs too."""
    readme = [" ".join(tokens(r["command"])) for r in ran[README]]
    for folder in sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()):
        if any(folder.glob("*/*.pt")):  # a run folder
            assert f"python inference.py --mode onnx-compare --model-dir examples/{folder.name}" in readme, folder
        else:  # ONNX files alone, one per interface
            for onnx_file in sorted(folder.glob("*.onnx")):
                assert f"python inference.py --mode onnx-compare --onnx examples/{folder.name}/{onnx_file.name}" \
                    in readme, onnx_file
    assert "python inference.py --mode info" in readme and "python inference.py --mode onnx-compare" in readme
    assert sum(len(records) for records in ran.values()) >= 60  # the extraction found the pages' commands


def test_the_extraction_finds_blocks_spans_continuations_and_promised_exits(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text `python inference.py --mode info` and `python inference.py --model-dir DIR`\n"
                    "```bash\npip install -r requirements.txt\nprintf 'a\\n' \\\n  | python inference.py --mode stream\n"
                    "python inference.py --mode action --mask 1,0   # exit 2: no discrete actions\n```\n"
                    "  ```bash\n  cp a b\n  ```\n```\npython inference.py --mode sample\n```\n")
    found = commands(page)
    assert [n for n, _ in found] == [1, 1, 3, 4, 6, 9]  # not the block without a language
    run = [text for _, text in found if runnable(text)]
    assert run == ["python inference.py --mode info", "printf 'a\\n' | python inference.py --mode stream",
                   "python inference.py --mode action --mask 1,0   # exit 2: no discrete actions", "cp a b"]
    assert [plain_inference(t) for t in run] == [True, False, True, False]
    assert [promised_exit(t) for t in run] == [0, 0, 2, 0]
    assert tokens(run[2])[2:] == ["--mode", "action", "--mask", "1,0"]


def test_problems_catches_a_wrong_exit_a_traceback_and_a_wordy_refusal():
    base = {"line": 1, "out": "x\n", "err": ""}
    assert problems([{**base, "command": "python inference.py --mode info", "code": 0}]) == []
    assert problems([{**base, "command": "python inference.py --mode info", "code": 2}])
    assert problems([{**base, "command": "python inference.py --mode info", "code": 0, "err": "Traceback (most"}])
    assert problems([{**base, "command": "python inference.py --mask 1   # exit 2", "code": 2, "err": "a\nb\n"}])
    assert problems([{**base, "command": "python inference.py --mask 1   # exit 2", "code": 2,
                      "err": "[note] bundled sample\nerror: --mask: this policy has no discrete actions\n"}]) == []
    assert problems([{**base, "command": "python inference.py --mode info", "code": 0, "out": ""}])


# ----------------------------------------------------------------------------------------
# The pages themselves
# ----------------------------------------------------------------------------------------

def test_modes_md_has_a_section_for_every_mode_and_readme_links_every_page():
    from mlagents_inference.fronts.cli import MODES
    headings = set(re.findall(r"^## `([a-z-]+)`", (ROOT / "docs" / "modes.md").read_text(encoding="utf-8"), re.M))
    assert set(MODES) <= headings, sorted(set(MODES) - headings)
    readme = README.read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, page.name


def test_readme_is_a_first_page():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_no_page_points_outside_the_repository():
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            assert "../shared" not in line and "shared/fixtures" not in line, f"{page.name}:{number}: {line}"


def test_no_line_is_longer_than_200_characters():
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            assert len(line) <= 200, f"{page.name}:{number}: {len(line)} characters"


def test_the_set_up_truth_comes_before_the_set_up_command():
    text = README.read_text(encoding="utf-8")
    command = text.index("```bash\npip install -r requirements.txt")
    for warning in ("CUDA 13", "several GB", "download.pytorch.org/whl/cpu", "requirements-ascend.txt",
                    "--system-site-packages"):
        assert -1 < text.find(warning) < command, warning


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_and_anchor_exists():
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+://", target):
                    continue
                path, _, anchor = target.partition("#")
                file = (page.parent / path).resolve() if path else page
                if str(file.relative_to(ROOT)) in PAGES_WRITTEN_ELSEWHERE and not file.exists():
                    continue
                assert file.exists(), f"{page.name}:{number}: {target}"
                if anchor and file.suffix == ".md":
                    headings = [slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.M)]
                    assert anchor in headings, f"{page.name}:{number}: #{anchor} not among {headings}"


def test_the_readme_python_example_prints_what_the_readme_shows(tmp_path):
    """README's ten lines of Python, run from the repository folder, print the block after them."""
    text = README.read_text(encoding="utf-8")
    code, shown = re.search(r"```python\n(.*?)```\s*```\n(.*?)```", text, re.S).groups()
    folder, env = workspace(tmp_path, README)
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == shown.split()
