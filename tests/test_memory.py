"""The memory estimate against peaks measured on one H200 and four H200s (REFERENCE table)."""

from __future__ import annotations

import pytest

from bench.layout import build_layout
from bench.memory import GB, estimate_bytes, fits
from bench.presets import get_preset


@pytest.mark.parametrize("preset,layout,gpus,mbs,gbs,measured_gb", [
    ("1.3b", "tp1pp1", 1, 4, 32, 41), ("6.7b", "dp4", 4, 2, 64, 65), ("13b", "dp4", 4, 1, 64, 110),
])
def test_estimate_is_near_measured(preset: str, layout: str, gpus: int, mbs: int, gbs: int,
                                   measured_gb: float) -> None:
    lay = build_layout(layout, get_preset(preset), gpus, gpus, mbs, gbs)
    assert estimate_bytes(get_preset(preset), lay) / GB == pytest.approx(measured_gb, rel=0.15)


def test_fit_filter() -> None:
    p = get_preset("13b")
    assert fits(p, build_layout("dp4", p, 4, 4), 141)
    assert not fits(p, build_layout("tp1pp1", p, 1, 1), 141)  # 13B on one GPU: ~230 GB
