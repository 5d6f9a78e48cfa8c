"""Every platform and accelerator file loads through the typed schema; errors name file and key."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench.cli import build_parser, main
from bench.config.paths import PLATFORMS_DIR
from bench.config.platforms import (
    load_accelerator,
    load_accelerator_file,
    load_platform,
    load_platform_file,
    match_accelerator,
    with_job_overrides,
)
from bench.config.precisions import PRECISIONS
from bench.config.tomlfile import DataError


@pytest.mark.parametrize("path", sorted(PLATFORMS_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_platform_loads(path: Path) -> None:
    platform = load_platform_file(path)
    assert platform.description


@pytest.mark.parametrize("path", sorted((PLATFORMS_DIR / "accelerators").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_every_accelerator_loads_with_a_source(path: Path) -> None:
    acc = load_accelerator_file(path)
    assert acc.peak_source and acc.peak(PRECISIONS["bf16"]) > 0


def test_required_platforms_and_peaks() -> None:
    expected = {"azure-h100": ("slurm", "srun", "pyxis", 8, 989.0),
                "azure-h200": ("slurm", "srun", "pyxis", 8, 989.0),
                "lumi": ("slurm", "srun", "singularity", 8, 191.5),
                "polaris": ("pbs", "mpiexec", "venv", 4, 312.0)}
    for name, (sched, launcher, runtime, gpn, peak) in expected.items():
        p = load_platform(name)
        assert (p.scheduler, p.launcher, p.container_runtime, p.gpus_per_node) == (
            sched, launcher, runtime, gpn)
        from bench.config.platforms import load_accelerator
        assert load_accelerator(p.accelerator).peak(PRECISIONS["bf16"]) == peak
    assert load_platform("lumi").default_precision == "fp16"
    assert load_platform("azure-h100").env["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv5-topo.xml"
    assert load_platform("local").accelerator == "auto"


def test_accelerator_detection_by_device_name() -> None:
    assert match_accelerator("NVIDIA H200").name == "h200-sxm"
    assert match_accelerator("NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert match_accelerator("NVIDIA A100-SXM4-40GB").name == "a100-sxm"
    assert match_accelerator("Tesla T4") is None


def test_a100_80gb_is_matched_by_name_and_by_memory() -> None:
    # nvidia-smi's names; memory.total in GB as bench.running.gpus reads it (81920 MiB).
    assert match_accelerator("NVIDIA A100-SXM4-80GB").name == "a100-sxm-80gb"
    assert match_accelerator("NVIDIA A100-SXM4-80GB").memory_gb == 80
    assert match_accelerator("NVIDIA A100-SXM4-40GB", 42.9).name == "a100-sxm"
    assert match_accelerator("NVIDIA A100 80GB PCIe", 85.9).name == "a100-sxm-80gb"
    assert match_accelerator("NVIDIA A100-SXM4", 85.9).name == "a100-sxm-80gb"  # memory decides
    assert match_accelerator("NVIDIA H200", 150.1).name == "h200-sxm"


def _user_accelerator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, match: str) -> Path:
    folder = tmp_path / "accelerators"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(f'model = "mine"\nmatch = [{match}]\nmemory_gb = 80\n'
                    'peak_tflops = { bf16 = 1.0 }\npeak_source = "mine"\n')
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(tmp_path))
    return path


def test_a_blank_match_string_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _user_accelerator(tmp_path, monkeypatch, "everything", '""')
    with pytest.raises(DataError, match=r"everything.toml.*match.0: '' must name part of a device"):
        load_accelerator_file(path)
    with pytest.raises(DataError, match="everything.toml"):
        match_accelerator("NVIDIA H100 80GB HBM3")


def test_equal_matches_are_refused_and_the_most_specific_wins(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _user_accelerator(tmp_path, monkeypatch, "my-h100", '"H100 80GB HBM3"')
    assert match_accelerator("NVIDIA H100 80GB HBM3").name == "my-h100"
    assert match_accelerator("NVIDIA H100 PCIe").name == "h100-sxm"
    _user_accelerator(tmp_path, monkeypatch, "other-h100", '"H100 80GB HBM3"')
    with pytest.raises(DataError, match=r"matches accelerators/my-h100.toml and "
                       r"accelerators/other-h100.toml equally"):
        match_accelerator("NVIDIA H100 80GB HBM3")


def test_user_adds_a_cluster_by_copying_a_file(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(PLATFORMS_DIR, tmp_path / "platforms")
    text = (tmp_path / "platforms/lumi.toml").read_text().replace("standard-g", "small-g")
    (tmp_path / "platforms/mycluster.toml").write_text(text)
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(tmp_path / "platforms"))
    assert load_platform("mycluster").job.partition == "small-g"


@pytest.mark.parametrize("change,message", [
    (("scheduler = \"slurm\"", "scheduler = \"lsf\""), "key 'scheduler' is 'lsf'"),
    (("gpus_per_node = 8", "gpus_per_node = \"8\""), "key 'gpus_per_node' must be an integer"),
    (("accelerator = \"mi250x-gcd\"", "accelerator = \"mi300\""), "unknown accelerator 'mi300'"),
    (("walltime = \"01:00:00\"", "walltime = \"1h\""), "job.walltime: '1h' must be a walltime like HH:MM:SS"),
    (("OMP_NUM_THREADS = \"7\"", "OMP-THREADS = \"7\""), "not a valid environment variable"),
    (("cpus_per_task = 7", "cpu_per_task = 7"), "unknown key(s) cpu_per_task"),
    (('library_path = ["${EBROOTAWSMINOFIMINRCCL}/lib",', 'library_path = ["$(evil)/lib",'),
     "library_path.0: '$(evil)/lib' must be an absolute folder"),
    (('library_path = ["${EBROOTAWSMINOFIMINRCCL}/lib",', 'library_path = ["lib",'),
     "library_path.0: 'lib' must be an absolute folder"),
    (('cpu_bind = "mask_cpu:', 'cpu_bind = "mask_cpu:0xfe;reboot,'), "must be a Slurm --cpu-bind value"),
    (('launcher = "srun"', 'launcher = "torchrun"'), "cpu_bind binds srun's per-GPU tasks"),
    (("[job]", '[storage]\nstage = "scratch/stage"\n\n[job]'),
     "storage.stage: 'scratch/stage' must be an absolute path"),
    (("[env]", '[unset_env]\ndeepspeed = ["NCCL_NET"]\n\n[env]'), "unset_env.deepspeed"),
    (("[env]", '[unset_env]\nmegatron = ["NCCL NET"]\n\n[env]'), "unset_env.megatron.0"),
    (("[env]", '[unset_library_path]\nmegatron = ["/opt/cray/lib64"]\n\n[env]'),
     "unset_library_path.megatron: ['/opt/cray/lib64'] not in library_path"),
])
def test_bad_platform_file_names_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              change: tuple[str, str], message: str) -> None:
    shutil.copytree(PLATFORMS_DIR, tmp_path / "platforms")
    text = (PLATFORMS_DIR / "lumi.toml").read_text()
    assert change[0] in text
    (tmp_path / "platforms/broken.toml").write_text(text.replace(change[0], change[1]))
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(tmp_path / "platforms"))
    with pytest.raises(DataError, match="broken.toml") as err:
        load_platform("broken")
    assert message in str(err.value)


def test_job_overrides_option_beats_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command line reads $BENCH_<KEY> as the option's default; the planner reads no environment.
    monkeypatch.setenv("BENCH_ACCOUNT", "project_env")
    monkeypatch.setenv("BENCH_PARTITION", "dev-g")
    args = build_parser().parse_args(["run", "13b", "tp2pp8", "--platform", "lumi",
                                      "--account", "project_opt"])
    p = with_job_overrides(load_platform("lumi"), account=args.account, partition=args.partition)
    assert (p.job.account, p.job.partition) == ("project_opt", "dev-g")
    monkeypatch.delenv("BENCH_PARTITION")
    assert with_job_overrides(load_platform("lumi"), partition=None).job.partition == "standard-g"
    with pytest.raises(DataError, match="walltime"):
        with_job_overrides(load_platform("lumi"), walltime="soon")


def test_user_folder_adds_to_the_kit_and_its_files_win(tmp_path: Path, monkeypatch, capsys) -> None:
    """A folder holding just a copied file: the kit's platforms and accelerators stay known."""
    mine = tmp_path / "mine"
    (mine / "accelerators").mkdir(parents=True)
    shutil.copy(PLATFORMS_DIR / "azure-h100.toml", mine / "mycluster.toml")
    lumi = (PLATFORMS_DIR / "lumi.toml").read_text().replace("standard-g", "small-g")
    (mine / "lumi.toml").write_text(lumi)
    h100 = (PLATFORMS_DIR / "accelerators/h100-sxm.toml").read_text()
    (mine / "accelerators/h100-sxm.toml").write_text(h100.replace("memory_gb = 80", "memory_gb = 94"))
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(mine))
    assert load_platform("mycluster").accelerator == "h100-sxm"
    assert load_platform("lumi").job.partition == "small-g"  # the user's file of the same name
    assert load_platform("polaris").accelerator == "a100-sxm"  # the kit's, still there
    assert load_accelerator("h100-sxm").memory_gb == 94
    assert load_accelerator("mi250x-gcd").memory_gb == 64
    assert main(["platforms"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if "  " in line}
    assert rows["mycluster"] == rows["lumi"] == "user" and rows["polaris"] == rows["local"] == "kit"
    assert "h100-sxm (user)" in out and "a100-sxm (kit)" in out and f"user: {mine}" in out


def test_the_shared_gpu_hosts_site_is_the_kits_local_with_nvlink_multicast_off(monkeypatch, capsys) -> None:
    """The site folder the kit is measured with replaces ``local`` and changes its environment only."""
    kit = load_platform("local")
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(PLATFORMS_DIR / "sites/shared-gpu-hosts"))
    site = load_platform("local")
    assert site.env == {**kit.env, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                        "NVSHMEM_DISABLE_NVLS": "1"}
    differs = {"env", "description", "source"}
    assert site.model_dump(exclude=differs) == kit.model_dump(exclude=differs)
    assert main(["platforms"]) == 0
    assert re.search(r"^local +user ", capsys.readouterr().out, re.MULTILINE)


def test_platforms_dir_that_is_not_a_folder_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("BENCH_PLATFORMS_DIR", str(tmp_path / "nowhere"))
    assert main(["run", "1.3b", "tp1pp1", "--platform", "lumi", "--dry-run"]) == 2
    assert f"BENCH_PLATFORMS_DIR={tmp_path / 'nowhere'} is not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_accelerator_peak_must_be_a_finite_number(tmp_path: Path, value: str) -> None:
    """TOML spells inf and nan; a peak of either would make every MFU zero or undefined."""
    text = (PLATFORMS_DIR / "accelerators/h100-sxm.toml").read_text()
    (tmp_path / "x.toml").write_text(text.replace("bf16 = 989.0", f"bf16 = {value}"))
    with pytest.raises(DataError, match="x.toml: key 'peak_tflops.bf16' must be a finite number"):
        load_accelerator_file(tmp_path / "x.toml")


def test_the_local_gpus_memory_reaches_the_planner() -> None:
    from bench.config.presets import get_preset
    from bench.planning.plan import plan
    from bench.running.gpus import _memory_gb
    from tests.conftest import options

    assert _memory_gb("81920 MiB") == pytest.approx(85.9, abs=0.05) and _memory_gb("[N/A]") == 0.0
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                  options(gpus_present=1, gpu_name="NVIDIA A100-SXM4", gpu_memory_gb=85.9))
    assert launch.accelerator.name == "a100-sxm-80gb"


def test_nvlink_accelerators_name_their_link_with_a_source() -> None:
    # H100 and H200 SXM: NVLink 4, 900 GB/s per GPU both ways, so 450 GB/s each way.
    for name in ("h100-sxm", "h200-sxm"):
        link = load_accelerator(name).link
        assert link is not None and link.gbps == 450 and "NVLink 4" in link.name
        assert "900 GB/s" in link.source
    assert load_accelerator("a100-sxm").link is None  # not known: the page shows a dash


@pytest.mark.parametrize("link,message", [
    ('{ name = "NVLink", gbps = 0, source = "x" }', "link.gbps"),
    ('{ name = "NVLink", gbps = 450 }', "link.source"),
    ('{ name = " ", gbps = 450, source = "x" }', "link.name"),
])
def test_a_bad_link_names_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: str,
                                       message: str) -> None:
    path = _user_accelerator(tmp_path, monkeypatch, "linked", '"Linked"')
    path.write_text(path.read_text() + f"link = {link}\n")
    with pytest.raises(DataError, match="linked.toml") as err:
        load_accelerator_file(path)
    assert message in str(err.value)
