"""The README and docs/ stay true to the checkout: every repo path they name exists, every fenced
``nox -s`` / ``python -m bench`` line is one the kit accepts, and the error texts they show are the
kit's. Dated reports (docs/reports/) are a record of their day and are not checked: their paths
were true when they were written."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import cli
from bench.running.arguments import split_megatron_args

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# A repo path in prose, code or a command: it starts at one of the checkout's top folders. What
# follows a placeholder (`platforms/<name>.toml`, `results/records/*.json`) is not part of it.
REPO_PATH = re.compile(r"(?<![\w./~-])((?:\.\./)*(?:bench|tests|platforms|images|patches|results|docs|"
                       r"\.ci|\.github)/[\w.\-/]*[\w/])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MODULE = re.compile(r"python3? -m (bench(?:\.\w+)+)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
COMMAND_START = ("nox -s ", "python -m bench ")


def _relative(doc: Path) -> str:
    return str(doc.relative_to(REPO))


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_every_repo_path_named_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = []
    for match in REPO_PATH.finditer(text):
        path = match.group(1)
        base = doc.parent if path.startswith("../") else REPO  # `bench/x.py` is from the root
        if not (base / path).exists():
            missing.append(path)
    for match in LINK.finditer(text):
        target = match.group(1)
        if "://" not in target and not (doc.parent / target).exists():
            missing.append(target)
    assert not missing, f"{_relative(doc)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=_relative)
def test_every_module_run_with_python_m_exists(doc: Path) -> None:
    modules = MODULE.findall(doc.read_text(encoding="utf-8"))
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    assert not missing, f"{_relative(doc)} runs modules that do not exist: {missing}"


@dataclass(frozen=True)
class Command:
    where: str
    words: tuple[str, ...]
    line: str


def _split(line: str) -> list[list[str]]:
    """A shell line as its commands (split at ``&&``, ``;``, ``|``), with redirections kept as
    their own tokens so that a pasted ``<hash>`` shows as the redirect it would become."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.commenters = ""  # `ghcr.io#owner` is a word; comments are cut below, at a word's start
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token.startswith("#"):
            break
        if token in ("&&", ";", "|", "||"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [words for words in commands if words]


def _shell_lines(block: str) -> list[tuple[int, str]]:
    """A fenced block's lines, a line continued with a backslash joined to the next, each with the
    index of its first line and without a shown prompt (``$ ``)."""
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for index, raw in enumerate(block.splitlines()):
        first, text = pending if pending else (index, "")
        text = f"{text} {raw.strip()}".strip()
        pending = (first, text.removesuffix("\\")) if text.endswith("\\") else None
        if pending is None:
            lines.append((first, text.removeprefix("$ ")))
    return lines


def _fenced_commands() -> list[Command]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            for index, line in _shell_lines(block.group(1)):
                if not any(start in line for start in COMMAND_START):
                    continue  # output shown beside a command, a Dockerfile line, ...
                for words in _split(line):
                    if " ".join(words).startswith(COMMAND_START):
                        found.append(Command(f"{_relative(doc)}:{first + index}", tuple(words), line))
    return found


def _nox_sessions() -> dict[str, tuple[str, ...] | None]:
    """Each session of noxfile.py and the ``python -m bench`` arguments it puts before its posargs
    (None: the session runs no ``python -m bench`` command, so only its name is checked)."""
    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    sessions: dict[str, tuple[str, ...] | None] = {}
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        for decorator in function.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if not (isinstance(target, ast.Attribute) and target.attr == "session"):
                continue
            name = function.name
            for keyword in call.keywords if call else ():
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    name = keyword.value.value
            sessions[name] = _bench_prefix(function)
    return sessions


def _bench_prefix(function: ast.FunctionDef) -> tuple[str, ...] | None:
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        words = [arg.value if isinstance(arg, ast.Constant) else None for arg in node.args]
        for i in range(len(words) - 1):
            if words[i] == "-m" and words[i + 1] == "bench":
                prefix = []
                for word in words[i + 2:]:
                    if not isinstance(word, str):
                        break
                    prefix.append(word)
                return tuple(prefix)
    return None


def _parses(args: list[str]) -> str | None:
    """None when ``python -m bench`` accepts ``args`` (parsing only, nothing runs), else its error."""
    own, _ = split_megatron_args(args)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli.parse(own)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip()
    return None


COMMANDS = _fenced_commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) > 30  # the extraction itself works


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_fenced_command_parses(command: Command) -> None:
    words = list(command.words)
    pasted = [w for w in words if w in ("<", ">", ">>", "<<") or "…" in w]
    assert not pasted, (f"{command.where}: {command.line!r} has {pasted}: a placeholder that pasted "
                        "becomes a shell redirect or a literal; write HASH or $HASH")
    if words[0] == "nox":
        name = words[2]
        assert name in _nox_sessions(), (f"{command.where}: no nox session {name!r} (noxfile.py "
                                         f"has {sorted(_nox_sessions())})")
    args = _bench_args(command)
    if args is None:
        return
    error = _parses(args)
    assert error is None, f"{command.where}: {command.line!r} does not parse: {error}"


def _bench_args(command: Command) -> list[str] | None:
    """The ``python -m bench`` arguments a command comes to (None: a session that runs none)."""
    words = list(command.words)
    if words[0] != "nox":
        return words[3:]
    prefix = _nox_sessions()[words[2]]
    if prefix is None:
        return None
    return [*prefix, *(words[words.index("--") + 1:] if "--" in words else [])]


def _dry_runs() -> list[Command]:
    """The fenced dry runs that the docs show without an ``error:`` after them."""
    found = []
    for command in COMMANDS:
        doc, _, line = command.where.rpartition(":")
        after = (REPO / doc).read_text(encoding="utf-8").splitlines()[int(line)].strip()  # next line
        if ("--dry-run" in command.words and not after.startswith("error: ")
                and not any("$" in word for word in command.words)):  # $HASH: a placeholder
            found.append(command)
    return found


@pytest.mark.parametrize("command", _dry_runs(), ids=lambda c: c.where)
def test_every_documented_dry_run_prints_its_job(command: Command, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """As a new user meets them: no account, no platform or job settings in the environment."""
    for name in ("BENCH_PLATFORM", "BENCH_ACCOUNT", "BENCH_PARTITION", "BENCH_QUEUE", "BENCH_WALLTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    args = _bench_args(command)
    assert args is not None
    code = cli.main(args)
    out, err = capsys.readouterr()
    assert code == 0, f"{command.where}: {command.line!r} exits {code}: {err}"
    assert out.strip() and not list(tmp_path.iterdir())


def _shown_errors() -> list[tuple[str, list[str], str]]:
    """Each ``$ nox -s bench -- ...`` example in docs/ followed by the ``error:`` it shows."""
    shown = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            lines = block.group(1).splitlines()
            if not (lines and lines[0].startswith("$ nox -s bench -- ") and len(lines) > 1
                    and lines[1].startswith("error: ")):
                continue
            args = shlex.split(lines[0].removeprefix("$ nox -s bench -- "))
            shown.append((f"{_relative(doc)}: {lines[0]}", args, " ".join(lines[1:])))
    return shown


@pytest.mark.parametrize("where,args,error", _shown_errors(), ids=lambda v: v if isinstance(v, str) else "")
def test_error_texts_in_the_docs_are_the_kits(where: str, args: list[str], error: str,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_PLATFORM", raising=False)
    assert cli.main(["run", *args]) != 0
    printed = " ".join(capsys.readouterr().err.split())
    assert " ".join(error.split()) in printed, f"{where}: the docs show\n{error}\nthe kit says\n{printed}"


@pytest.mark.parametrize("doc", [REPO / "README.md", REPO / "docs" / "development.md"], ids=_relative)
def test_the_quick_run_names_the_install_it_needs(doc: Path) -> None:
    # a fresh checkout without the extras fails the quick run on tiktoken, numpy, matplotlib, ...
    text = doc.read_text(encoding="utf-8")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    # train and gpu-state (NVML, beside nvidia-smi): GPU machines only; no quick test needs them
    extras = set(pyproject["project"]["optional-dependencies"]) - {"train", "gpu-state"}
    named = re.search(r"pip install -e '\.\[([\w,]+)\]'\n+python -m pytest -m \"not slow\"", text)
    assert named, f"{_relative(doc)} shows no install line before the quick run"
    assert set(named.group(1).split(",")) == extras
    assert "BENCH_UPSTREAM_SNAPSHOTS" in text and "<name>-<commit>.tar.gz" in text


def test_no_documented_command_uses_a_folder_only_ci_has() -> None:
    # CI keeps the upstream snapshots beside its checkout (../shared/upstreams); a reader has none
    ci_only = [c.where for c in COMMANDS if "shared/upstreams" in c.line]
    assert not ci_only, f"commands that name CI's own folder: {ci_only}"


@pytest.mark.parametrize("argv,note", [
    (["--no-overlap"], "--no-overlap changes nothing with DP 1 (there is no data-parallel reduce "
                       "to overlap): dropped, the run is the default configuration"),
    (["--grad-reduce", "fp32", "--precision", "fp16"],
     "--grad-reduce fp32 changes nothing under fp16 (gradients are reduced in fp32 already): "
     "dropped, the run is the default configuration"),
])
def test_the_settings_reliability_says_are_dropped_are_dropped_with_a_note(
        argv: list[str], note: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join((REPO / "docs" / "reliability.md").read_text(encoding="utf-8").split())
    assert f"`{' '.join(argv[:2])}` " in text and "are dropped" in text
    assert cli.main(["run", "1.3b", "tp1pp1", "--platform", "azure-h100", *argv, "--dry-run"]) == 0
    assert f"note: {note}" in capsys.readouterr().err
