"""The image digest a job prints before launch, read back by collect's parser.

The rendered Slurm scripts are executed by bash with stand-ins for srun and scontrol (the site
tools; tests/planning/test_clusters.py), so the digest line is what the script really prints: sha256sum
run on a real image file, or the digest of a pinned reference.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.records.record import build_record
from bench.render import slurm
from bench.running.output import dry_run_text
from bench.running.provenance import image_digest_from_output
from tests.conftest import options
from tests.planning.test_clusters import RELATIVE_DATA, _host_libfabric, _run_with_standins
from tests.record_factory import record_fields

DIGEST = "sha256:" + "0123456789abcdef" * 4


def _printed(tmp_path: Path, platform: str, image: str, env: dict[str, str] | None = None) -> str:
    script = slurm.render(plan(get_preset("1.3b"), "tp1pp1", load_platform(platform),
                               options(nodes=1, image=image, account="project_1",
                                       data_path=RELATIVE_DATA)))
    script = _host_libfabric(script, tmp_path, ("1.15.2.0",))  # LUMI's, found when the job runs
    result, calls = _run_with_standins(script, tmp_path, ("srun", "scontrol"), env or {})
    assert result.returncode == 0, result.stderr
    assert [c["tool"] for c in calls] == ["scontrol", "srun"]  # printed before launch
    return result.stdout


@pytest.mark.parametrize("platform", ["azure-h200", "lumi"])
def test_an_image_file_is_hashed_when_the_job_starts(tmp_path: Path, platform: str) -> None:
    image = tmp_path / "my image's.sqsh"  # quotes and spaces reach sha256sum intact
    image.write_bytes(b"squashfs stand-in\n" * 1000)
    out = _printed(tmp_path, platform, str(image), {"EBROOTAWSMINOFIMINRCCL": "/appl/plugin"})
    assert f"image={image}\n" in out
    assert image_digest_from_output(out) == {
        "image_digest": "sha256:" + hashlib.sha256(image.read_bytes()).hexdigest(),
        "image_digest_kind": "file-sha256"}


def test_a_missing_image_file_stops_the_job_before_srun_saying_how_to_pull_it(tmp_path: Path) -> None:
    image = tmp_path / "megatron-bench-cuda.sqsh"
    script = slurm.render(plan(get_preset("1.3b"), "tp1pp1", load_platform("azure-h200"),
                               options(nodes=1, image=str(image))))
    result, calls = _run_with_standins(script, tmp_path, ("srun", "scontrol"), {})
    assert result.returncode == 1 and "srun" not in [c["tool"] for c in calls]
    assert result.stderr == (f"error: image file {image} not found: pull it in its folder with "
                             "`nox -s pull -- cuda --runtime enroot` (docs/images.md), or pass "
                             "--image\n")
    assert result.stdout.endswith("BENCH_END status=1\n")
    assert image_digest_from_output(result.stdout) == {"image_digest": None, "image_digest_kind": None}


@pytest.mark.parametrize("image", [f"ghcr.io#megatron-bench-kit/cuda:1@{DIGEST}",
                                   f"ghcr.io#megatron-bench-kit/cuda@{DIGEST}"])
def test_a_reference_pinned_by_digest_is_that_digest(tmp_path: Path, image: str) -> None:
    out = _printed(tmp_path, "azure-h200", image)
    assert image_digest_from_output(out) == {"image_digest": DIGEST,
                                             "image_digest_kind": "registry"}


def test_a_tag_says_why_it_has_no_digest(tmp_path: Path) -> None:
    out = _printed(tmp_path, "azure-h200", "ghcr.io#megatron-bench-kit/cuda:latest")
    assert ("BENCH_IMAGE_DIGEST=unknown image=ghcr.io#megatron-bench-kit/cuda:latest why=a tag "
            "names no digest and pyxis does not say which it pulled") in out
    assert image_digest_from_output(out)["image_digest"] is None


def test_runs_without_a_container_print_no_digest_line() -> None:
    for platform in ("polaris", "local"):
        launch = plan(get_preset("1.3b"), "tp4pp1", load_platform(platform),
                      options(nodes=1, gpus_present=4, account="x") if platform == "polaris"
                      else options(gpus_present=4))
        assert "BENCH_IMAGE_DIGEST" not in dry_run_text(launch)


def test_a_digest_needs_its_kind_in_a_record() -> None:
    fields = record_fields()
    with pytest.raises(ValueError, match="image_digest and image_digest_kind are set together"):
        build_record(**{**fields, "provenance": {"image_digest": DIGEST}})
    with pytest.raises(ValueError, match="sha256:<64 lower-case hex digits>"):
        build_record(**{**fields, "provenance": {"image_digest": "sha256:abc",
                                                 "image_digest_kind": "registry"}})


def test_a_missing_sif_is_refused_at_submit_before_anything_is_written(tmp_path: Path,
                                                                       monkeypatch) -> None:
    from bench.running.jobs import submit

    monkeypatch.setattr(submit.shutil, "which", lambda _: "/usr/bin/sbatch")
    launch = plan(get_preset("1.3b"), "tp1pp1", load_platform("lumi"),
                  options(nodes=1, account="project_1"))
    with pytest.raises(ValueError, match=r"image file megatron-bench-rocm.sif is not in .*, where "
                       r"the job runs: pull it there with `nox -s pull -- rocm --runtime singularity`"):
        submit.submit_plan(launch, tmp_path)
    assert not list(tmp_path.iterdir())
