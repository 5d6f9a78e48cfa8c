"""Precisions side by side, from the kept records: what the README and the reports quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.records.record import Record
from bench.records.store import load_records
from bench.results.precisions import partner, section, side_by_side
from bench.results.spread import Figure, Ratio
from tests.record_factory import make_record

BASE = make_record()

RECORDS = Path(__file__).parents[2] / "results" / "records"


@pytest.fixture(scope="module")
def groups():
    runs, _ = load_records(RECORDS)
    return {group.title: group for group in side_by_side(runs)}


def _partners(group) -> dict[str, tuple[str, str, float] | None]:
    """Each column's like-for-like bf16 column, what they differ in and the ratio of medians."""
    found = {}
    for column in group.columns:
        paired = partner(column, group)
        found[column.name] = None if paired is None else (
            paired[0].name, paired[1],
            round(Figure.of_runs(column.runs).median / Figure.of_runs(paired[0].runs).median, 2))
    return found


def test_the_two_h100_dp2_group_sets_fp8_and_the_stacks_beside_bf16(groups) -> None:
    (title,) = [t for t in groups
                if t.startswith("2.7B tp1pp1dp2, micro/global batch 4/32") and t.endswith("kit 460cbdc")]
    partners = _partners(groups[title])
    assert partners["fp8-delayed TE"] == ("bf16 TE", "precision", 1.23)
    assert partners["fp8-current TE"] == ("bf16 TE", "precision", 1.19)
    assert partners["bf16 no TE"] == ("bf16 TE", "layers", 1.01)


def test_the_ms_amp_modes_are_one_group_of_five_precisions_and_recipes(groups) -> None:
    (title,) = [t for t in groups if t.startswith("1.3B tp1pp1dp1, micro/global batch 4/32, NVIDIA H200 "
                                                  "SXM 141GB, real data, kits 2247c3e")]
    group = groups[title]
    assert [c.run.precision for c in group.columns] == ["bf16", "fp8-delayed", "msamp-o1", "msamp-o2", "fp4"]
    assert Figure.of_runs(group.columns[0].runs).median == pytest.approx(462.4, abs=0.05)
    # MS-AMP's and fp4's linears are the kit's own, not TE: precision and layers differ, no ratio.
    partners = _partners(group)
    assert partners["fp8-delayed TE"][:2] == ("bf16 TE", "precision")
    assert [partners[c.name] for c in group.columns[2:]] == [None, None, None]
    page = "\n".join(section([group], "records"))
    assert "| recipe | – | – | MS-AMP o1 | MS-AMP o2 | fp4 |" in page
    assert page.count("not like for like") >= 3


def test_one_configuration_is_one_column_whatever_command_ran_it(groups) -> None:
    """Two H200s, 2026-11-26, kit 56bf00c: te ran at 468.2 in msamp-te-modules and at 537.2 in
    msamp-te-cuda-graph ten minutes later; one claim, one figure with its spread, and each ratio
    to the other columns with its noise."""
    group = groups["2.7B tp1pp1dp2, micro/global batch 4/32, NVIDIA H200 SXM 141GB, real data, kits "
                   "382c9e2, 55d1e3e, 56bf00c, 9bf2ce1, fab02e9"]
    figures = {c.name: Figure.of_runs(c.runs).text() for c in group.columns}
    # Seven runs of one key from four commits are one column; the 537.2 of that day among them.
    assert figures["fp8-delayed TE"] == "537.2 (n=7, 468.2–575.0, CV 7.7 %)"
    assert figures["fp8-delayed TE cuda_graphs=te"] == "572.0 (n=1)"


def test_titles_name_the_hardware_and_kit_never_a_campaign(groups) -> None:
    assert not [t for t in groups if "campaign" in t or "h100x2" in t]
    capped = [t for t in groups if "capped at 80 GB" in t]
    cards = ("NVIDIA H200 SXM 141GB capped at 80 GB", "NVIDIA H100 SXM5 80GB capped at 80 GB (the card")
    assert capped and all(any(card in t for card in cards) for t in capped)
    assert all(any(card in t for t in capped) for card in cards)  # the H100's 81,559 MiB too
    assert all(t.rsplit(", ", 1)[-1].startswith(("kit ", "kits ")) or ", kits " in t for t in groups)


def test_runs_that_differ_in_anything_but_precision_and_layers_stay_apart(groups) -> None:
    for group in groups.values():
        first = group.columns[0].run
        for column in group.columns:
            run = column.run
            assert (run.preset.name, run.layout.name, run.layout.micro_batch, run.layout.global_batch,
                    run.platform.accelerator) == (first.preset.name, first.layout.name,
                                                  first.layout.micro_batch, first.layout.global_batch,
                                                  first.platform.accelerator)
        assert len({c.name for c in group.columns}) == len(group.columns) >= 2


def test_fp8_at_its_default_micro_batch_is_set_beside_bf16_at_that_micro_batch_only() -> None:
    def run(precision: str, mbs: int, minute: int) -> Record:
        return make_record(run_id=f"13b_dp4_h200x4_20261121T20{minute:02d}00Z", precision=precision,
                           started_at=f"2026-11-21T20:{minute:02d}:00Z",
                           finished_at=f"2026-11-21T20:{minute + 5:02d}:00Z",
                           layout={**BASE.layout.model_dump(), "micro_batch": mbs},
                           labels={"campaign": "h100x2"})

    fp8, bf16_preset = run("fp8-delayed", 8, 10), run("bf16", 4, 20)
    assert side_by_side([fp8, bf16_preset]) == []
    (group,) = side_by_side([fp8, bf16_preset, run("bf16", 8, 30)])
    assert {c.run.layout.micro_batch for c in group.columns} == {8}
    assert "micro/global batch 8/64" in group.title


def _run(precision: str, minute: int, uuids: list[str] | None, commit: str = "0123abc",
         day: str = "2026-11-21") -> Record:
    return make_record(run_id=f"13b_dp4_h200x4_{day.replace('-', '')}T20{minute:02d}00Z",
                       precision=precision, started_at=f"{day}T20:{minute:02d}:00Z",
                       finished_at=f"{day}T20:{minute + 5:02d}:00Z", labels={"campaign": "h200x4"},
                       provenance={**BASE.provenance.model_dump(), "kit_commit": commit,
                                   "gpu_uuids": uuids})


MACHINE_A = [f"GPU-aaaaaaa{i}-9bec-9809-174b-7bcb20b53a7f" for i in range(4)]
MACHINE_B = [f"GPU-bbbbbbb{i}-9bec-9809-174b-7bcb20b53a7f" for i in range(4)]


def test_a_setup_on_several_machines_of_one_commit_is_one_group_with_its_spread() -> None:
    runs = [_run("bf16", 10, MACHINE_A), _run("fp8-delayed", 20, MACHINE_A),
            _run("bf16", 10, MACHINE_B, day="2026-11-22"), _run("fp8-delayed", 20, MACHINE_B, day="2026-11-22")]
    (group,) = side_by_side(runs)
    assert [len(c.runs) for c in group.columns] == [2, 2]
    assert group.title.endswith("mock data, kit 0123abc")
    page = "\n".join(section([group], "records"))
    assert "| × bf16, like for like | 1 | quick (n=2 / 2) (precision, vs " in page and "(n=2" in page


def test_kit_commits_share_a_group_unless_split_by_commit() -> None:
    runs = [_run("bf16", 10, None, "1111111aaaa"), _run("fp8-delayed", 20, None, "1111111aaaa"),
            _run("bf16", 10, None, "2222222bbbb", day="2026-11-22"),
            _run("fp8-delayed", 20, None, "2222222bbbb", day="2026-11-22")]
    split = side_by_side(runs, by_commit=True)
    assert [g.title.rsplit(", ", 1)[1] for g in split] == ["kit 1111111", "kit 2222222"]
    (pooled,) = side_by_side(runs)
    assert pooled.title.endswith("kits 1111111, 2222222")
    assert [len(c.runs) for c in pooled.columns] == [2, 2]
    assert side_by_side(runs[:1] + runs[3:], by_commit=True) == []  # never a column of another commit


def test_a_lone_pair_s_ratio_says_its_run_to_run_noise_is_unknown() -> None:
    (group,) = side_by_side([_run("bf16", 10, MACHINE_A), _run("fp8-delayed", 20, MACHINE_A)])
    ratio = Ratio.of(group.columns[1].runs, group.columns[0].runs)
    assert ratio.single and ratio.text().endswith(", 1 run") and ratio.noise > 0


def test_an_unrecorded_version_is_no_difference_and_the_nearest_partner_is_taken(groups) -> None:
    """2.7b at 8/32 on one H200 has two keys of Transformer Engine's layers at dropout 0, one from
    before records carried TE's version: they are not each other's partner, and the local layers'
    column (also without a version) is set beside the one whose key differs in the layers alone."""
    (title,) = [t for t in groups if t.startswith("2.7B tp1pp1dp1, micro/global batch 8/32, NVIDIA H200 "
                                                  "SXM 141GB, mock data")]
    partners = _partners(groups[title])
    assert partners["bf16 TE dropout=0 [28e0e5a4a8]"][:2] == ("bf16 no TE dropout=0", "layers")
    assert partners["bf16 no TE dropout=0"] == ("bf16 TE dropout=0 [6da252e5e7]", "layers", 1.02)
    assert partners["fp8-delayed TE dropout=0 [fad691fbda]"] == (
        "bf16 TE dropout=0 [6da252e5e7]", "precision", 1.37)
    # The fp8 runs of 23:13-23:21 UTC carry TE's version: their partner is the bf16 key that does.
    assert partners["fp8-delayed TE dropout=0 [f7d147e40f]"] == (
        "bf16 TE dropout=0 [28e0e5a4a8]", "precision", 1.37)
    assert partners["fp8-delayed TE cuda_graphs=te, dropout=0"] == (
        "bf16 TE cuda_graphs=te, dropout=0", "precision", 1.36)
