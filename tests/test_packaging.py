"""What a release publishes: the sdist and the wheel, built as ``make dist`` builds them.

No broker. The build runs in this environment (``--no-isolation``: the dev extra brings
``build``, ``twine`` and setuptools >= 77) and pure (``AIOSTREAM_KAFKA_PURE=1``), so it takes
seconds; ``make dist`` builds the compiled wheel in an isolated environment, and the
compiled modules stay optional: their sources are in every wheel. Checked: the metadata
PyPI reads (name, the one version, the SPDX license expression and its file), ``py.typed``,
the entry points, ``twine check``, and a build log free of setuptools warnings.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import pytest

import aiostream_kafka
import aiostream_kafka._version
from aiostream_kafka._native import COMPILED_MODULES

ROOT = Path(__file__).resolve().parent.parent
NAME = "aiostream-kafka"
VERSION = aiostream_kafka.__version__


def _require(ok: bool, reason: str) -> None:
    """Skip on a developer's machine without the tool; in CI the set-up must provide it."""
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI: the project's set-up, make venv, installs it)")
        pytest.skip(reason)


def _setuptools_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version("setuptools").split(".")[:2])
    except Exception:
        return (0,)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    _require(importlib.util.find_spec("build") is not None, "`build` is not installed")
    _require(_setuptools_version() >= (77,), "setuptools >= 77 is not installed")
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "AIOSTREAM_KAFKA_PURE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"python -m build failed:\n{log}"
    return out, log


def _metadata(text: str) -> dict[str, list[str]]:
    message = Parser().parsestr(text)
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return fields


def _check_metadata(fields: dict[str, list[str]]) -> None:
    assert fields["Name"] == [NAME]
    assert fields["Version"] == [VERSION]
    assert fields["License-Expression"] == ["Apache-2.0"]
    assert fields["License-File"] == ["LICENSE"]
    assert "License" not in fields  # the old free-text field
    assert not [c for c in fields.get("Classifier", []) if c.startswith("License ::")]
    assert fields["Requires-Python"] == [">=3.11"]


def test_the_version_lives_in_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "aiostream_kafka._version.__version__"}
    assert aiostream_kafka.__version__ is aiostream_kafka._version.__version__


def test_the_build_log_has_no_setuptools_warnings(dist: tuple[Path, str]) -> None:
    _, log = dist
    for needle in ("Warning:", "deprecated", "License classifiers", "!!"):
        assert needle not in log, f"{needle!r} in the build log:\n{log}"


def test_the_wheel(dist: tuple[Path, str]) -> None:
    out, _ = dist
    wheels = list(out.glob("*.whl"))
    assert [w.name for w in wheels] == [f"aiostream_kafka-{VERSION}-py3-none-any.whl"]
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
        info = f"aiostream_kafka-{VERSION}.dist-info"
        _check_metadata(_metadata(whl.read(f"{info}/METADATA").decode()))
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert "aiostream_kafka/py.typed" in names
    assert f"{info}/licenses/LICENSE" in names
    # The compiled modules are optional: the pure wheel has their sources and no binaries.
    for module in COMPILED_MODULES:
        assert module.replace(".", "/") + ".py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))]
    assert "aiostream-kafka = aiostream_kafka.cli:main" in entry_points
    assert "aiostream_kafka = aiostream_kafka.testing.pytest_plugin" in entry_points
    # The generated protocol code and the harness ship; the repository's tools do not.
    assert "aiostream_kafka/protocol/messages/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "tools/"))]


def test_the_sdist(dist: tuple[Path, str]) -> None:
    out, _ = dist
    sdists = list(out.glob("*.tar.gz"))
    assert [s.name for s in sdists] == [f"aiostream_kafka-{VERSION}.tar.gz"]
    top = f"aiostream_kafka-{VERSION}"
    with tarfile.open(sdists[0]) as sdist:
        names = set(sdist.getnames())
        pkg_info = sdist.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        _check_metadata(_metadata(pkg_info.read().decode()))
    # What a wheel build from the sdist needs: the build script, the list of the compiled
    # modules it reads, the license and the typing marker.
    for path in ("pyproject.toml", "setup.py", "LICENSE", "README.md"):
        assert f"{top}/{path}" in names
    for path in ("_native.py", "py.typed", "__init__.py"):
        assert f"{top}/aiostream_kafka/{path}" in names


def test_twine_check_passes(dist: tuple[Path, str]) -> None:
    _require(importlib.util.find_spec("twine") is not None, "`twine` is not installed")
    out, _ = dist
    files = sorted(str(p) for p in out.iterdir())
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


@pytest.mark.parametrize("checkout", [True, False])
def test_the_import_guard_checks_staleness_only_in_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkout: bool
) -> None:
    """An extension older than its source means an edited checkout there (the source runs);
    in an installed wheel the times mean nothing (pip writes the files in any order, the
    source a moment after its extension: seen with pip install .), so it runs compiled."""
    from importlib.machinery import EXTENSION_SUFFIXES

    from aiostream_kafka import _native

    package = tmp_path / "aiostream_kafka"
    for module in COMPILED_MODULES:
        source = package.joinpath(*module.split(".")[1:]).with_suffix(".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        built = source.with_name(source.stem + EXTENSION_SUFFIXES[0])
        built.write_bytes(b"")
        source.write_text("")
        os.utime(built, (1_000_000, 1_000_000))  # older than its source
    if checkout:
        (tmp_path / "setup.py").write_text("")
        (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.delenv("AIOSTREAM_KAFKA_PURE", raising=False)
    monkeypatch.setattr(_native, "_PACKAGE_DIR", package)
    reason = _native._reason_for_source()
    if checkout:
        assert reason is not None and "is older than" in reason
    else:
        assert reason is None


@pytest.mark.parametrize(
    ("expected", "problem"),
    [("9.9.9", f"version {VERSION}, expected 9.9.9"), ("", "expected version given is empty")],
)
def test_the_installed_wheel_check_fails_on_a_wrong_or_missing_version(
    expected: str, problem: str
) -> None:
    """``tools/check_installed.py`` (``make dist``'s last step) names a version other than
    the one built, and an empty one: ``make dist`` once read the version with a relative
    interpreter path after ``cd``, got an empty string and so never compared it."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_installed.py"), expected],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert problem in run.stderr


def test_make_dist_reads_the_expected_version_with_an_absolute_interpreter() -> None:
    """The recipe runs the check from the throwaway venv's folder: the interpreter that
    reads the built version must be named by an absolute path there."""
    recipe = (ROOT / "Makefile").read_text().split("\ndist:", 1)[1].split("\n\n", 1)[0]
    line = next(line for line in recipe.splitlines() if "__version__" in line)
    assert "$(CURDIR)/$(PY)" in line, line
