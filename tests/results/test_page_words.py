"""The results page's words for a reader: a crashed row says why it crashed (not only that torchrun's
worker failed), and the best-per-model table says where its rows are not like with like."""

from __future__ import annotations

from types import SimpleNamespace

from bench.records.record import build_record
from bench.results import markdown
from bench.results.runs import failure_reason
from tests.record_factory import failed_fields

LAUNCHER = "exit code 1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
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
    note = markdown._unlike_note([_best("1.3b", "h200-sxm", 1, 8, 32), _best("1.3b", "h200-sxm", 1, 4, 32),
                                  _best("13b", "h200-sxm", 4, 1, 64), _best("13b", "h200-sxm", 4, 1, 64)])
    assert note[0].startswith("Not like with like: the best rows of 1.3B ran on different hardware")
    assert "13B" not in note[0]
    assert markdown._unlike_note([_best("13b", "h200-sxm", 4, 1, 64)]) == []
