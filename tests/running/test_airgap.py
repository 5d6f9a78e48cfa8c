"""The air-gapped path with real files, real pip and real builds where no compiler is needed: the
wheelhouse's manifest, the sources it gathers, the build cache's stamps (hit, miss, half-made), the
builds put on a venv's path; the CUDA builds by their exact commands (a golden file), since they
need a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import urllib.error
from pathlib import Path

import pytest

from bench.running import airgap, builds, provision
from bench.running.airgap import MANIFEST, gather, read_manifest, write_manifest
from bench.running.builds import make, provide, put_on_path, recipes

GOLDEN = Path(__file__).parent / "golden" / "airgap-builds.txt"
MDS = "207b2d5aad1eea98464c37e0b991be6f8937226f"
MSAMP = "9746ea85289f8e6233646e73ace35f730d1245d5"


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def _archive(path: Path, top: str = "tree") -> Path:
    source = path.parent / f"{path.name}.d"
    (source / top).mkdir(parents=True)
    (source / top / "README").write_text(path.name)
    with tarfile.open(path, "w:gz") as archive:
        archive.add(source / top, arcname=top)
    return path


@pytest.fixture(scope="module")
def data_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data build's two wheels, fetched as the wheelhouse fetches them, with a manifest."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest", str(folder),
                    "tiktoken==0.14.0", "tokie==0.1.4"], check=True)
    write_manifest(folder, "cuda", {})
    return folder


def test_the_manifest_holds_every_file_with_its_hash_and_finds_a_cut_one(tmp_path: Path) -> None:
    (tmp_path / "sources").mkdir()
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "sources" / "apex-x.tar.gz").write_bytes(b"archive")
    manifest = write_manifest(tmp_path, "cuda", {"apex": "why"})
    assert manifest["files"] == {
        "a-1.0-py3-none-any.whl": {"bytes": 5, "sha256": airgap.sha256(tmp_path / "a-1.0-py3-none-any.whl")},
        "sources/apex-x.tar.gz": {"bytes": 7, "sha256": airgap.sha256(tmp_path / "sources" / "apex-x.tar.gz")}}
    assert read_manifest(tmp_path) == json.loads((tmp_path / MANIFEST).read_text()) == manifest
    (tmp_path / "sources" / "apex-x.tar.gz").write_bytes(b"arch")  # a cut copy
    with pytest.raises(ValueError, match=r"lacks or has cut files its manifest lists: "
                                         r"sources/apex-x.tar.gz; carry the whole folder again"):
        read_manifest(tmp_path)
    with pytest.raises(ValueError, match=r"has no manifest.json: fill it on a connected machine"):
        read_manifest(tmp_path / "sources")


def test_gather_copies_the_snapshots_given_and_refuses_another_commit(tmp_path: Path) -> None:
    given = {"megatron-deepspeed": _archive(tmp_path / f"Megatron-DeepSpeed-{MDS}.tar.gz"),
             "ms-amp": _archive(tmp_path / f"MS-AMP-{MSAMP}.tar.gz"),
             "apex": _archive(tmp_path / "apex-6424da3.tar.gz")}
    dest = tmp_path / "wheelhouse"
    manifest = gather("cuda", dest, upstreams=given, parts=("sources",), log=lambda _: None)
    assert sorted(manifest["files"]) == [  # type: ignore[arg-type]
        "sources/apex-6424da3.tar.gz", f"sources/megatron-deepspeed-{MDS}.tar.gz",
        f"sources/ms-amp-{MSAMP}.tar.gz"]
    assert manifest["missing"] == {}
    other = _archive(tmp_path / "MS-AMP-0000.tar.gz")
    with pytest.raises(ValueError, match=f"does not carry the pinned commit {MSAMP}"):
        gather("cuda", dest, upstreams={"ms-amp": other}, parts=("sources",))
    with pytest.raises(ValueError, match="--upstream flash-attn: not one of apex, megatron-deepspeed"):
        gather("cuda", dest, upstreams={"flash-attn": other}, parts=("sources",))


def test_an_unreachable_source_fetch_is_refused_before_the_stack_is_downloaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned archives' server is asked first: a machine that cannot reach it learns so before
    the training stack's ~280 MB, not after."""
    asked: list[str] = []

    def unreachable(url: str, timeout: float) -> None:
        asked.append(url)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(airgap.urllib.request, "urlopen", unreachable)
    downloads: list[str] = []
    given = {"megatron-deepspeed": _archive(tmp_path / f"Megatron-DeepSpeed-{MDS}.tar.gz")}
    with pytest.raises(ValueError, match=rf"cannot fetch .*{MSAMP}.*Temporary failure in name "
                                         r"resolution.*give --upstream ms-amp=PATH"):
        gather("cuda", tmp_path / "w", upstreams=given, log=lambda _: None,
               fetch_stack=lambda: downloads.append("stack"))
    assert downloads == [] and not (tmp_path / "w").exists()
    assert len(asked) == 1 and MSAMP in asked[0]  # the one given is not asked for


@pytest.mark.slow  # real pip: the wheels downloaded, then installed (seconds)
def test_the_data_build_is_made_once_then_reused_and_made_again_when_an_input_changes(
        tmp_path: Path, data_wheelhouse: Path) -> None:
    files = list(read_manifest(data_wheelhouse)["files"])  # type: ignore[call-overload]
    build = recipes(data_wheelhouse, files, sys.executable, tmp_path, "", 2, tmp_path / "mds")["data"]
    logged: list[str] = []
    assert make(build, sys.executable, "", logged.append) is True
    assert (build.site / "tiktoken").is_dir() and (build.site / "tokie").is_dir()
    assert make(build, sys.executable, "", logged.append) is False
    assert logged[-1].startswith("data: built already (stamp ")
    moved = tmp_path / "wheelhouse"  # the same files elsewhere: the stamp hashes contents, not paths
    (tmp_path / "wheelhouse").mkdir()
    for name in files:
        (moved / name).write_bytes((data_wheelhouse / name).read_bytes())
    again = recipes(moved, files, sys.executable, tmp_path, "", 2, tmp_path / "mds")["data"]
    assert again.stamp("none", "3.12", "") == again.stamp("none", "3.12", "")
    assert again.stamp("none", "3.12", "") != again.stamp("2.11.0", "3.12", "")  # torch changed
    assert again.stamp("none", "3.12", "") != again.stamp("none", "3.12", "9.0")  # arch changed


def test_a_build_that_fails_is_one_line_and_leaves_no_stamp(tmp_path: Path) -> None:
    step = airgap.Step((sys.executable, "-c", "raise SystemExit(3)"))
    build = airgap.Build("te", (), (step,), tmp_path / "te" / "site")
    with pytest.raises(ValueError, match=r"^the te build failed at step 1 \(exit 3, its output above\): "):
        make(build, sys.executable, "9.0", lambda _: None)
    assert not (tmp_path / "te" / ".stamp").exists()


@pytest.mark.slow  # real pip: the wheels downloaded, then installed (seconds)
def test_provide_puts_the_builds_on_a_venvs_path_and_takes_them_off(tmp_path: Path,
                                                                    data_wheelhouse: Path) -> None:
    venv = tmp_path / "venv"
    # pip from the base, as a training venv sees the machine's packages
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                   check=True)
    python = str(venv / "bin" / "python")
    sites = provide(["data"], data_wheelhouse, python, tmp_path / "builds", None, 2, tmp_path / "m",
                    lambda _: None)
    pth = put_on_path(python, sites)
    found = subprocess.run([python, "-c", "import tokie; print(tokie.__file__)"], capture_output=True,
                           text=True, check=True).stdout
    assert found.startswith(str(tmp_path / "builds" / "data" / "site"))
    put_on_path(python, [])
    assert not pth.exists()
    with pytest.raises(ValueError, match=r"lacks the sources of the te build"):
        provide(["te"], data_wheelhouse, python, tmp_path / "builds", "9.0", 2, tmp_path / "m")
    with pytest.raises(ValueError, match=r"--builds cuda: not one of data, te, apex, msamp, mds"):
        provide(["cuda"], data_wheelhouse, python, tmp_path / "builds", "9.0", 2, tmp_path / "m")


@pytest.mark.slow  # a venv with its own pip (seconds)
def test_nox_bench_builds_from_the_wheelhouse_into_the_venv(tmp_path: Path, data_wheelhouse: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`--env venv --wheelhouse DIR --builds data`: the venv, then the build on its path."""
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    small = provision.Stack(packages=(), requirements=())
    chosen = provision.choose(["--env=venv", "125m", "tp1pp1", "--wheelhouse", str(data_wheelhouse),
                               "--builds", "data"], sys.executable, env=_offline_env(), stack=small,
                              venv=tmp_path / "v")
    assert chosen.args == ("125m", "tp1pp1")
    subprocess.run([chosen.python, "-c", "import tiktoken, tokie"], check=True)


def test_builds_without_a_wheelhouse_are_refused_before_anything_is_made() -> None:
    with pytest.raises(ValueError, match=r"^--builds te needs --wheelhouse DIR"):
        provision.with_builds(sys.executable, "te", None, print)


def test_the_cuda_builds_run_these_commands() -> None:
    """What the GPU machine runs for each build, against a wheelhouse of the real file names; a
    change here is a deliberate act: `BENCH_UPDATE_GOLDEN=1`."""
    files = ["colorlog-6.12.0-py3-none-any.whl", "tiktoken-0.14.0-cp312-cp312-manylinux_2_17_x86_64.whl",
             "tokie-0.1.4-cp312-cp312-manylinux_2_17_x86_64.whl", "sources/deepspeed-0.18.2.tar.gz",
             "sources/transformer_engine_cu13-2.20.2-py3-none-manylinux_2_28_x86_64.whl",
             "sources/transformer_engine-2.20.2-py3-none-any.whl",
             "sources/transformer_engine_torch-2.20.2.tar.gz", "sources/apex-6424da3b.tar.gz",
             f"sources/megatron-deepspeed-{MDS}.tar.gz", f"sources/ms-amp-{MSAMP}.tar.gz"]
    made = recipes(Path("/w"), files, "/venv/bin/python", Path("/cache/builds"), "9.0", 16,
                   Path("/opt/Megatron-DeepSpeed"))
    assert list(made) == list(airgap.BUILDS)
    text = "".join(f"# {name}: {', '.join(p.name for p in build.inputs)}\n"
                   + "".join(f"{step.render()}\n" for step in build.steps) + "\n"
                   for name, build in made.items()).replace(str(builds.REPO), "<kit>")
    if os.environ.get("BENCH_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_the_wheelhouse_command_refuses_a_bad_upstream_in_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert provision.main(["wheelhouse", "cuda", "--dest", str(tmp_path / "w"), "--without", "stack",
                           "--without", "te", "--without", "gpt2", "--upstream", "apex"]) == 2
    assert capsys.readouterr().err == ("error: --upstream takes NAME=PATH, e.g. --upstream "
                                       "apex=apex-<commit>.tar.gz\n")
