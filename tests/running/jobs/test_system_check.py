"""The system check's all-reduce and NCCL's network lines: the rendered job, a real collective where
torch is importable, and the parsing of published NCCL_DEBUG=INFO output.

The fixtures are NCCL's own lines as users posted them: ``tests/fixtures/nccl/ofi-plugin.log`` from
github.com/aws/aws-ofi-nccl/issues/161 (NCCL 2.10.3 with aws-ofi-nccl 1.3.0 on EFA, four ranks),
``socket-fallback.log`` from github.com/NVIDIA/nccl/issues/1126 (no plugin: sockets).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.render.scripts import render_script
from bench.running.jobs.system_check import check_output, check_plan, format_report, network_lines
from bench.train.sysinfo import ALLREDUCE_PREFIX, LINE_PREFIX, all_reduce

REPO = Path(__file__).resolve().parents[3]
NCCL = REPO / "tests" / "fixtures" / "nccl"
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _job_output(nccl_log: str, ranks: int = 4, env: dict[str, str] | None = None,
                sums: dict[int, dict] | None = None) -> str:
    """A check job's output: every rank's facts line, NCCL's lines, then each all-reduce line."""
    facts = [LINE_PREFIX + json.dumps({"rank": r, "host": "algo-1", "local_rank": r,
                                       "communication": env or {}}) for r in range(ranks)]
    sums = {r: {"rank": r, "ok": True, "backend": "nccl"} for r in range(ranks)} if sums is None else sums
    return "\n".join([*facts, nccl_log, *(ALLREDUCE_PREFIX + json.dumps(s) for s in sums.values())])


@pytest.mark.parametrize("name", ["lumi", "polaris"])
def test_the_check_job_runs_an_all_reduce_with_nccl_info(name: str) -> None:
    launch = check_plan(load_platform(name), 2, NOW, account="project_1")
    script = render_script(launch)[1]
    assert "export NCCL_DEBUG=INFO\n" in script and "export NCCL_DEBUG_SUBSYS=INIT,NET\n" in script
    assert "-m bench.train.sysinfo" in script and "--all-reduce" in script


def test_the_check_tests_the_environment_of_the_platform_s_training_jobs() -> None:
    # LUMI's jobs keep the RCCL plugin and its NCCL_NET; Polaris's Megatron-DeepSpeed jobs (its
    # default engine) unset ALCF's four plugin variables and leave the plugin off the library path.
    lumi = render_script(check_plan(load_platform("lumi"), 2, NOW, account="project_1"))[1]
    assert "export NCCL_NET='AWS Libfabric'" in lumi and "unset " not in lumi
    polaris = load_platform("polaris")
    check = render_script(check_plan(polaris, 2, NOW, account="project_1"))[1]
    assert "unset NCCL_NET_GDR_LEVEL NCCL_CROSS_NIC NCCL_COLLNET_ENABLE NCCL_NET\n" in check
    assert "export NCCL_NET=" not in check and "aws-ofi-nccl" not in check
    assert "export LD_LIBRARY_PATH=/soft/libraries/hwloc/lib" in check
    from bench.config.presets import get_preset
    from bench.planning.plan import plan
    from tests.conftest import options
    train = render_script(plan(get_preset("6.7b"), "tp4pp1", polaris,
                               options(mbs=1, account="project_1")))[1]
    environment = [line for line in train.splitlines() if line.startswith(("unset ", "export "))]
    assert all(line in check.splitlines() for line in environment if "MASTER" not in line)


@pytest.mark.parametrize("name", ["lumi", "polaris", "azure-h100"])
def test_the_check_reads_no_data_and_has_no_data_guard(name: str) -> None:
    # The documented first job on every site runs before any corpus is made.
    launch = check_plan(load_platform(name), 2, NOW, account="project_1")
    script = render_script(launch)[1]
    assert "data file" not in script and "--data-path" not in script and not launch.data_path


def test_a_loaded_plugin_is_shown_and_nothing_flagged() -> None:
    env = {"NCCL_NET": "AWS Libfabric"}
    report = check_output(_job_output((NCCL / "ofi-plugin.log").read_text(), env=env), 4, env)
    assert report.ok, report.flags
    assert report.network == ("NET/Plugin: Failed to find ncclCollNetPlugin_v4 symbol.",
                              "NET/OFI Using aws-ofi-nccl 1.3.0aws",
                              "NET/OFI Setting FI_EFA_FORK_SAFE environment variable to 1",
                              "NET/OFI Forcing AWS OFI ndev 2",
                              "NET/OFI Selected Provider is efa",
                              "Using network AWS Libfabric")
    shown = format_report(report)
    assert "all-reduce (nccl): 4 of 4 ranks summed right" in shown
    assert "NCCL network (NCCL_DEBUG=INFO):\n  NET/Plugin" in shown
    assert "  Using network AWS Libfabric" in shown and shown.endswith("all 4 ranks agree")


def test_a_fallback_to_sockets_is_flagged_against_the_platforms_nccl_net() -> None:
    output = _job_output((NCCL / "socket-fallback.log").read_text(), ranks=2)
    assert "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation" in \
        network_lines(output)
    assert check_output(output, 2, {}).ok  # no NCCL_NET asked for: sockets may be right
    report = check_output(output, 2, {"NCCL_NET": "AWS Libfabric"})
    assert report.flags[-1] == ("NCCL used network Socket, the platform sets "
                                "NCCL_NET='AWS Libfabric'")


def test_failed_and_missing_all_reduces_are_flagged() -> None:
    sums = {0: {"rank": 0, "ok": True, "backend": "nccl"},
            1: {"rank": 1, "ok": False, "backend": "nccl", "error": "DistBackendError: timed out"}}
    report = check_output(_job_output((NCCL / "ofi-plugin.log").read_text(), sums=sums), 4, {})
    assert "all-reduce failed on rank 1: DistBackendError: timed out" in report.flags
    assert "all-reduce: no result from ranks [2, 3] (hung, or the job ended first)" in report.flags
    assert "all-reduce (nccl): 1 of 4 ranks summed right" in format_report(report)


def test_nccl_without_its_network_lines_is_flagged() -> None:
    report = check_output(_job_output("NCCL version 2.21.5+cuda12.4"), 4, {})
    assert report.flags == ("no NCCL 'Using network' line in the output (NCCL_DEBUG=INFO): which "
                            "network the all-reduce used is unknown",)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is importable")
def test_without_torch_the_all_reduce_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    result = all_reduce()
    assert result["ok"] is False and result["error"].startswith("torch is not importable")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (gloo on CPU)")
def test_two_ranks_sum_over_gloo_on_cpu(tmp_path: Path) -> None:
    """The real collective: two processes, no GPU, gloo on loopback."""
    port = str(_free_port())
    procs = [subprocess.Popen(
        [sys.executable, "-m", "bench.train.sysinfo", "--all-reduce"], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "CUDA_VISIBLE_DEVICES": "",
             "GLOO_SOCKET_IFNAME": "lo"}) for r in range(2)]
    output = "\n".join(p.communicate(timeout=120)[0] for p in procs)
    report = check_output(output, 2, {})
    assert report.ok, (report.flags, output)
    assert format_report(report).count("all-reduce (gloo): 2 of 2 ranks summed right") == 1
