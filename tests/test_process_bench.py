"""The process scenario's side-venv client (pyrallel-consumer, issue 30) without a broker:
where its Python 3.12 is looked for, that a machine without one reports the client as not
run (never a figure from another interpreter), and the count of what its runs did wrong
(records handled twice, a key's records overlapping or out of offset order)."""

from __future__ import annotations

import asyncio
import stat
import sys
from pathlib import Path

import pytest

from benchmarks import runner, side_venv
from benchmarks.clients.pyrallel import order_outcome


def _fake_python(path: Path, version: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_candidates_prefer_pyenv_newest_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "pyenv"
    for name in ("3.12.1", "3.12.10", "3.11.7", "3.12.3"):
        _fake_python(root / "versions" / name / "bin" / "python", name[:4])
    bin_dir = tmp_path / "bin"
    _fake_python(bin_dir / "python3.12", "3.12")
    monkeypatch.setenv("PYENV_ROOT", str(root))
    monkeypatch.setenv("PATH", str(bin_dir))
    found = side_venv.candidates("3.12")
    assert found == [
        str(root / "versions" / v / "bin" / "python") for v in ("3.12.10", "3.12.3", "3.12.1")
    ] + [str(bin_dir / "python3.12")]
    assert side_venv.find_python("3.12") == found[0]


def test_a_python_reporting_another_version_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    _fake_python(bin_dir / "python3.12", "3.11")  # e.g. a stale shim
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(bin_dir))
    assert side_venv.find_python("3.12") is None


def test_no_python_312_means_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(side_venv, "CACHE", tmp_path / "cache")
    with pytest.raises(side_venv.NotRun, match=r"^not run: no Python 3\.12"):
        side_venv.interpreter("pyrallel")
    assert not (tmp_path / "cache").exists()  # nothing built
    # the runner turns it into an "unsupported" result: no worker started, no figure
    monkeypatch.setattr(runner, "_SIDE", {})
    out = asyncio.run(runner.run_worker("pyrallel", {"scenario": "process"}))
    assert out == {"client": "pyrallel", "unsupported": out["unsupported"]}
    assert out["unsupported"].startswith("not run: no Python 3.12")


def test_a_ready_venv_is_reused_without_looking_for_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(side_venv, "CACHE", tmp_path)
    path = side_venv.venv_dir("pyrallel")
    _fake_python(path / "bin" / "python", "3.12")
    (path / ".bench-requirements").write_text(
        "\n".join(side_venv.SIDE_CLIENTS["pyrallel"][1]) + "\n"
    )
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "none"))
    assert side_venv.interpreter("pyrallel") == str(path / "bin" / "python")
    # other pins: the venv is not taken as it is (here: no Python to build one with)
    (path / ".bench-requirements").write_text("pyrallel-consumer==0.1.0\n")
    with pytest.raises(side_venv.NotRun):
        side_venv.interpreter("pyrallel")


def test_the_worker_runs_on_the_side_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / "python"
    _fake_python(python, "3.12")
    monkeypatch.setattr(runner, "_SIDE", {})
    monkeypatch.setattr(side_venv, "interpreter", lambda client: str(python))
    assert asyncio.run(runner.worker_python("pyrallel")) == str(python)
    assert asyncio.run(runner.worker_python("ours")) == sys.executable


def test_order_outcome_counts_what_broke() -> None:
    S, D = True, False
    clean = [(S, 0, 0, b"a"), (S, 0, 1, b"b"), (D, 0, 0, b"a"), (S, 0, 2, b"a"), (D, 0, 2, b"a")]
    assert order_outcome(clean) == {"duplicates": 0, "key_overlaps": 0, "key_out_of_order": 0}
    broken = [
        (S, 0, 0, b"a"),
        (S, 0, 2, b"a"),  # while offset 0 of the key runs
        (D, 0, 0, b"a"),
        (D, 0, 2, b"a"),
        (S, 0, 1, b"a"),  # below the last started of the key
        (D, 0, 1, b"a"),
        (S, 0, 2, b"a"),  # started again
        (D, 0, 2, b"a"),
        (S, 1, 0, b"a"),  # another partition: another lane
    ]
    assert order_outcome(broken) == {"duplicates": 1, "key_overlaps": 1, "key_out_of_order": 1}
