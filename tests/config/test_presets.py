"""Every preset file loads; shapes match the GPT-3 paper / Megatron; users add presets as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.presets import KIT_PRESETS_DIR, get_preset, load_presets, preset_files
from bench.config.tomlfile import DataError


@pytest.mark.parametrize("path", sorted(KIT_PRESETS_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_every_preset_file_loads(path: Path) -> None:
    assert path in preset_files()
    assert load_presets()


@pytest.mark.parametrize("name,layers,hidden,heads,seq", [
    ("125m", 12, 768, 12, 2048), ("345m", 24, 1024, 16, 1024), ("350m", 24, 1024, 16, 2048),
    ("760m", 24, 1536, 16, 2048), ("1.3b", 24, 2048, 16, 2048), ("2.7b", 32, 2560, 32, 2048),
    ("6.7b", 32, 4096, 32, 2048), ("13b", 40, 5120, 40, 2048), ("175b", 96, 12288, 96, 2048),
])
def test_gpt3_shapes(name: str, layers: int, hidden: int, heads: int, seq: int) -> None:
    p = get_preset(name)
    assert (p.layers, p.hidden, p.heads, p.seq_length) == (layers, hidden, heads, seq)
    assert p.vocab_size == 51200 and p.ffn_hidden == 4 * hidden


def test_user_preset_without_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.toml").write_text(
        '[presets."tiny"]\nlayers = 2\nhidden = 256\nheads = 4\nseq_length = 512\n'
        'vocab_size = 1024\nmicro_batch = 2\nglobal_batch = 8\n')
    monkeypatch.setenv("BENCH_PRESETS_DIR", str(tmp_path))
    assert get_preset("tiny").hidden == 256
    assert "13b" in load_presets()


@pytest.mark.parametrize("body,message", [
    ('[presets."x"]\nlayers = 2\n', "missing key 'hidden'"),
    ('[presets."x"]\nlayers = 2\nhidden = 250\nheads = 4\nseq_length = 8\nvocab_size = 8\n'
     'micro_batch = 1\nglobal_batch = 1\n', "not divisible by heads"),
    ('[presets."x"]\nlayers = "2"\nhidden = 256\n', "'layers' must be an integer"),
    ('[presets."x"]\nlayers = 2\nhidden = 256\nheads = 4\nseq_length = 8\nvocab_size = 8\n'
     'micro_batch = 1\nglobal_batch = 1\nlayer = 3\n', "unknown key(s) layer"),
])
def test_bad_preset_names_file_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       body: str, message: str) -> None:
    (tmp_path / "bad.toml").write_text(body)
    monkeypatch.setenv("BENCH_PRESETS_DIR", str(tmp_path))
    with pytest.raises(DataError, match="bad.toml") as err:
        load_presets()
    assert message in str(err.value)


def test_unknown_preset_lists_known() -> None:
    with pytest.raises(ValueError, match="known presets: .*13b"):
        get_preset("14b")
