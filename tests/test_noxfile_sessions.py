"""The nox sessions' own logic, called in-process with nox stood in (the test venv has no nox):
``nox -s bench -- --help`` shows run's help, and the image sessions check the container runtime
before they fill a venv."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.images.runtime_check import missing_runtime, runtime_of

REPO = Path(__file__).resolve().parents[1]


class SessionError(Exception):
    """What ``session.error`` raises in nox: the session ends with the message."""


class FakeSession:
    def __init__(self, posargs: list[str], location: Path) -> None:
        self.posargs = posargs
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.virtualenv = types.SimpleNamespace(location=str(location))

    def run(self, *args: str, **_: object) -> None:
        self.calls.append(("run", args))

    def install(self, *args: str) -> None:
        self.calls.append(("install", args))

    def error(self, message: str) -> None:
        raise SessionError(message)

    def log(self, message: str) -> None:
        self.calls.append(("log", (message,)))


def _session(*args: object, **_: object) -> Callable:
    """``@nox.session`` and ``@nox.session(...)`` both leave the function as it is."""
    if args and callable(args[0]):
        return args[0]
    return lambda function: function


@pytest.fixture
def noxfile(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    stub = types.SimpleNamespace(options=types.SimpleNamespace(), session=_session, Session=FakeSession)
    monkeypatch.setitem(sys.modules, "nox", stub)
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module


@pytest.mark.parametrize("posargs", [["--help"], ["-h"], ["13b", "tp2pp8", "--help"]])
def test_bench_help_shows_runs_help_without_choosing_a_training_python(
        noxfile: types.ModuleType, posargs: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noxfile.provision, "choose", lambda *a, **k: pytest.fail("provisioned"))
    session = FakeSession(posargs, tmp_path)
    noxfile.bench(session)
    assert session.calls == [("run", ("python", "-m", "bench", "run", "--help"))]


@pytest.mark.parametrize("name,posargs,runtime", [
    ("build_cuda", [], "docker"), ("build_rocm", [], "docker"),
    ("push", ["cuda", "--registry", "r.example/me"], "docker"),
    ("pull", ["cuda"], "docker"), ("pull", ["cuda", "--runtime", "enroot"], "enroot"),
    ("pull", ["rocm", "--runtime=singularity"], "singularity"),
])
def test_image_sessions_check_the_runtime_before_installing(
        noxfile: types.ModuleType, name: str, posargs: list[str], runtime: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no enroot, singularity or apptainer
    session = FakeSession(posargs, tmp_path)
    with pytest.raises(SessionError, match=runtime):
        getattr(noxfile, name)(session)
    assert session.calls == []  # nothing installed, nothing run


def test_the_docker_engine_is_found_by_its_socket(tmp_path: Path) -> None:
    socket = tmp_path / "docker.sock"
    environ = {"DOCKER_HOST": f"unix://{socket}"}
    assert "does not exist" in missing_runtime("docker", environ)
    socket.touch()
    assert missing_runtime("docker", environ) is None
    assert missing_runtime("docker", {"DOCKER_HOST": "tcp://10.0.0.1:2375"}) is None  # the SDK's to reach


def test_a_pull_runtime_is_a_program_on_path(tmp_path: Path) -> None:
    assert "enroot" in missing_runtime("enroot", {"PATH": str(tmp_path)})
    program = tmp_path / "apptainer"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert missing_runtime("singularity", {"PATH": str(tmp_path)}) is None  # apptainer serves too


def test_the_runtime_is_read_from_a_pull_command_line() -> None:
    assert runtime_of(["cuda"]) == "docker"
    assert runtime_of(["cuda", "--runtime", "enroot"]) == "enroot"
    assert runtime_of(["rocm", "--runtime=singularity"]) == "singularity"


@pytest.mark.parametrize("name,command", [
    ("wheelhouse", ("-m", "bench.running.provision", "wheelhouse", "--help")),
    ("check", ("-m", "bench", "check", "--help")),
    ("data", ("-m", "bench", "data", "--help")),
    ("pull", ("-m", "bench", "images", "pull", "--help")),
    ("push", ("-m", "bench", "images", "push", "--help")),
    ("build_cuda", ("-m", "bench", "images", "build", "--help")),
    ("build_rocm", ("-m", "bench", "images", "build", "--help")),
])
def test_help_of_a_session_shows_its_commands_help(
        noxfile: types.ModuleType, name: str, command: tuple[str, ...], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`nox -s NAME -- --help` is the command's help, not the session's usage error, and needs no
    container runtime."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("PATH", str(tmp_path))
    session = FakeSession(["--help"], tmp_path)
    getattr(noxfile, name)(session)
    # An image command's help runs in nox's own Python: nothing installed into the session's venv.
    image = command[1:3] == ("bench", "images")
    assert session.calls[-1] == ("run", (sys.executable if image else "python", *command))
    assert not image or not [call for call in session.calls if call[0] == "install"]


def test_lint_help_says_what_it_checks_without_running_ruff(noxfile: types.ModuleType,
                                                            tmp_path: Path) -> None:
    session = FakeSession(["--help"], tmp_path)
    noxfile.lint(session)
    assert session.calls == [("log", ("nox -s lint: ruff check bench tests noxfile.py docs/reports "
                                      "(rules in pyproject.toml); takes no arguments",))]
