"""The seed clusters' job scripts as their seeds run them (issue 17).

None of LUMI, Polaris or Azure is reachable here, so these tests hold the platform data to the
sources cited in the files, and execute the rendered scripts with stand-ins for the site tools
(srun, singularity, scontrol) that record what they were given.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.cli import build_parser
from bench.config.platforms import load_platform
from bench.config.precisions import PRECISIONS
from bench.config.presets import get_preset
from bench.images import polaris
from bench.images.pins import load_pins, load_polaris_recipe
from bench.images.refs import image_file
from bench.planning.engines.deepspeed import ZeroSettings, ds_config
from bench.planning.plan import LaunchPlan, plan
from bench.render import pbs, slurm
from bench.results.data import load_published
from bench.running.arguments import RunCommand, options_from
from tests.conftest import options
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]

# Records each call's argv and environment, one JSON line per call, then succeeds.
RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD_TO"], "a") as fh:
    fh.write(json.dumps({"tool": os.path.basename(sys.argv[0]), "argv": sys.argv[1:],
                         "env": dict(os.environ)}) + "\\n")
"""


RELATIVE_DATA = "data/meg-gpt2_text_document"


def _run_with_standins(script: str, tmp_path: Path, tools: tuple[str, ...],
                       env: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[dict]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    record = tmp_path / "calls.jsonl"
    record.unlink(missing_ok=True)
    # The submit folder holds the data set of LUMI's and Polaris's default --data-path (the job
    # checks its files before its launcher).
    (tmp_path / "data").mkdir(exist_ok=True)
    for suffix in (".bin", ".idx"):
        (tmp_path / f"{RELATIVE_DATA}{suffix}").touch()
    # `module` is a shell function on clusters; here a function that does nothing.
    script = "module() { :; }\n" + script
    full_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD_TO": str(record),
                "SLURM_JOB_NODELIST": "nid001", "SLURM_SUBMIT_DIR": str(tmp_path), **env}
    result = subprocess.run(["bash", "-c", script], env=full_env, cwd=tmp_path,
                            capture_output=True, text=True)
    calls = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return result, calls


# --- LUMI -------------------------------------------------------------------------------------

def _lumi_plan(**extra: object):
    return plan(get_preset("13b"), "tp2pp8", load_platform("lumi"),
                options(**{"account": "project_1", **extra}))


def test_lumi_cpu_masks_give_each_gcd_its_own_seven_cores() -> None:
    """LUMI's documented masks: 8 disjoint sets of 7 cores, none of the system's cores 0, 8, .. 56,
    and GCD i's cores on the CCD the LUMI AI guide's per-GCD core map names."""
    platform = load_platform("lumi")
    masks = [int(m, 16) for m in platform.cpu_bind.split(":", 1)[1].split(",")]
    cores = [{bit for bit in range(64) if mask >> bit & 1} for mask in masks]
    assert len(cores) == platform.gpus_per_node == 8
    assert all(len(c) == platform.cpus_per_task == 7 for c in cores)
    assert len(set().union(*cores)) == 56
    assert not set().union(*cores) & set(range(0, 64, 8))
    # LUMI AI guide 05, set_cpu_affinity: GCD -> first core of its CCD.
    assert [min(c) for c in cores] == [49, 57, 17, 25, 1, 9, 33, 41]


def test_lumi_uses_a_current_stack_with_the_rccl_plugin() -> None:
    platform = load_platform("lumi")
    assert "LUMI/23.03" not in platform.modules  # retired
    assert platform.modules[:2] == ("LUMI/24.03", "partition/G")
    assert any(m.startswith("aws-ofi-rccl/") for m in platform.modules)
    # The plugin, and beside it the host's Cray libfabric it is linked against (in the /opt/cray bind).
    # Its version folder is found when the job runs, never written into the file.
    assert platform.library_path == ("${EBROOTAWSMINOFIMINRCCL}/lib", "/opt/cray/libfabric/*/lib64")
    assert any(platform.library_path[1].startswith(bind + "/") for bind in platform.binds)
    for host_piece in ("/var/spool/slurmd", "/opt/cray", "/usr/lib64/libcxi.so.1"):
        assert host_piece in platform.binds


def _host_libfabric(script: str, root: Path, versions: tuple[str, ...]) -> str:
    """The script with a folder of ``root`` standing in for the host's /opt/cray/libfabric, holding
    the version folders given."""
    for version in versions:
        (root / "cray/libfabric" / version / "lib64").mkdir(parents=True)
    return script.replace("/opt/cray/libfabric/", f"{root}/cray/libfabric/")


def test_lumi_script_runs_with_standins_one_bound_task_per_gcd(tmp_path: Path) -> None:
    script = _host_libfabric(slurm.render(_lumi_plan()), tmp_path, ("1.9.0", "1.15.2.0", "1.22.0"))
    (tmp_path / "megatron-bench-rocm.sif").write_bytes(b"sif stand-in")  # checked before srun
    plugin = "/appl/lumi/aws-ofi-rccl"
    result, calls = _run_with_standins(script, tmp_path, ("srun", "scontrol"),
                                       {"EBROOTAWSMINOFIMINRCCL": plugin})
    assert result.returncode == 0, result.stderr
    srun = next(c for c in calls if c["tool"] == "srun")
    argv = srun["argv"]
    assert argv[0] == f"--cpu-bind={load_platform('lumi').cpu_bind}"
    assert argv[1:3] == ["singularity", "exec"]
    assert argv[3] == "--bind" and argv[4].endswith(f",{tmp_path}")  # the submit folder, explicitly
    assert argv[5:7] == ["--pwd", str(tmp_path)]
    assert argv[8:11] == ["python", "-m", "bench.train.rankenv"]
    assert srun["env"]["SINGULARITYENV_LD_LIBRARY_PATH"] == (  # the newest version found
        f"{plugin}/lib:{tmp_path}/cray/libfabric/1.22.0/lib64")
    assert srun["env"]["NCCL_NET"] == "AWS Libfabric"
    assert "#SBATCH --ntasks-per-node=8" in script and "#SBATCH --cpus-per-task=7" in script


def test_lumi_script_stops_before_launch_without_the_host_libfabric(tmp_path: Path) -> None:
    script = _host_libfabric(slurm.render(_lumi_plan()), tmp_path, ())
    result, calls = _run_with_standins(script, tmp_path, ("srun", "scontrol"),
                                       {"EBROOTAWSMINOFIMINRCCL": "/appl/lumi/aws-ofi-rccl"})
    assert result.returncode != 0 and not [c for c in calls if c["tool"] == "srun"]
    assert f"no folder matches {tmp_path}/cray/libfabric/*/lib64 (library_path)" in result.stderr


def test_lumi_script_stops_before_launch_without_the_plugin_module(tmp_path: Path) -> None:
    result, calls = _run_with_standins(slurm.render(_lumi_plan()), tmp_path, ("srun", "scontrol"),
                                       {})
    assert result.returncode != 0
    assert "EBROOTAWSMINOFIMINRCCL: not set; a module of the platform should set it" in result.stderr
    assert not [c for c in calls if c["tool"] == "srun"]


@pytest.mark.parametrize("path", ["data/meg-gpt2_text_document",
                                  "/scratch/project_1/data/meg-gpt2_text_document"])
def test_lumi_data_inside_a_bind_is_accepted(path: str) -> None:
    assert f"--data-path {path}" in slurm.render(_lumi_plan(data_path=path))


ACCOUNT_NOTE = ("note: {name} needs an account for its jobs, shown as <PROJECT> in this script: "
                "pass --account PROJECT or set BENCH_ACCOUNT to submit it\n")


@pytest.mark.parametrize("argv,directive", [
    (["13b", "tp2pp8", "--platform", "lumi"], "#SBATCH --account=<PROJECT>\n"),
    (["6.7b", "tp4pp1", "--mbs", "1", "--platform", "polaris"], "#PBS -A <PROJECT>\n"),
])
def test_a_dry_run_without_an_account_prints_the_script_with_a_placeholder(
        tmp_path: Path, argv: list[str], directive: str) -> None:
    """The documented dry runs print as written; the account is a visible placeholder, and the
    note says how to give it."""
    platform = argv[argv.index("--platform") + 1]
    result = run_cli("run", *argv, "--dry-run", cwd=tmp_path, env={"BENCH_ACCOUNT": ""})
    assert result.returncode == 0, result.stderr
    assert directive in result.stdout
    assert ACCOUNT_NOTE.format(name=platform) in result.stderr
    assert not list(tmp_path.iterdir())


def test_only_a_submit_without_an_account_is_refused(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a working sbatch: the account, not the scheduler, refuses
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(RECORDER)
    (bin_dir / "sbatch").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    result = run_cli("run", "13b", "tp2pp8", "--platform", "lumi", cwd=work,
                     env={"BENCH_ACCOUNT": "", "PATH": f"{bin_dir}:{os.environ['PATH']}",
                          "RECORD_TO": str(tmp_path / "calls.jsonl")})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("error: lumi needs an account for its jobs: pass --account PROJECT "
                             "or set BENCH_ACCOUNT\n")
    assert not list(work.iterdir()) and not (tmp_path / "calls.jsonl").exists()


def test_the_system_checks_dry_run_shows_the_placeholder_too(tmp_path: Path) -> None:
    result = run_cli("check", "--platform", "lumi", "--dry-run", cwd=tmp_path,
                     env={"BENCH_ACCOUNT": ""})
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --account=<PROJECT>\n" in result.stdout
    assert result.stderr == ACCOUNT_NOTE.format(name="lumi")


def test_a_given_account_leaves_no_placeholder_and_no_note(tmp_path: Path) -> None:
    result = run_cli("run", "13b", "tp2pp8", "--platform", "lumi", "--dry-run", cwd=tmp_path,
                     env={"BENCH_ACCOUNT": "project_1"})
    assert "#SBATCH --account=project_1\n" in result.stdout
    assert "<PROJECT>" not in result.stdout + result.stderr


def test_lumi_data_outside_every_bind_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--data-path /users/me/data is outside every folder "
                       r"bound into the container on lumi .*add its folder to binds"):
        _lumi_plan(data_path="/users/me/data")


# --- Polaris ----------------------------------------------------------------------------------

def test_polaris_refuses_the_seed_module_naming_both_versions() -> None:
    recipe = load_polaris_recipe()
    polaris.check_module(recipe)  # the recipe's own module passes
    with pytest.raises(ValueError, match=r"^conda/2023-10-04 ships torch 2\.0\.1, but "
                       r"deepspeed==0\.18\.2 needs torch >= 2\.1: choose a newer conda_module"):
        polaris.check_module(recipe.model_copy(update={"conda_module": "conda/2023-10-04"}))
    with pytest.raises(ValueError, match="ships Python 3.10, but the kit needs Python >= 3.11"):
        polaris.check_module(recipe.model_copy(update={
            "conda_module": "conda/2023-10-04", "requires": {"python": "3.11", "torch": "2.0"}}))
    with pytest.raises(ValueError, match="conda/2099-01-01 has no .conda_modules. entry"):
        polaris.check_module(recipe.model_copy(update={"conda_module": "conda/2099-01-01"}))


def _probe(tmp_path: Path, torch_version: str, flash_attn: bool) -> subprocess.CompletedProcess:
    """Run the recipe's module check with a stand-in torch (and flash_attn) on the path."""
    site = tmp_path / f"site-{torch_version}-{flash_attn}"
    site.mkdir()
    (site / "torch.py").write_text(f"__version__ = {torch_version!r}\n")
    if flash_attn:
        (site / "flash_attn.py").write_text("")
    script = polaris.render_script(load_polaris_recipe(), load_pins(), "/src")
    probe = next(line for line in script.splitlines() if line.startswith("python3 -c "))
    return subprocess.run(["bash", "-c", probe], env={**os.environ, "PYTHONPATH": str(site)},
                          capture_output=True, text=True)


def test_polaris_build_checks_what_the_module_really_ships(tmp_path: Path) -> None:
    module = load_polaris_recipe().conda_module
    assert _probe(tmp_path, "2.14.0+cu130", flash_attn=True).returncode == 0
    old = _probe(tmp_path, "2.0.1", flash_attn=True)
    assert old.returncode == 1
    assert f"{module} has torch 2.0.1; the pinned DeepSpeed needs >= 2.1" in old.stderr
    no_flash = _probe(tmp_path, "2.14.0", flash_attn=False)
    assert no_flash.returncode == 1 and "has no flash_attn" in no_flash.stderr


def test_polaris_platform_runs_the_venv_the_recipe_builds() -> None:
    recipe, platform = load_polaris_recipe(), load_platform("polaris")
    assert platform.modules == (recipe.conda_module,)
    assert platform.module_paths == (recipe.module_path,)
    assert platform.image == recipe.venv
    assert platform.flash_attention == recipe.flash_attention


@pytest.mark.parametrize(("engine", "first"), [
    ("megatron", "/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:/soft/libraries/hwloc/lib"),
    # ALCF's fix for the plugin's hangs turns it off: NCCL would load it from the path regardless.
    ("megatron-deepspeed", "/soft/libraries/hwloc/lib"),
])
def test_polaris_puts_the_ofi_plugin_first_on_the_library_path_of_megatron_jobs(
        engine: str, first: str) -> None:
    launch = plan(get_preset("6.7b"), "tp4pp1", load_platform("polaris"),
                  options(engine=engine, mbs=1, account="datascience"))
    line = next(s for s in pbs.render(launch).splitlines() if s.startswith("export LD_LIBRARY"))
    for before, after in (("/usr/lib", ":/usr/lib"), ("", "")):
        env = {"PATH": os.environ["PATH"], **({"LD_LIBRARY_PATH": before} if before else {})}
        out = subprocess.run(["bash", "-c", f'{line}\necho "$LD_LIBRARY_PATH"'], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == first + after


# ALCF user guide, Polaris > NCCL: these can hang Megatron-DeepSpeed; the workaround unsets them.
ALCF_HANG_PRONE = ("NCCL_NET_GDR_LEVEL", "NCCL_CROSS_NIC", "NCCL_COLLNET_ENABLE", "NCCL_NET")


@pytest.mark.parametrize("engine,kept", [("megatron-deepspeed", False), ("megatron", True)])
def test_polaris_megatron_deepspeed_jobs_run_without_the_hang_prone_plugin_variables(
        engine: str, kept: bool) -> None:
    """Megatron-DeepSpeed jobs unset what ALCF names (a module may set it too) and export none of
    it; the Megatron engine's jobs keep the plugin's settings."""
    launch = plan(get_preset("6.7b"), "tp4pp1", load_platform("polaris"),
                  options(mbs=1, account="datascience", engine=engine))
    env = dict(launch.env)
    script = pbs.render(launch)
    done = subprocess.run(["bash", "-c", "\n".join(
        line for line in script.splitlines() if line.startswith(("unset ", "export NCCL", "export FI"))
    ) + "\nenv"], env={"PATH": os.environ["PATH"], "NCCL_NET": "from a module"},
        capture_output=True, text=True, check=True).stdout
    for name in ALCF_HANG_PRONE:
        assert (name in env) is kept
        assert (f"{name}=" in done) is kept, done
    assert env["FI_MR_CACHE_MONITOR"] == "userfaultfd"  # the other libfabric settings stay
    assert ("unset " + " ".join(ALCF_HANG_PRONE) in script) is not kept


def test_polaris_seed_run_is_preset_layout_and_options() -> None:
    args = build_parser().parse_args(
        ["run", "25b", "tp4pp4zero1", "--platform", "polaris", "--nodes", "8",
         "--seq-length", "4096", "--mbs", "1", "--gbs", "2", "--account", "datascience"])
    launch = plan(get_preset("25b"), args.layout, load_platform("polaris"),
                  options_from(RunCommand(args), 0, ""))
    flags = " ".join(launch.train_args)
    assert "--seq-length 4096 --max-position-embeddings 4096" in flags
    assert "--zero-stage 1" in flags
    assert "--use-flash-attn-v2" in flags  # the platform's module has flash-attention 2
    assert launch.layout.grad_accumulation == 1  # the seed's GAS=1
    # With margin on a 40 GB A100: the estimate has run 10-14 % low with TP and PP (docs/running.md),
    # and Megatron-DeepSpeed's pipeline has fragmented past 80 % of the device.
    assert launch.memory_gb * 1.14 < 0.8 * 40
    # A run at another sequence length is a variant: only a range that names it judges it.
    assert dict(launch.variant)["seq_length"] == "4096"
    assert launch.preset.seq_length == 4096
    # Flash attention only where the image or venv has it.
    local = plan(get_preset("345m"), "tp1pp1", load_platform("local"),
                 options(engine="megatron-deepspeed", gpus_present=1, data_path="d",
                         vocab_file="v", merge_file="m"))
    assert "--use-flash-attn-v2" not in local.train_args
    # Elsewhere torch's fused attention (patch 0011), never the unfused s x s scores.
    assert "--use-torch-sdpa" in local.train_args and "--use-torch-sdpa" not in launch.train_args


@pytest.mark.parametrize(("nodes", "queue"), [(1, "debug"), (2, "debug"), (3, "debug-scaling"),
                                              (8, "debug-scaling"), (10, "debug-scaling"),
                                              (16, "prod"), (496, "prod")])
def test_polaris_queue_follows_the_node_count(nodes: int, queue: str) -> None:
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("polaris"),
                  options(nodes=nodes, mbs=1, gbs=4 * nodes, account="datascience"))
    assert launch.platform.job.queue == queue
    assert f"#PBS -q {queue}\n" in pbs.render(launch)


@pytest.mark.parametrize(("extra", "message"), [
    ({"nodes": 16, "queue": "debug"}, r"queue debug \(1-2 nodes, up to 01:00:00\) cannot take 16 "
     r"node\(s\).*use --queue prod"),
    ({"nodes": 2, "walltime": "02:00:00"}, r"no queue of polaris takes 2 node\(s\) for 02:00:00"),
    ({"nodes": 497}, r"no queue of polaris takes 497 node\(s\)"),
])
def test_polaris_queue_that_cannot_take_the_job_is_refused(extra: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan(get_preset("1.3b"), "tp1pp1", load_platform("polaris"),
             options(account="datascience", mbs=1, gbs=4 * extra["nodes"], **extra))


def test_polaris_queue_the_data_does_not_list_is_the_users_choice() -> None:
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("polaris"),
                  options(nodes=4, mbs=1, gbs=16, queue="preemptable", account="datascience"))
    assert "#PBS -q preemptable\n" in pbs.render(launch)


# --- Azure 175B -------------------------------------------------------------------------------

def test_azure_175b_saves_checkpoints_on_amlfs_with_real_data() -> None:
    launch = plan(get_preset("175b"), "tp8pp16sp", load_platform("azure-h100"), options(save=""))
    args = launch.train_args
    stage = load_platform("azure-h100").storage.stage
    assert args[args.index("--save") + 1] == f"{stage}/checkpoints/{launch.run_id}"
    # The seed's SAVE_INTERVAL (100) times no save in 30 iterations: 15 times two, as the seed
    # times its saves; a run long enough keeps the seed's interval.
    assert args[args.index("--save-interval") + 1] == "15"
    assert any("2 timed saves in 30 iterations" in note for note in launch.notes)
    longer = plan(get_preset("175b"), "tp8pp16sp", load_platform("azure-h100"),
                  options(save="", iters=300)).train_args
    assert longer[longer.index("--save-interval") + 1] == "100"
    assert args[args.index("--data-path") + 1].startswith(f"{stage}/slimpajama/preprocessed/")
    assert "--mock-data" not in args
    assert launch.layout.global_batch == 512  # the seed's GLOBAL_BATCH_SIZE
    # The file `pull --runtime enroot` writes, by the same name (bench.images.refs.image_file).
    assert launch.image == f"{stage}/striped_directory/{image_file(load_pins().target('cuda'), 'enroot')}"
    assert launch.image.endswith("/megatron-bench-cuda.sqsh")
    custom = plan(get_preset("175b"), "tp8pp16sp", load_platform("azure-h100"),
                  options(save="/data/ck", save_interval=7, image="other.sqsh"))
    assert custom.train_args[-4:] == ("--save", "/data/ck", "--save-interval", "7")
    assert custom.image == "other.sqsh"


SEED_001_NCCL = {"NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_IB_QPS_PER_CONNECTION": "4",
                 "NCCL_PXN_DISABLE": "1", "NCCL_MIN_NCHANNELS": "32", "NCCL_IGNORE_CPU_AFFINITY": "1"}
SEED_001_CHECKPOINTS = ("--use-persistent-ckpt-worker", "--ckpt-fully-parallel-load",
                        "--ckpt-assume-constant-structure")


@pytest.mark.parametrize("platform", ["azure-h100", "azure-h200"])
def test_azure_runs_nccl_and_checkpoints_as_seed_001s_04_gpt175b(platform: str) -> None:
    launch = plan(get_preset("175b"), "tp8pp16sp", load_platform(platform), options(save=""))
    env = dict(launch.env)
    assert {key: env.get(key) for key in SEED_001_NCCL} == SEED_001_NCCL
    script = slurm.render(launch)
    assert all(f"export {key}={value}\n" in script for key, value in SEED_001_NCCL.items())
    args = launch.train_args
    assert args[args.index("--save") - 3:args.index("--save")] == SEED_001_CHECKPOINTS
    no_save = plan(get_preset("175b"), "tp8pp16sp", load_platform(platform), options())
    deepspeed = plan(get_preset("13b"), "tp2pp1", load_platform(platform),
                     options(nodes=2, engine="megatron-deepspeed", save="/data/ck"))
    for other in (no_save, deepspeed):  # Megatron-Core's flags, only where it saves
        assert not set(SEED_001_CHECKPOINTS) & set(other.train_args)


@pytest.mark.parametrize(("platform", "extra", "message"), [
    ("local", {"save": "", "gpus_present": 1}, "local has no .storage. stage: give --save DIR"),
    ("azure-h100", {"save_interval": 10}, "--save-interval needs --save"),
    ("azure-h100", {"save": "/home/me/ck"}, "--save /home/me/ck is outside every folder bound"),
])
def test_checkpoint_options_are_checked_before_anything_runs(platform: str, extra: dict,
                                                             message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan(get_preset("1.3b"), "tp1pp1", load_platform(platform), options(**extra))


def test_azure_system_check_is_the_seeds_first_step() -> None:
    """The seed's two-node check: 12 layers, hidden 512, 8 heads, sequence 1024, TP1 PP1."""
    check = get_preset("syscheck")
    assert (check.layers, check.hidden, check.heads, check.seq_length) == (12, 512, 8, 1024)
    launch = plan(check, "tp1pp1", load_platform("azure-h100"), options(nodes=2))
    assert (launch.nodes, launch.world_size, launch.layout.dp) == (2, 16, 16)


# --- Seed 003: DeepSpeed ZeRO settings --------------------------------------------------------

SEED_003 = ZeroSettings(offload="cpu", overlap_comm=True, contiguous_gradients=True,
                        reduce_bucket_size=200_000_000, allgather_bucket_size=200_000_000)


def _seed_003(**extra: object):
    return plan(get_preset("345m"), "tp4pp1zero3", load_platform("local"),
                options(engine="megatron-deepspeed", gpus_present=4, precision="fp16", mbs=1,
                        gbs=4, data_path="data/meg-gpt2_text_document",
                        vocab_file="data/gpt2-vocab.json", merge_file="data/gpt2-merges.txt",
                        **extra))


def test_seed_003_deepspeed_config() -> None:
    launch = _seed_003(zero=SEED_003)
    zero = json.loads(launch.ds_config)["zero_optimization"]
    assert zero == {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                    "reduce_bucket_size": 200_000_000, "allgather_bucket_size": 200_000_000,
                    "offload_optimizer": {"device": "cpu"}}
    # DeepSpeed refuses ZeRO-Offload with a client optimizer other than DeepSpeedCPUAdam.
    assert "--cpu-optimizer" in launch.train_args
    assert dict(launch.variant)["zero_offload"] == "cpu"
    assert any("zero3 does not read allgather_bucket_size" in note for note in launch.notes)
    assert ds_config(launch.layout, PRECISIONS["fp16"])["zero_optimization"] == {"stage": 3}


def test_cpu_offload_says_torchrun_leaves_openmp_one_thread() -> None:
    """torchrun sets OMP_NUM_THREADS=1 (seed 003's row on four H200s logged it), and DeepSpeed's
    CPU Adam is an OpenMP loop: the plan says so unless the platform sets the threads."""
    from bench.planning.engines.registry import OFFLOAD_THREADS_NOTE
    assert OFFLOAD_THREADS_NOTE in _seed_003(zero=SEED_003).notes
    assert OFFLOAD_THREADS_NOTE not in _seed_003(zero=ZeroSettings(overlap_comm=True)).notes
    local = load_platform("local")
    threaded = local.model_copy(update={"env": {**local.env, "OMP_NUM_THREADS": "16"}})
    launch = plan(get_preset("345m"), "tp4pp1zero3", threaded,
                  options(engine="megatron-deepspeed", gpus_present=4, precision="fp16", mbs=1,
                          gbs=4, data_path="d", vocab_file="v", merge_file="m", zero=SEED_003))
    assert OFFLOAD_THREADS_NOTE not in launch.notes
    assert dict(launch.env)["OMP_NUM_THREADS"] == "16"


def test_cpu_offload_here_shares_the_cores_out_as_cpu_adam_threads() -> None:
    """On local, a ZeRO-Offload run exports OMP_NUM_THREADS = its cores over its ranks and says
    so; no other run does (the environment is part of the configuration key), and a cluster job
    takes it only from its platform's [env]."""
    offload = _seed_003(zero=SEED_003, cpus_present=64)
    assert dict(offload.env)["OMP_NUM_THREADS"] == "16"
    assert ("ZeRO-Offload: OMP_NUM_THREADS=16 for DeepSpeed's CPU Adam, the 64 cores this process may "
            "run on over 4 ranks") in offload.notes
    plain = _seed_003(zero=ZeroSettings(overlap_comm=True), cpus_present=64)
    assert "OMP_NUM_THREADS" not in dict(plain.env)
    assert dict(_seed_003(zero=SEED_003, cpus_present=2).env)["OMP_NUM_THREADS"] == "1"
    cluster = plan(get_preset("345m"), "tp4pp1zero3", load_platform("azure-h100"),
                   options(engine="megatron-deepspeed", precision="fp16", mbs=1, gbs=4, data_path="/shared/d",
                           vocab_file="/shared/v", merge_file="/shared/m", zero=SEED_003,
                           cpus_present=64))
    assert "OMP_NUM_THREADS" not in dict(cluster.env)


def test_a_shell_that_sets_the_threads_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.running.run import cpus_for_threads
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert cpus_for_threads() == 0
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpus_for_threads() >= 1


def test_sequence_parallelism_on_megatron_deepspeed_is_refused() -> None:
    """13b tp2pp2 + sp crashed at its first step on four H200s, three times (records
    ...131818Z-469543-c8, ...151329Z-15b3fb-c8, ...152337Z-833df7-c8); without a pipeline
    Megatron-DeepSpeed splits the sequence twice (tests/train/test_megatron_deepspeed.py)."""
    def launch(layout: str) -> LaunchPlan:
        return plan(get_preset("13b"), layout, load_platform("local"),
                    options(engine="megatron-deepspeed", gpus_present=4, gbs=64, force=True,
                            data_path="d", vocab_file="v", merge_file="m"))

    for layout in ("tp2pp2sp", "tp4pp1sp"):
        with pytest.raises(ValueError, match=r"Megatron-DeepSpeed splits batches for sequence "
                                             r"parallelism inconsistently: .* Drop sp from the layout"):
            launch(layout)
    assert "--sequence-parallel" not in launch("tp2pp2").train_args


def test_deepspeed_settings_are_refused_with_the_megatron_engine() -> None:
    with pytest.raises(ValueError, match="are DeepSpeed settings: use --engine megatron-deepspeed"):
        plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
             options(gpus_present=1, zero=ZeroSettings(overlap_comm=True)))


def test_bad_deepspeed_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="--zero-offload nvme is not one of none, cpu"):
        _seed_003(zero=ZeroSettings(offload="nvme"))
    with pytest.raises(ValueError, match="reduce_bucket_size must be at least 1 element"):
        _seed_003(zero=ZeroSettings(reduce_bucket_size=0))


@pytest.mark.parametrize(("value", "ok"), [("2e8", 200_000_000), ("500000000", 500_000_000),
                                           ("2.5", None), ("abc", None), ("0", None)])
def test_bucket_sizes_parse_like_the_seed_writes_them(value: str, ok: int | None, capsys) -> None:
    argv = ["run", "345m", "tp4pp1zero3", "--reduce-bucket", value]
    if ok is None:
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert "--reduce-bucket" in capsys.readouterr().err
    else:
        assert build_parser().parse_args(argv).reduce_bucket == ok


def test_seed_003_published_row_matches_its_flops_convention() -> None:
    """Recompute the seed's 4.94 TFLOP/s from its 6.159 samples/s with the stated convention."""
    published = load_published(REPO / "results" / "published.toml")
    row = next(r for r in published.rows if r.source == "seed-003")
    assert (row.samples_per_s, row.tflops_per_gpu) == (6.159, 4.94)
    assert row.flops_convention == "narayanan-recompute"
    preset = get_preset(row.model)
    s, layers, h = row.seq_length, preset.layers, preset.hidden
    vocab = 50688  # GPT-2's 50257 padded to a multiple of 128 x TP4
    flops_per_sample = 96 * s * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    assert round(row.samples_per_s * flops_per_sample / row.gpus / 1e12, 2) == row.tflops_per_gpu


def test_a_single_gpu_fp16_megatron_deepspeed_run_without_a_stage_runs_deepspeed_at_stage_1() -> None:
    """The kit's decision (docs/megatron-deepspeed.md): always through DeepSpeed; no stage named
    is stage 1, which shards nothing over one rank, and the plan says so."""
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("local"),
                  options(engine="megatron-deepspeed", gpus_present=1, precision="fp16",
                          data_path="d", vocab_file="v", merge_file="m"))
    args = launch.train_args
    assert "--fp16" in args and "--deepspeed" in args and args[args.index("--zero-stage") + 1] == "1"
    config = json.loads(launch.ds_config)
    assert config["zero_optimization"] == {"stage": 1}
    assert config["fp16"]["enabled"] and config["fp16"]["loss_scale"] == 0 and "bf16" not in config
    assert any(note.startswith("no ZeRO stage in the layout: DeepSpeed runs stage 1") for note in launch.notes)
    # a stage named, or data parallelism for it to shard over: no note
    for layout, gpus in (("tp1pp1zero1", 1), ("tp1pp1", 2)):
        other = plan(get_preset("1.3b"), layout, load_platform("local"),
                     options(engine="megatron-deepspeed", gpus_present=gpus, precision="fp16",
                             data_path="d", vocab_file="v", merge_file="m"))
        assert not any(note.startswith("no ZeRO stage") for note in other.notes)
