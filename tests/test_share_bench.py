"""The share benchmark's analysis (``benchmarks/share.py``) on synthetic member data: the
throughput window from the first record of any member to the n-th of all, the split of a
slow member beside a fast one, the members' files read back; and the scenario's opt-in
place and its table. Pure: no broker."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from benchmarks import share
from benchmarks.scenarios import FAMILIES, OPT_IN
from benchmarks.scenarios import share as scenario


def test_window_runs_from_the_first_record_of_any_member_to_the_nth_of_all() -> None:
    m1 = [2_000_000_000, 2_100_000_000, 2_500_000_000]
    m2 = [1_500_000_000, 2_200_000_000, 3_000_000_000, 9_000_000_000]
    first, end, records = share.throughput_window([m1, m2], 5)
    assert first == pytest.approx(1.5)  # m2's first, though m1 started the list
    assert end == pytest.approx(2.5)  # the 5th in time order; m2's later ones do not count
    assert records == 5
    # fewer handed out than asked: the window ends at the last one
    assert share.throughput_window([m1], 10) == (pytest.approx(2.0), pytest.approx(2.5), 3)
    with pytest.raises(ValueError):
        share.throughput_window([[], []], 3)


def test_split_counts_each_members_work_redeliveries_missing_and_the_peak_held() -> None:
    slow = [(1_000_000_000, 0, 500), (1_100_000_000, 1, 499), (40_000_000_000, 2, 498)]
    fast = [(1_050_000_000, s, 1) for s in range(3, 10)] + [(35_000_000_000, 2, 1)]
    out = share.split({"slow": slow, "fast": fast}, wanted=11, slow="slow")
    assert out["processed"] == {"slow": 3, "fast": 8}
    assert out["slow_processed"] == 3
    assert out["slow_peak_held"] == 500
    assert out["redelivered"] == 1  # seq 2: by fast (its lock expired), then by slow
    assert out["missing"] == 1  # seq 10
    # to the last *new* record (seq 2 first done at 35 s), not to the slow repeat at 40 s
    assert out["seconds"] == pytest.approx(34.0)


def test_member_files_round_trip(tmp_path: Path) -> None:
    prefix = str(tmp_path / "m1")
    share.write_times(prefix, array("q", [3, 1 << 40, 7]))
    assert list(share.read_times(Path(prefix + ".times"))) == [3, 1 << 40, 7]
    # big-endian on disk, as the Java member's DataOutputStream writes
    assert Path(prefix + ".times").read_bytes()[:8] == (3).to_bytes(8, "big")
    log = tmp_path / "m1.log"
    log.write_text("10 0 5\n20 1 4\n30 2")  # a torn last line is skipped
    assert share.read_log(log) == [(10, 0, 5), (20, 1, 4)]
    progress = share.Progress(prefix)
    progress.count, progress.peak_held = 42, 7
    progress.close()
    assert Path(prefix + ".progress").read_text().split() == ["42", "7"]


def test_share_is_opt_in_and_its_slow_table_has_one_row_per_client() -> None:
    assert "share" in FAMILIES and "share" in OPT_IN

    def summ(value: float) -> dict[str, float]:
        return {"median": value, "min": value, "max": value, "n": 1}

    case = {
        "spec": {"kind": "slow"},
        "summary": {
            "ours": {
                "slow_peak_held": summ(12),
                "slow_processed": summ(80),
                "fast_processed": summ(1920),
                "redelivered": summ(0),
                "seconds": summ(8.1),
            }
        },
        "errors": {"java": ["RuntimeError: boom"]},
    }
    lines = scenario.extra_table([{"spec": {"kind": "throughput"}}, case])
    rows = [line for line in lines if line.startswith("| ")]
    assert rows[1].split("|")[1:-1] == [" aiostream_kafka ", " 12 ", " 80 / 1,920 ", " 0 ", " 8.1 "]
    assert "error" in rows[2] and "Java" in rows[2]
    assert len(rows) == 3  # the header, ours, Java's error; confluent-kafka did not run
