"""Evidence is append-only: a hash manifest of the dated reports and the records, and the
migrations that name every change made to a listed file after it was listed.

The evidence is every file of a dated report (``docs/reports/YYYY-MM-DD-*`` and everything in its
folder; the template ``docs/reports/README.md`` is not evidence), every record
(``results/records/*.json``) and every kept train log (``results/records/logs/*.log.gz``).
:data:`MANIFEST` lists each one's sha256, :data:`MIGRATIONS` the changes made since (path, old and
new sha256, why). A listed file whose bytes differ from its listed hash, after the migrations that
start from it, is a problem; so is a listed file that is gone without a migration saying so.
``python -m bench evidence`` checks; ``--update-manifest`` appends the files not yet listed and
never rewrites an entry.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from bench.config.paths import CHECKOUT
from bench.config.schema import Strict, Text, hinted, load_toml, problems
from bench.config.tomlfile import DataError
from bench.records.evidence import LOG_DIR, LOG_SUFFIX
from bench.records.store import RECORDS_DIR

MANIFEST = Path("results") / "evidence" / "manifest.json"
"""The hash manifest, under the repository root: ``results/evidence/manifest.json``."""
MIGRATIONS = Path("results") / "evidence" / "migrations.toml"
"""The changes made to listed files, under the repository root: ``results/evidence/migrations.toml``."""
REPORTS = Path("docs") / "reports"
MANIFEST_SCHEMA = "bench.evidence-manifest/1"
DATED = re.compile(r"\d{4}-\d{2}-\d{2}-")  # a dated report's file or folder; README.md is the template
FIX = (f"restore it from git, or name the change in {MIGRATIONS.as_posix()} (path, old_sha256, "
       "new_sha256, why)")
Sha256 = Annotated[str, hinted(r"^[0-9a-f]{64}$", "is not a sha256 (64 lowercase hex digits: sha256sum FILE)")]
DESCRIPTION = (f"Check that every dated report in docs/reports/, every record and every kept train log "
               f"is as {MANIFEST.as_posix()} lists it, or changed only as {MIGRATIONS.as_posix()} says "
               "(path, old and new sha256, why); exit status 1 names each file that is not. "
               "--update-manifest lists the files not yet listed.")


class Manifest(Strict):
    """``files``: each evidence file's path (relative to the repository root, ``/``-separated)
    and the sha256 of its bytes when it was listed."""

    schema_: Literal["bench.evidence-manifest/1"] = Field(alias="schema")
    files: dict[str, Sha256]


class Migration(Strict):
    """One change to a listed file: its bytes went from ``old_sha256`` to ``new_sha256`` (left
    out: the file was deleted), made by ``commit`` where known, and ``why``."""

    path: Text
    old_sha256: Sha256
    new_sha256: Sha256 | None = None
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None
    why: Text


class Migrations(Strict):
    """The ``[[migration]]`` tables of :data:`MIGRATIONS`, oldest first; none by default."""

    migration: tuple[Migration, ...] = ()


def evidence_files(root: Path) -> dict[str, str]:
    """Every evidence file under ``root`` (the dated reports, the records, the kept logs) and
    the sha256 of its bytes, by path relative to ``root``."""
    reports = root / REPORTS
    found = [p for top in sorted(reports.glob("*")) if DATED.match(top.name)
             for p in ([top] if top.is_file() else sorted(top.rglob("*")))]
    records = root / RECORDS_DIR
    found += sorted(records.glob("*.json")) + sorted((records / LOG_DIR).glob(f"*{LOG_SUFFIX}"))
    # A name starting with a dot is a write in progress (a record's or a log's temporary file).
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in found if p.is_file() and not p.name.startswith(".")}


def load_manifest(root: Path) -> Manifest:
    """The manifest of ``root``; a DataError naming the file when it is unreadable or malformed."""
    path = root / MANIFEST
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise DataError(f"{path}: file not found (python -m bench evidence --update-manifest "
                        "writes it)") from None
    except ValidationError as error:
        raise DataError(f"{path}: {'; '.join(problems(error, Manifest))}") from None


def load_migrations(root: Path) -> Migrations:
    """The migrations of ``root`` (none when the file is absent); a DataError names the key."""
    path = root / MIGRATIONS
    return load_toml(path, Migrations) if path.exists() else Migrations()


def _migration_problems(manifest: Manifest, migrations: Migrations) -> list[str]:
    found, seen = [], set()
    for m in migrations.migration:
        if m.path not in manifest.files:
            found.append(f"{m.path}: a migration names it but the manifest does not list it")
        if m.old_sha256 == m.new_sha256:
            found.append(f"{m.path}: a migration from {m.old_sha256[:12]} to itself")
        if (m.path, m.old_sha256) in seen:
            found.append(f"{m.path}: two migrations start from {m.old_sha256[:12]}")
        seen.add((m.path, m.old_sha256))
    return found


def expected_hash(path: str, listed: str, migrations: Migrations) -> str | None:
    """The hash ``path`` should have now: ``listed`` after every migration that follows from it
    (None: a migration deleted it)."""
    steps = {m.old_sha256: m.new_sha256 for m in migrations.migration if m.path == path}
    state: str | None = listed
    seen = set()
    while state in steps and state not in seen:  # a migration back to an earlier hash ends the walk
        seen.add(state)
        state = steps[state]
    return state


def manifest_problems(manifest: Manifest, migrations: Migrations, present: Mapping[str, str]) -> list[str]:
    """One line per listed file that changed or went away with no migration naming it, and per
    migration that cannot apply; empty when the evidence is as listed."""
    found = _migration_problems(manifest, migrations)
    for path, listed in sorted(manifest.files.items()):
        expected, now = expected_hash(path, listed, migrations), present.get(path)
        if now == expected:
            continue
        if now is None:
            found.append(f"{path}: listed in the manifest but deleted; {FIX}")
        elif expected is None:
            found.append(f"{path}: a migration says it was deleted but it is here ({now[:12]})")
        else:
            found.append(f"{path}: sha256 {now[:12]}, the manifest expects {expected[:12]}; {FIX}")
    return found


def appended(manifest: Manifest | None, present: Mapping[str, str]) -> tuple[Manifest, list[str]]:
    """``manifest`` with the files of ``present`` it does not list added (its entries kept as
    they are, changed or not), and the paths added."""
    files = dict(manifest.files) if manifest else {}
    added = sorted(set(present) - set(files))
    files.update({path: present[path] for path in added})
    return Manifest(schema=MANIFEST_SCHEMA, files=dict(sorted(files.items()))), added


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Write ``manifest`` whole (one entry a line, sorted) or not at all."""
    target = root / MANIFEST
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.write_text(json.dumps(manifest.model_dump(by_alias=True), indent=1) + "\n")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def cmd_evidence(args: argparse.Namespace) -> int:
    """``python -m bench evidence [--update-manifest]``: 0 when every listed file is as listed."""
    root, present = args.root, evidence_files(args.root)
    migrations = load_migrations(root)  # a malformed migrations file stops before anything is written
    manifest = load_manifest(root) if (root / MANIFEST).exists() or not args.update_manifest else None
    if args.update_manifest:
        manifest, added = appended(manifest, present)
        write_manifest(root, manifest)
        print(f"{MANIFEST.as_posix()}: {len(added)} file(s) added, {len(manifest.files)} listed")
    found = manifest_problems(manifest, migrations, present)
    for line in found:
        print(f"error: {line}")
    unlisted = len(set(present) - set(manifest.files))
    print(f"evidence: {len(manifest.files)} file(s) listed, {len(migrations.migration)} migration(s), "
          f"{len(found)} problem(s), {unlisted} file(s) not yet listed"
          + (" (python -m bench evidence --update-manifest lists them)" if unlisted else ""))
    return 1 if found else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``evidence`` on the kit's command line."""
    parser = sub.add_parser("evidence", help="check the dated reports and records against their "
                            "hash manifest, or list new ones in it", description=DESCRIPTION)
    parser.add_argument("--update-manifest", action="store_true",
                        help=f"append the evidence files not yet listed to {MANIFEST.as_posix()}; "
                        "listed entries are never rewritten")
    parser.add_argument("--root", type=Path, default=CHECKOUT or Path(), metavar="DIR",
                        help="the repository whose evidence to check (default: the kit's checkout, "
                        "else the current folder)")
    parser.set_defaults(func=cmd_evidence)
