"""``python -m bench schemas``: the JSON Schemas of records and data files, written into
``results/schema/``, where a site can validate its own files against them.

``record.schema.json`` is today's record (``bench.record/3``); the schema of each older record
version stays beside it as it was last exported (``record-1.schema.json``,
``record-2.schema.json``), never regenerated: the kit reads those records through
:mod:`bench.records.migrate`, and a site validates them against it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pydantic import BaseModel

from bench.config.platforms import AcceleratorFile, PlatformFile
from bench.images.pins import REPO_ROOT, Pins
from bench.records.record import Record

SCHEMA_DIR = REPO_ROOT / "results" / "schema"
# kept as exported, by version
OLDER_RECORDS = {"bench.record/1": "record-1.schema.json", "bench.record/2": "record-2.schema.json"}
MODELS: dict[str, type[BaseModel]] = {"record": Record, "platform": PlatformFile,
                                      "accelerator": AcceleratorFile, "pins": Pins}


def json_schemas() -> dict[str, str]:
    """The JSON Schema files of ``results/schema/``, by file name."""
    return {f"{name}.schema.json": json.dumps(model.model_json_schema(by_alias=True), indent=2)
            + "\n" for name, model in MODELS.items()}


def cmd_schemas(args: argparse.Namespace) -> int:
    """Write the JSON Schemas into ``--out`` (default ``results/schema/``)."""
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in json_schemas().items():
        target = args.out / name
        partial = target.with_name(f".{name}.partial")
        try:  # a full disk leaves no half-written schema: the file is renamed into place whole
            partial.write_text(text)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        print(target)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Register ``schemas`` on the kit's command line."""
    parser = sub.add_parser("schemas", help="write the JSON Schemas of records and data files",
                            description=__doc__)
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR,
                        help="folder for the *.schema.json files (default: the kit's results/schema)")
    parser.set_defaults(func=cmd_schemas)
