"""README.md and docs/ as a newcomer reads them in a clean clone: every command that names the
repository's files runs and ends as the text says, every example output is what the program
prints, every repository path a page names exists, README stays a first page, and no page points
outside the repository.

Which commands run: the lines of ```bash blocks that start with `python inference.py`,
`python -c`, `cp`, `mkdir` or `printf` (continuations joined), the `$ ` lines of ```console
blocks, and inline `python inference.py …` spans, unless they hold a placeholder (DIR, FILE, …,
[--option], /data/...). A trailing `# exit N` gives the exit code the text promises (default 0).

Example outputs: in a ```console block, the lines after a `$ ` command (up to the next one) are
what it prints, stdout and stderr as a terminal shows them. In those lines `…` stands for any
text within the line (timings, versions, paths), and a line that is `…` alone for any number of
lines. A `<!-- without torch -->` line just before the block runs its `python inference.py` and
`mlagents-infer` commands as the torch-free install does (tests/no_torch.py).

Each page's commands run in order in a folder of their own that links the repository's top-level
entries, so the files a page tells the reader to make land there. The plain `python inference.py ARGS`
lines go through one interpreter for each of the two threads that run the pages (`inference.main(ARGS)` per
line, in the page's folder, stdin at its end): the process boundary is not what is tested here, and two
torch imports instead of one per line keep the file near a minute on 2 cores. Pipes and the other lines
run in bash, with `python` meaning this interpreter, stderr merged into stdout."""

import concurrent.futures
import json
import os
import queue
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, child_env

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUNS = re.compile(r"^(python (inference\.py|-c|tests/no_torch\.py)|cp|mkdir|printf)$")
PLACEHOLDER = re.compile(r"\b(DIR|FILE|REPO_ID|HEX|MODE|ARGS)\b|…|\[(--|options)|/data/|path/to")
PROMISED_EXIT = re.compile(r"#\s*exit (\d+)")
SHELL_OPERATOR = re.compile(r"^[();<>|&]+$")
FENCE = re.compile(r"^\s*```(\S*)\s*$")
INLINE = re.compile(r"`(python inference\.py[^`]*)`")
WITHOUT_TORCH = "<!-- without torch -->"
PROGRAM = re.compile(r"^(python inference\.py|mlagents-infer)(?=\s|$)")
ELLIPSIS = "…"
# Files named by the pages that a change on another branch adds (the package restructure's tool).
FILES_WRITTEN_ELSEWHERE = {"tools/compare_behaviour.py"}


def tokens(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def read_blocks(page: Path) -> tuple[list[tuple[int, str]], dict[int, list[str]]]:
    """(commands, example outputs): the commands in reading order as (line number, command), from
    bash blocks, console blocks' `$ ` lines and inline spans; and for each console command with
    lines after it, those lines (what the page says it prints), by the command's line number."""
    found, shown, lang, pending, start, torch_free, previous, indent = [], {}, None, "", 0, False, "", ""
    current = None  # the output lines of the console command being read
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            if lang is None:  # (a block inside a list item is indented: its lines lose the fence's indent)
                lang, torch_free = (fence.group(1) or "text"), previous.strip() == WITHOUT_TORCH
                indent = line[: len(line) - len(line.lstrip())]
            else:
                lang, current = None, None
            previous = line
            continue
        previous = line
        if lang in ("bash", "sh") or (lang == "console" and (pending or line.lstrip().startswith("$ "))):
            if lang == "console" and not pending:
                line = line.lstrip()[2:]
            start = start or number
            text = pending + line.strip()
            if text.endswith("\\"):
                pending = text[:-1]
                continue
            if text and lang == "console" and torch_free:
                text = PROGRAM.sub("python tests/no_torch.py", text)
            if text:
                found.append((start, text))
                if lang == "console":
                    current = shown.setdefault(start, [])
            pending, start = "", 0
        elif lang == "console" and current is not None:
            current.append(line[len(indent) :] if line.startswith(indent) else line)
        elif lang is None:
            found.extend((number, span) for span in INLINE.findall(line))
    return found, trimmed(shown)


def trimmed(shown: dict) -> dict:
    """Each command's output lines without the blank lines around them; commands that show none left out."""
    outputs = {}
    for n, lines in shown.items():
        while lines and not lines[-1].strip():
            lines = lines[:-1]
        while lines and not lines[0].strip():
            lines = lines[1:]
        if lines:
            outputs[n] = lines
    return outputs


def commands(page: Path) -> list[tuple[int, str]]:
    """(line number, command) in reading order: bash-block lines, console `$ ` lines and inline spans."""
    return read_blocks(page)[0]


def shown_outputs(page: Path) -> dict[int, list[str]]:
    """The example outputs of a page's console blocks, by their command's line number."""
    return read_blocks(page)[1]


FLOAT = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")  # a shown float: the printed one may round differently
FLOAT_TOLERANCE = (1e-5, 1e-6)  # relative, absolute: another CPU's last digits, never another answer


def output_matches(shown: list[str], printed: str) -> bool:
    """Whether a program's output is the one shown: line for line (trailing blanks aside), with `…`
    any text within a line and a line of `…` alone any number of lines. A float shown matches a printed
    float within FLOAT_TOLERANCE: sampled noise and float sums round differently on other CPU families
    (the same build printed -0.16342075 on one machine and -0.16342048 on another)."""
    pattern, floats = "", []

    def literal(part: str) -> str:
        out, at = "", 0
        for match in FLOAT.finditer(part):
            out += re.escape(part[at : match.start()]) + r"(-?\d+\.\d+(?:[eE][-+]?\d+)?)"
            floats.append(float(match.group()))
            at = match.end()
        return out + re.escape(part[at:])

    for line in (s.rstrip() for s in shown):
        if line.strip() == ELLIPSIS:
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += "[^\n]*".join(literal(part) for part in line.split(ELLIPSIS)) + r"\n"
    text = "".join(s.rstrip() + "\n" for s in printed.rstrip("\n").splitlines())
    match = re.fullmatch(pattern, text)
    if match is None:
        return False
    rel, tol = FLOAT_TOLERANCE
    return all(abs(float(got) - want) <= max(tol, rel * abs(want)) for got, want in zip(match.groups(), floats))


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

class Both(io.StringIO):  # one stream that also writes into the merged one, as a terminal shows both
    def __init__(self, merged):
        super().__init__()
        self.merged = merged

    def write(self, text):
        self.merged.write(text)
        return super().write(text)

requests = os.fdopen(os.dup(0), encoding="utf-8")  # the commands come on their own pipe; theirs is at its end
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
for request in requests:  # one run of commands a line (in the folder it names), answered by one line
    request = json.loads(request)
    os.chdir(request["cwd"])
    results = []
    for argv in request["argvs"]:
        both = io.StringIO()
        out, err, t0 = Both(both), Both(both), time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = inference.main(argv)
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else 2
        results.append({"code": code, "out": out.getvalue(), "err": err.getvalue(), "both": both.getvalue(),
                        "seconds": time.perf_counter() - t0})
    print(ANSWER + json.dumps(results), flush=True)
""".replace("ANSWER", repr("\0answer "))


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


class Runner:
    """One interpreter (RUN_MAIN) for the plain `python inference.py ARGS` lines of the pages one thread runs, started
    at the first of them: each run of such lines is sent as one request, with its page's folder, and answered by one
    line."""

    def __init__(self, base: Path, name: str, env: dict):
        self.env, self.proc, self.unread, self.errors = env, None, b"", base / f"{name}.err"

    def failed(self, why: str) -> str:
        return f"the runner {why}: {self.errors.read_text(errors='replace')[-2000:]}"

    def __call__(self, folder: Path, argvs: list, timeout: float = 600) -> list:
        if self.proc is None:
            with open(self.errors, "wb") as errors:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", RUN_MAIN, str(ROOT)],
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    bufsize=0,
                )
        self.proc.stdin.write(json.dumps({"cwd": str(folder), "argvs": argvs}).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" not in self.unread:
                ready = select.select([self.proc.stdout], [], [], max(0, deadline - time.monotonic()))[0]
                assert ready, self.failed(f"gave no answer in {timeout} s")
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                assert chunk, self.failed("ended")
                self.unread += chunk
            line, self.unread = self.unread.split(b"\n", 1)
            if line.startswith(b"\0answer "):  # (anything else a library wrote on the real stdout is not the answer)
                return json.loads(line[len(b"\0answer ") :])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            code = self.proc.wait(timeout=60)
            self.proc.stdout.close()
            assert code == 0, self.failed(f"exited {code}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_page(base: Path, page: Path, runner: Runner) -> list[dict]:
    """Run a page's commands in order (its plain inference.py lines through `runner`); one record per command."""
    folder, env = workspace(base, page)
    todo = [(n, text) for n, text in commands(page) if runnable(text)]
    records, i = [], 0
    while i < len(todo):
        if plain_inference(todo[i][1]):
            batch = []
            while i < len(todo) and plain_inference(todo[i][1]):
                batch.append(todo[i])
                i += 1
            results = runner(folder, [tokens(text)[2:] for _, text in batch])
            records += [{"line": n, "command": text, **r} for (n, text), r in zip(batch, results)]
        else:
            n, text = todo[i]
            i += 1
            t0 = time.perf_counter()
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text],
                cwd=folder,
                env={**env, "PYTHONUNBUFFERED": "1"},
                text=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=300,
            )  # (one pipe for both, unbuffered: the order a terminal shows)
            records.append(
                {
                    "line": n,
                    "command": text,
                    "code": done.returncode,
                    "out": done.stdout,
                    "err": done.stdout,
                    "both": done.stdout,
                    "seconds": time.perf_counter() - t0,
                }
            )
    return records


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every page's commands, pages side by side (two at a time, one runner each), the longest first."""
    base = tmp_path_factory.mktemp("pages")
    order = sorted(PAGES, key=lambda p: -sum(runnable(t) for _, t in commands(p)))
    runners = queue.SimpleQueue()
    made = [Runner(base, f"runner-{k}", child_env()) for k in range(2)]
    for runner in made:
        runners.put(runner)

    def page_on_a_runner(page: Path) -> list[dict]:
        runner = runners.get()
        try:
            return run_page(base, page, runner)
        finally:
            runners.put(runner)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = {page: pool.submit(page_on_a_runner, page) for page in order}
            done = {page: future.result() for page, future in futures.items()}
    except BaseException:
        for runner in made:
            runner.kill()
        raise
    for runner in made:
        runner.close()
    return done


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


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_example_output_is_what_the_program_prints(ran, page):
    by_line = {r["line"]: r for r in ran[page]}
    wrong = []
    for line, shown in shown_outputs(page).items():
        record = by_line.get(line)
        if record is None:
            wrong.append(f"line {line}: an output is shown for a command that is not run")
        elif not output_matches(shown, record["both"]):
            wrong.append(
                f"line {line}: {record['command']}\n--- the page shows:\n"
                + "\n".join(shown)
                + "\n--- it printed:\n"
                + record["both"][-3000:]
            )
    assert not wrong, "\n\n".join(wrong)


def test_the_commands_cover_every_example_folder_and_the_bundled_sample(ran):
    """README's table runs each examples/ folder; the bundled default runs too."""
    readme = [" ".join(tokens(r["command"])) for r in ran[README]]
    for folder in sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()):
        if any(folder.glob("*/*.pt")):  # a run folder
            assert f"python inference.py --mode onnx-compare --model-dir examples/{folder.name}" in readme, folder
        else:  # ONNX files alone, one per interface
            for onnx_file in sorted(folder.glob("*.onnx")):
                assert (
                    f"python inference.py --mode onnx-compare --onnx examples/{folder.name}/{onnx_file.name}" in readme
                ), onnx_file
    assert "python inference.py --mode info" in readme and "python inference.py --mode onnx-compare" in readme
    assert sum(len(records) for records in ran.values()) >= 60  # the extraction found the pages' commands


def test_the_extraction_finds_blocks_spans_continuations_and_promised_exits(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text `python inference.py --mode info` and `python inference.py --model-dir DIR`\n"
        "```bash\npip install -r requirements.txt\nprintf 'a\\n' \\\n  | python inference.py --mode stream\n"
        "python inference.py --mode action --mask 1,0   # exit 2: no discrete actions\n```\n"
        "  ```bash\n  cp a b\n  ```\n```\npython inference.py --mode sample\n```\n"
    )
    found = commands(page)
    assert [n for n, _ in found] == [1, 1, 3, 4, 6, 9]  # not the block without a language
    run = [text for _, text in found if runnable(text)]
    assert run == [
        "python inference.py --mode info",
        "printf 'a\\n' | python inference.py --mode stream",
        "python inference.py --mode action --mask 1,0   # exit 2: no discrete actions",
        "cp a b",
    ]
    assert [plain_inference(t) for t in run] == [True, False, True, False]
    assert [promised_exit(t) for t in run] == [0, 0, 2, 0]
    assert tokens(run[2])[2:] == ["--mode", "action", "--mask", "1,0"]


def test_console_blocks_give_commands_their_outputs_and_run_torch_free_where_marked(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ python -c 'print(1)'\n1\n$ cp a b\n$ printf 'x\\n' \\\n"
        '    | python inference.py --mode stream\n{"id": null, …}\n…\n\n```\n'
        "<!-- without torch -->\n```console\n$ mlagents-infer --mode info   # exit 2\nerror: …\n```\n"
        "```text\n$ python inference.py --mode info\n```\n"
    )
    found, shown = read_blocks(page)
    assert found == [
        (2, "python -c 'print(1)'"),
        (4, "cp a b"),
        (5, "printf 'x\\n' | python inference.py --mode stream"),
        (13, "python tests/no_torch.py --mode info   # exit 2"),
    ]
    assert shown == {2: ["1"], 5: ['{"id": null, …}', "…"], 13: ["error: …"]}
    assert [runnable(t) for _, t in found] == [True, True, True, True]
    assert [plain_inference(t) for _, t in found] == [False, False, False, False]
    page.write_text(
        "- a list item:\n\n  ```console\n  $ python inference.py --mode info   # exit 2\n  error: x\n    y\n  ```\n"
    )
    assert read_blocks(page) == ([(4, "python inference.py --mode info   # exit 2")], {4: ["error: x", "  y"]})


def test_output_matches_line_for_line_with_ellipses():
    printed = "[note] a\n[env] torch 2.13\n[env] numpy 2\nanswer = 0.5 after 1.2s\nSUCCESS\n"
    assert output_matches(["[note] a", "…", "answer = 0.5 after …s", "SUCCESS"], printed)
    assert output_matches(["…", "SUCCESS"], printed) and output_matches(["[note] …", "…"], printed)
    assert not output_matches(["[note] a", "answer = 0.5 after …s", "SUCCESS"], printed)  # lines left out unsaid
    assert not output_matches(["…", "answer = 0.6 after …s", "SUCCESS"], printed)
    assert not output_matches(["[note] a", "…"], "[note] ab\n")
    assert output_matches(["x  "], "x\n\n")


def test_output_matches_floats_within_another_cpus_rounding_only():
    printed = "sampled = [0.2957029, -0.16342048]\nerror = 4.7e-07\nsteps = 64\n"
    assert output_matches(["sampled = [0.2957028, -0.16342075]", "error = 5.1e-07", "steps = 64"], printed)
    assert not output_matches(["sampled = [0.2957028, -0.16352075]", "…"], printed)  # 1e-4 apart: another answer
    assert not output_matches(["sampled = [0.2957029, -0.16342048]", "error = 4.7e-05", "…"], printed)
    assert not output_matches(["…", "steps = 65"], printed)  # whole numbers stay exact


def test_problems_catches_a_wrong_exit_a_traceback_and_a_wordy_refusal():
    base = {"line": 1, "out": "x\n", "err": ""}
    assert problems([{**base, "command": "python inference.py --mode info", "code": 0}]) == []
    assert problems([{**base, "command": "python inference.py --mode info", "code": 2}])
    assert problems([{**base, "command": "python inference.py --mode info", "code": 0, "err": "Traceback (most"}])
    assert problems([{**base, "command": "python inference.py --mask 1   # exit 2", "code": 2, "err": "a\nb\n"}])
    assert (
        problems(
            [
                {
                    **base,
                    "command": "python inference.py --mask 1   # exit 2",
                    "code": 2,
                    "err": "[note] bundled sample\nerror: --mask: this policy has no discrete actions\n",
                }
            ]
        )
        == []
    )
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
    command = text.index("\npip install -r requirements.txt")  # (the CPU-only torch line may come first)
    for warning in (
        "CUDA 13",
        "several GB",
        "download.pytorch.org/whl/cpu",
        "requirements-ascend.txt",
        "--system-site-packages",
    ):
        assert -1 < text.find(warning) < command, warning


REPOSITORY_PATH = re.compile(
    r"(?<![\w./-])((?:\.ci|assets|docs|examples|tests|tools)/[\w./-]*"
    r"|(?:run_tests\.sh|inference\.py|pyproject\.toml|pytest\.ini|requirements(?:-\w+)?\.txt))"
    r"([<*]?)"
)


def named_paths(text: str) -> list[str]:
    """The repository paths a text names (folders, files), placeholders (`<kind>/`, `*.pt`) left out."""
    return [path.rstrip("./-") for path, placeholder in REPOSITORY_PATH.findall(text) if not placeholder]


def test_every_repository_path_a_page_names_exists():
    """README, docs/, examples/ READMEs and the requirements files name no file or folder the clone lacks."""
    texts = [
        *PAGES,
        *sorted((ROOT / "examples").rglob("README.md")),
        *sorted(ROOT.glob("requirements*.txt")),
        ROOT / "pyproject.toml",
    ]
    missing = []
    for page in texts:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for path in named_paths(line):
                if (
                    path not in FILES_WRITTEN_ELSEWHERE
                    and not (ROOT / path).exists()
                    and not (page.parent / path).exists()
                ):
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {path}")
    assert not missing, "\n".join(missing)


def test_named_paths_finds_files_and_folders_not_placeholders():
    assert named_paths("see `tools/bench_api.py`, examples/lstm/ and docs/serve.md#ray-serve; run_tests.sh") == [
        "tools/bench_api.py",
        "examples/lstm",
        "docs/serve.md",
        "run_tests.sh",
    ]
    assert named_paths("`examples/<kind>/` `tests/test_*.py` results/run/examples/x my_inference.py") == []


def test_every_tool_has_a_row_in_testing_md():
    table = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    for tool in sorted((ROOT / "tools").iterdir()):
        assert f"`tools/{tool.name}`" in table, tool.name


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
                assert file.exists(), f"{page.name}:{number}: {target}"
                if anchor and file.suffix == ".md":
                    headings = [slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.M)]
                    assert anchor in headings, f"{page.name}:{number}: #{anchor} not among {headings}"


def test_the_readme_python_example_prints_what_the_readme_shows(tmp_path):
    """README's ten lines of Python, run from the repository folder, print the block after them."""
    text = README.read_text(encoding="utf-8")
    code, shown = re.search(r"```python\n(.*?)```\s*```\n(.*?)```", text, re.S).groups()
    folder, env = workspace(tmp_path, README)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == shown.split()


def test_the_readme_python_example_says_where_it_runs_and_runs_there_once_installed(tmp_path):
    """README's Python block says it runs from the clone's root, and elsewhere after `pip install ".[torch]"` with the
    example's full path: run so from a folder outside the clone, with `inference` and its package where an install
    puts them (a folder of their own on the path, not the clone), it prints what the README shows."""
    text = README.read_text(encoding="utf-8")
    code, shown = re.search(r"```python\n(.*?)```\s*```\n(.*?)```", text, re.S).groups()
    says = code.splitlines()[0]
    assert says.startswith("# from the clone's root") and 'pip install ".[torch]"' in says, says
    site = tmp_path / "site-packages"
    site.mkdir()
    shutil.copy(ROOT / "inference.py", site / "inference.py")
    shutil.copytree(ROOT / "mlagents_inference", site / "mlagents_inference")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert '"examples/lstm"' in code
    code = code.replace('"examples/lstm"', repr(str(EXAMPLES / "lstm")))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        env=child_env(PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == shown.split()


# The modules whose module-level numbers bound what serve holds, takes or waits for (docs/serve.md's limits table)
BOUND_MODULES = (
    "fronts.serve",
    "fronts.serve_grpc",
    "fronts.serve_http",
    "fronts.ray_serve",
    "services.batcher",
    "services.serve_common",
    "services.open_inference",
    "services.protocol",
    "services.repository",
    "services.dataplane",
    "services.grpc_support",
    "loaders.run_folder",
)
NOT_BOUNDS = {  # numbers of those modules that bound nothing a client can hold
    "LINE_COST",  # what a waiting line counts beside its bytes (READ_BOUND's accounting)
    "RECENT_S",  # whether a V2 request gathers at all (the gather's bounds are in the table)
    "AWAITED_S",  # whether a line waits for lock-step connections at all (likewise)
    "ONNX_TOL",  # a verification's tolerance
    "SEED_MIN",  # a seed's range
    "SEED_END",
    "CONTROL",  # the relay's frames (services/grpc_support.py, --grpc-process on): a frame's kind, not a bound
    "CANCEL",
    "STOP",
}


def shown_value(name: str, value) -> str:
    """A bound's value as the limits table writes it: bytes in MiB, KiB or bytes, times in s or ms, counts with
    thousands separators."""
    if name.endswith("_S") or name.endswith("_s"):
        return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"
    if "BYTES" in name or "BOUND" in name or name == "READ_SIZE":
        if value % (1 << 20) == 0:
            return f"{value >> 20} MiB"
        return f"{value >> 10} KiB" if value % (1 << 10) == 0 and value >= 16 << 10 else f"{value:,} bytes"
    return f"{value:,}"


def limits_table() -> list:
    """docs/serve.md's limits table: its rows as (bound, default, option) cells."""
    text = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    table = text[text.index("| bound | default | option |") :].split("\n\n")[0].splitlines()[2:]
    return [tuple(cell.strip() for cell in row.strip("|").split(" | ")) for row in table]


def test_every_bound_of_serve_is_in_the_limits_table_with_its_default_and_its_option():
    """Each number that bounds serve (a module-level constant of BOUND_MODULES, the repository's settle_s and
    busy_s, each serve option the table names) has a row that names it, and that row's default is its value as the
    code has it (the table once lacked the repository calls, the versions, the rows of a V2 request, ...)."""
    import importlib
    import inspect

    from mlagents_inference.fronts.cli import build_parser
    from mlagents_inference.services.repository import Repository

    rows = limits_table()
    assert rows and all(len(row) == 3 for row in rows), rows
    bounds: dict = {}
    for module in BOUND_MODULES:
        for name, value in vars(importlib.import_module("mlagents_inference." + module)).items():
            if name.isupper() and type(value) in (int, float) and name not in NOT_BOUNDS:
                assert bounds.setdefault(name, value) == value, (name, module)  # (one value wherever it is read)
    defaults = inspect.signature(Repository.__init__).parameters
    bounds.update({name: defaults[name].default for name in ("settle_s", "busy_s")})
    missing, wrong = [], []
    for name, value in bounds.items():
        naming = [row for row in rows if re.search(rf"`{name}`", row[2])]
        if not naming:
            missing.append(name)
        elif not any(re.search(rf"(?<![\d.,]){re.escape(shown_value(name, value))}(?![\d,])", r[1]) for r in naming):
            wrong.append((name, shown_value(name, value), [r[1] for r in naming]))
    parser = build_parser()
    for row in rows:
        for option in re.findall(r"`(--[a-z-]+)`", row[2]):
            dest = option[2:].replace("-", "_")
            default = parser.get_default(dest)
            assert default is not None or dest in ("versions", "max_batch"), (option, "not an option of serve")
            if type(default) in (int, float):
                name = dest.upper() if dest.endswith("bytes") else dest
                if not re.search(rf"(?<![\d.,]){re.escape(shown_value(name, default))}(?![\d,])", row[1]):
                    wrong.append((option, shown_value(name, default), row[1]))
    assert not missing and not wrong, (missing, wrong)
