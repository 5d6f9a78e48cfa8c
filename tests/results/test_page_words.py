"""The results page's words for a reader: a crashed row says why it crashed (not only that torchrun's
worker failed), and the best-per-model table says where its rows are not like with like."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bench.records.record import build_record
from bench.records.store import load_record
from bench.results import best
from bench.results.runs import failure_reason
from bench.results.words import layers, settings, variant_text
from tests.record_factory import failed_fields, make_record

LAUNCHER = "exit code 1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
REPO = Path(__file__).parents[2]
TORCHRUN_TAIL = ["Traceback (most recent call last):", "    raise ChildFailedError(",
                 "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "]


def _crashed(log_errors: list[str], log_tail: list[str]) -> object:
    return build_record(**failed_fields(status="crashed", reason=LAUNCHER, log_errors=log_errors,
                                        log_tail=log_tail))


def test_the_workers_exception_replaces_the_launchers() -> None:
    run = _crashed(["[rank0]: Traceback (most recent call last):"],
                   ["[rank0]: RuntimeError: view size is not compatible with input tensor's size",
                    *TORCHRUN_TAIL])
    assert failure_reason(run) == "exit code 1: RuntimeError: view size is not compatible with input tensor's size"


def test_a_worker_killed_by_a_signal_is_named() -> None:
    run = _crashed([], ["E1123 api.py:986] failed (exitcode: -11) local_rank: 0 (pid: 2531) of binary: python",
                        *TORCHRUN_TAIL])
    assert failure_reason(run) == "exit code 1: local rank 0 was killed by signal 11 (SIGSEGV)"


def test_an_error_line_kept_before_the_tail_is_used() -> None:
    run = _crashed(["ERROR:megatron.core.datasets.utils:Failed to compile the C++ dataset helper functions"],
                   TORCHRUN_TAIL)
    assert failure_reason(run).endswith(": ERROR:megatron.core.datasets.utils:Failed to compile the C++ "
                                        "dataset helper functions")


def test_a_reason_without_a_better_line_stays() -> None:
    assert failure_reason(_crashed([], TORCHRUN_TAIL)) == LAUNCHER
    oom = build_record(**failed_fields())
    assert failure_reason(oom) == oom.reason


def _best(model: str, accelerator: str, gpus: int, micro: int, global_: int) -> SimpleNamespace:
    return SimpleNamespace(model=model, accelerator=accelerator, gpus=gpus, micro_batch=micro,
                           global_batch=global_)


def test_the_best_table_says_when_a_models_rows_are_not_like_with_like() -> None:
    # 1.3b's best bf16 ran at micro-batch 8 and its best msamp-o1 at 4: the table must say so
    note = best._unlike_note([_best("1.3b", "h200-sxm", 1, 8, 32), _best("1.3b", "h200-sxm", 1, 4, 32),
                                  _best("13b", "h200-sxm", 4, 1, 64), _best("13b", "h200-sxm", 4, 1, 64)])
    assert note[0].startswith("Not like with like: the best rows of 1.3B ran on different hardware")
    assert "13B" not in note[0]
    assert best._unlike_note([_best("13b", "h200-sxm", 4, 1, 64)]) == []


def test_an_images_version_stamp_is_not_a_setting_of_the_row() -> None:
    # A real record from four H200s whose shell had NVIDIA's NCCL_VERSION exported before the kit
    # kept version stamps out of variants: its row is the configuration's, capped at 80 GB.
    path = REPO / "results" / "records" / "13b_tp2pp2dp1sp_local_20261127T100626Z-b08dd2-c3.json"
    run = load_record(path)
    assert run.variant["env:NCCL_VERSION"] == "2.28.3-1"
    # It ran with a measured default's graphs and dropout 0 (in its argv alone): read as settings.
    assert settings(run) == {"gpu_memory_cap_gb": "80", "cuda_graphs": "te", "dropout": "0"}
    assert "NCCL_VERSION" not in variant_text(run)


def test_te_runs_that_fused_the_weight_gradient_accumulation_are_named_apart() -> None:
    """The kit at fa1e3a2 ran Transformer Engine without apex with gradient accumulation fusion in
    TE's layers; the morning's runs of the same key but that flag did not: the page tells them apart."""
    records = REPO / "results" / "records"
    fused = load_record(records / "2.7b_tp1pp1dp1_local_20261129T092705Z-1619a5.json")
    unfused = load_record(records / "2.7b_tp1pp1dp1_local_20261129T061735Z-bea1ca.json")
    assert (fused.implementation, unfused.implementation) == ("te", "te")
    assert (layers(fused), layers(unfused)) == ("TE, wgrad fused", "TE")


def test_local_layers_where_transformer_engine_is_installed_are_named_so() -> None:
    """Local layers beside an installed TE step Adam with TE's FusedAdam: another configuration
    than local layers without TE, and the page says which (older records carry no TE version)."""
    alone = make_record(implementation="local")
    beside = alone.model_copy(update={"provenance": alone.provenance.model_copy(
        update={"transformer_engine": "2.20.2"})})
    assert layers(alone) == "no TE"
    assert layers(beside) == "local, TE installed"
    assert layers(beside.model_copy(update={"implementation": "te"})) == "TE"


def test_local_layers_built_with_apex_are_named_so() -> None:
    """Where the training Python has apex, megatron-core's local layers take its fused layer norm,
    masked softmax and wgrad accumulation, and the kit's argv drops the flags that turn them off:
    another configuration, which the page names."""
    from bench.config.capabilities import Capabilities, megatron_flags

    argv = ["--num-layers", "32"]
    plain = make_record(implementation="local").model_copy(
        update={"argv": argv + megatron_flags(Capabilities())})
    apex = plain.model_copy(update={"argv": argv + megatron_flags(Capabilities(
        apex_layer_norm=True, fused_wgrad=True, fused_softmax=True))})
    assert (layers(plain), layers(apex)) == ("no TE", "no TE, apex")
