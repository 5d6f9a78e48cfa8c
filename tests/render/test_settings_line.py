"""The job script's header names CUDA graphs and dropout as typed settings, defaults included."""

from __future__ import annotations

from bench.config.capabilities import Capabilities
from bench.config.platforms import load_platform
from bench.config.presets import get_preset
from bench.planning.plan import plan
from bench.planning.tuning import Tuning
from bench.render.common import header
from tests.conftest import options

FOUR_H200 = {"gpus_present": 4, "gpu_name": "NVIDIA H200", "gbs": 64,
             "capabilities": Capabilities(transformer_engine=True)}


def _settings(**kw: object) -> str:
    launch = plan(get_preset("13b"), "tp1pp4", load_platform("local"), options(**{**FOUR_H200, **kw}))
    (line,) = (line for line in header(launch) if line.startswith("# settings: "))
    return line


def test_the_header_says_the_settings_the_run_types() -> None:
    assert _settings() == "# settings: --cuda-graphs none --dropout 0.1"
    assert _settings(tuning=Tuning(cuda_graphs="te", dropout=0.0)) == (
        "# settings: --cuda-graphs te --dropout 0")
