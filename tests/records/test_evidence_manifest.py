"""Evidence is append-only: the dated reports, the records and their kept logs are as
results/evidence/manifest.json lists them, or changed only as results/evidence/migrations.toml says.

A failure here names the file. Restore it from git; or, when the change is meant (a report's typo
is not a reason), add a ``[[migration]]`` with its path, old and new sha256 and why. New files are
listed with ``python -m bench evidence --update-manifest``, which never rewrites an entry."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.config.tomlfile import DataError
from bench.records import manifest as m

REPO = Path(__file__).resolve().parents[2]
TIMER_SCRIPTS = ("docs/reports/2026-11-25-h200-msamp/fp8_linear_bench.py",
                 "docs/reports/2026-11-25-h200-msamp/optimizer_step_bench.py",
                 "docs/reports/2026-11-26-h100-msamp/fp8_linear_bench.py")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_repositorys_evidence_is_as_its_manifest_lists_it() -> None:
    found = m.manifest_problems(m.load_manifest(REPO), m.load_migrations(REPO), m.evidence_files(REPO))
    assert not found, "\n".join(found)


def test_the_manifest_lists_the_reports_the_records_and_the_kept_logs() -> None:
    listed = m.load_manifest(REPO).files
    assert "docs/reports/2026-11-25-h100x2-parallelism/h100x2.sh" in listed
    assert "docs/reports/README.md" not in listed  # the template is the kit's, not evidence
    assert sum(p.startswith("results/records/logs/") and p.endswith(".log.gz") for p in listed) >= 143
    assert sum(p.startswith("results/records/") and p.endswith(".json") for p in listed) >= 338


def test_the_reports_scripts_switched_to_the_kits_timer_are_migrations() -> None:
    """Three report scripts got the kit's timer after their figures were measured."""
    listed, migrations = m.load_manifest(REPO).files, m.load_migrations(REPO).migration
    for path in TIMER_SCRIPTS:
        (migration,) = [one for one in migrations if one.path == path]
        assert migration.new_sha256 == listed[path] != migration.old_sha256
        assert migration.commit and "timer" in migration.why


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one dated report, one record and its log, all listed."""
    (tmp_path / "docs/reports/2026-01-02-h200-topic").mkdir(parents=True)
    (tmp_path / "docs/reports/2026-01-02-h200-topic.md").write_text("# report\n")
    (tmp_path / "docs/reports/2026-01-02-h200-topic/run.sh").write_text("echo run\n")
    (tmp_path / "docs/reports/README.md").write_text("# template\n")
    (tmp_path / "results/records/logs").mkdir(parents=True)
    (tmp_path / "results/records/a_run.json").write_text("{}\n")
    (tmp_path / "results/records/logs/a_run.log.gz").write_bytes(b"\x1f\x8b")
    (tmp_path / "results/records/logs/.a_run.tmp").write_bytes(b"half")  # a write in progress
    assert main(["evidence", "--update-manifest", "--root", str(tmp_path)]) == 0
    return tmp_path


def _migrate(root: Path, path: str, old: bytes, new: bytes | None, why: str = "a reason") -> None:
    new_line = f'new_sha256 = "{_sha(new)}"\n' if new is not None else ""
    with (root / m.MIGRATIONS).open("a") as handle:
        handle.write(f'[[migration]]\npath = "{path}"\nold_sha256 = "{_sha(old)}"\n{new_line}why = "{why}"\n')


def test_the_manifest_lists_every_evidence_file_and_not_the_template(repo: Path) -> None:
    assert sorted(m.load_manifest(repo).files) == [
        "docs/reports/2026-01-02-h200-topic.md", "docs/reports/2026-01-02-h200-topic/run.sh",
        "results/records/a_run.json", "results/records/logs/a_run.log.gz"]


def test_a_changed_report_fails_naming_the_file_and_the_fix(repo: Path, capsys) -> None:
    (repo / "docs/reports/2026-01-02-h200-topic/run.sh").write_text("echo other\n")
    capsys.readouterr()
    assert main(["evidence", "--root", str(repo)]) == 1
    out = capsys.readouterr().out
    assert "error: docs/reports/2026-01-02-h200-topic/run.sh: sha256 " in out
    assert "restore it from git, or name the change in results/evidence/migrations.toml" in out


def test_a_deleted_record_fails(repo: Path) -> None:
    (repo / "results/records/a_run.json").unlink()
    found = m.manifest_problems(m.load_manifest(repo), m.load_migrations(repo), m.evidence_files(repo))
    assert found == ["results/records/a_run.json: listed in the manifest but deleted; restore it from git, "
                     "or name the change in results/evidence/migrations.toml (path, old_sha256, new_sha256, why)"]


def test_a_migration_that_names_the_change_passes_and_a_wrong_one_does_not(repo: Path) -> None:
    script = repo / "docs/reports/2026-01-02-h200-topic/run.sh"
    script.write_text("echo two\n")
    _migrate(repo, "docs/reports/2026-01-02-h200-topic/run.sh", b"echo other\n", b"echo two\n")
    assert main(["evidence", "--root", str(repo)]) == 1  # its old hash is not the listed one
    _migrate(repo, "docs/reports/2026-01-02-h200-topic/run.sh", b"echo run\n", b"echo other\n")
    assert main(["evidence", "--root", str(repo)]) == 0  # listed -> other -> two: a chain
    script.write_text("echo three\n")
    assert main(["evidence", "--root", str(repo)]) == 1


def test_a_deletion_named_by_a_migration_passes(repo: Path) -> None:
    (repo / "results/records/logs/a_run.log.gz").unlink()
    _migrate(repo, "results/records/logs/a_run.log.gz", b"\x1f\x8b", None, "kept twice")
    assert main(["evidence", "--root", str(repo)]) == 0


def test_a_migration_of_an_unlisted_file_or_to_itself_is_a_problem(repo: Path) -> None:
    _migrate(repo, "docs/reports/2026-01-02-h200-topic/other.sh", b"a", b"b")
    _migrate(repo, "results/records/a_run.json", b"{}\n", b"{}\n")
    found = m.manifest_problems(m.load_manifest(repo), m.load_migrations(repo), m.evidence_files(repo))
    assert found == ["docs/reports/2026-01-02-h200-topic/other.sh: a migration names it but the manifest "
                     "does not list it",
                     f"results/records/a_run.json: a migration from {_sha(b'{}' + bytes([10]))[:12]} to itself"]


def test_a_migration_without_why_is_refused_naming_the_key(repo: Path) -> None:
    (repo / m.MIGRATIONS).write_text(f'[[migration]]\npath = "x"\nold_sha256 = "{_sha(b"a")}"\n')
    with pytest.raises(DataError, match=r"migrations.toml: missing key 'migration.0.why'"):
        m.load_migrations(repo)


def test_update_appends_new_files_and_never_rewrites_an_entry(repo: Path, capsys) -> None:
    before = m.load_manifest(repo).files
    (repo / "results/records/a_run.json").write_text('{"edited": true}\n')
    (repo / "results/records/b_run.json").write_text("{}\n")
    (repo / "docs/reports/2026-01-03-h200x4-next.md").write_text("# next\n")
    capsys.readouterr()
    assert main(["evidence", "--update-manifest", "--root", str(repo)]) == 1  # the edit still fails
    out = capsys.readouterr().out
    assert "results/evidence/manifest.json: 2 file(s) added, 6 listed" in out
    assert "error: results/records/a_run.json: sha256" in out
    after = m.load_manifest(repo).files
    assert {p: after[p] for p in before} == before
    assert set(after) - set(before) == {"results/records/b_run.json", "docs/reports/2026-01-03-h200x4-next.md"}


def test_new_files_are_allowed_and_counted(repo: Path, capsys) -> None:
    (repo / "results/records/b_run.json").write_text("{}\n")
    capsys.readouterr()
    assert main(["evidence", "--root", str(repo)]) == 0
    assert "1 file(s) not yet listed (python -m bench evidence --update-manifest lists them)" in \
        capsys.readouterr().out


def test_a_malformed_manifest_is_an_error_naming_it(repo: Path, capsys) -> None:
    (repo / m.MANIFEST).write_text(json.dumps({"schema": "bench.evidence-manifest/1", "files": {"a": "b"}}))
    assert main(["evidence", "--root", str(repo)]) == 2
    assert "manifest.json: files.a: 'b' is not a sha256 (64 lowercase hex digits" in capsys.readouterr().err


def test_without_a_manifest_the_check_says_how_to_write_one(tmp_path: Path, capsys) -> None:
    assert main(["evidence", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "python -m bench evidence --update-manifest writes it" in err
    assert not (tmp_path / "results").exists()


def test_appending_keeps_the_manifest_sorted() -> None:
    manifest, added = m.appended(m.Manifest(schema="bench.evidence-manifest/1", files={"b": "0" * 64}),
                               {"a": "1" * 64, "b": "2" * 64})
    assert added == ["a"] and list(manifest.files.items()) == [("a", "1" * 64), ("b", "0" * 64)]
