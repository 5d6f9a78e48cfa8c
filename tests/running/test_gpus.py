"""The GPUs a run sees, from nvidia-smi's CSV: their identity (UUIDs) as CUDA_VISIBLE_DEVICES picks
them, and the provenance a record keeps of them."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from bench.records.record import record_from_dict
from bench.running import gpus as hardware
from bench.running import provenance
from tests.record_factory import make_record

# A real line from an H200 machine (--query-gpu=name,driver_version,memory.total,uuid); the second
# GPU is the same with another UUID.
FIRST = "GPU-8442300b-9bec-9809-174b-7bcb20b53a7f"
SECOND = "GPU-1c2d3e4f-0000-1111-2222-333344445555"
CSV = (f"NVIDIA H200, 580.159.04, 143771 MiB, {FIRST}\n"
       f"NVIDIA H200, 580.159.04, 143771 MiB, {SECOND}\n")


def _smi(monkeypatch: pytest.MonkeyPatch, csv: str = CSV) -> None:
    """nvidia-smi answering ``csv``, asked for the fields in the order the CSV holds them."""
    real_run = subprocess.run

    def run(argv, *args, **kwargs):
        if argv[0] != "/usr/bin/nvidia-smi":
            return real_run(argv, *args, **kwargs)
        assert argv[1:] == ["--query-gpu=name,driver_version,memory.total,uuid", "--format=csv,noheader"]
        return subprocess.CompletedProcess(argv, 0, stdout=csv, stderr="")

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(subprocess, "run", run)


def test_every_gpu_is_read_with_its_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    _smi(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hardware.detect_gpus() == hardware.LocalGPUs(
        2, "NVIDIA H200", "580.159.04", pytest.approx(150.76, abs=0.01), (FIRST, SECOND))


@pytest.mark.parametrize("visible,uuids", [
    ("1", (SECOND,)), ("1,0", (SECOND, FIRST)),  # indices
    (SECOND, (SECOND,)), (f"{SECOND},{FIRST}", (SECOND, FIRST)),  # UUIDs
    ("GPU-1c2d3e4f", (SECOND,)),  # a UUID's prefix, as CUDA accepts it
    ("MIG-0b7f1c2d-aaaa-bbbb-cccc-ddddeeeeffff", (FIRST,)),  # not a GPU's: the first, as many
    ("0,7", (FIRST, SECOND)),  # an index the machine lacks: as many as listed, from the first
    ("", ()),
])
def test_cuda_visible_devices_picks_the_gpus_it_names(monkeypatch: pytest.MonkeyPatch, visible: str,
                                                      uuids: tuple[str, ...]) -> None:
    _smi(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    found = hardware.detect_gpus()
    assert (found.count, found.uuids) == (len(uuids), uuids)


def test_a_driver_without_uuids_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _smi(monkeypatch, CSV.replace(SECOND, "[N/A]"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = hardware.detect_gpus()
    assert (found.count, found.uuids) == (2, ())  # all or none: a part names no machine


def test_provenance_keeps_the_uuids_and_a_record_carries_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "software_versions", lambda python: {})
    monkeypatch.setattr(provenance, "detect_gpus", lambda: hardware.LocalGPUs(
        2, "NVIDIA H200", "580.159.04", 150.8, (SECOND, FIRST)))
    collected = provenance.collect()
    assert collected["gpu_uuids"] == [SECOND, FIRST]
    record = make_record(provenance={**make_record().provenance.model_dump(), **collected})
    assert record.provenance.gpu_uuids == [SECOND, FIRST]
    assert record_from_dict(record.model_dump(mode="json")) == record

    monkeypatch.setattr(provenance, "detect_gpus", lambda: hardware.LocalGPUs(0, "", ""))
    assert provenance.collect()["gpu_uuids"] is None


def test_records_written_before_the_uuids_load_with_none() -> None:
    data = make_record().model_dump(mode="json")
    del data["provenance"]["gpu_uuids"]
    assert record_from_dict(data).provenance.gpu_uuids is None
