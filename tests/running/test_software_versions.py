"""The versions a record's provenance names, read by the training Python: Transformer Engine's from
its package metadata, never by importing it, and null where TE is not on the path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bench.records.provenance import Provenance
from bench.running.provenance import SOFTWARE, software_versions

# The cases below put Transformer Engine, or its metadata alone, on the path: a TE there already
# would answer for them.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None,
                                reason="Transformer Engine is installed here")
NEVER_IMPORTED = 'raise RuntimeError("the version probe imported Transformer Engine")\n'


def _site(tmp_path: Path, *, package: bool, metadata: bool) -> Path:
    """A folder for PYTHONPATH holding Transformer Engine's package, its metadata, or both."""
    site = tmp_path / "site"
    site.mkdir()
    if package:
        (site / "transformer_engine").mkdir()
        (site / "transformer_engine" / "__init__.py").write_text(NEVER_IMPORTED)
    if metadata:
        info = site / "transformer_engine-2.20.2.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.20.2\n")
    return site


def _versions(site: Path) -> dict[str, str | None]:
    return software_versions(("env", f"PYTHONPATH={site}", sys.executable))


@pytest.mark.parametrize(("package", "metadata", "version"), [
    (True, True, "2.20.2"),
    # TE 2.x sets its __version__ from the metadata at import: without it, it does not import.
    (True, False, None),
    (False, True, None),  # metadata left behind by a TE that is gone
    (False, False, None),
])  # fmt: skip
def test_transformer_engine_s_version_comes_from_its_metadata(
        tmp_path: Path, package: bool, metadata: bool, version: str | None) -> None:
    found = _versions(_site(tmp_path, package=package, metadata=metadata))
    assert set(found) == set(SOFTWARE)
    assert found["transformer_engine"] == version


def test_every_version_the_probe_reads_is_a_provenance_field() -> None:
    assert set(SOFTWARE) <= set(Provenance.model_fields)
    assert software_versions(("false",)) == dict.fromkeys(SOFTWARE)
