"""The documentation site builds cleanly and its configuration page matches the code.

No broker needed: ``mkdocs build --strict`` renders every page (the API reference from the
docstrings), and the configuration reference is compared with the config classes twice:
by regenerating it (``tools/gen_config_docs.py --check``) and by reading the defaults back
out of its tables.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG_PAGE = ROOT / "docs" / "configuration.md"


def _mkdocs() -> list[str]:
    exe = Path(sys.executable).parent / "mkdocs"
    if exe.exists():
        return [str(exe)]
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    return [sys.executable, "-m", "mkdocs"]


def test_mkdocs_build_strict_passes(tmp_path: Path) -> None:
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [*_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0, (
        f"mkdocs build --strict failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    assert (tmp_path / "site" / "index.html").exists()


def test_configuration_page_is_generated_from_the_code() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_config_docs.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (
        "docs/configuration.md is stale or the config classes have undocumented options;"
        f" run python tools/gen_config_docs.py\n{result.stdout}\n{result.stderr}"
    )


def _documented_defaults() -> dict[str, dict[str, Any]]:
    """Section title -> option -> default, read back from the page's tables."""
    sections: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    # | `name`<br><small>type</small> | default | what it does |
    row = re.compile(r"^\| `(\w+)`<br><small>.*?</small> \| (.*?) \| ")
    for line in CONFIG_PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), {})
            continue
        match = row.match(line)
        if match and current is not None:
            name, default = match.groups()
            if default == "required":
                current[name] = "required"
                continue
            literal = re.match(r"`(.*?)`", default)
            assert literal, f"{name}: default cell {default!r} has no literal"
            current[name] = ast.literal_eval(literal.group(1))
    return sections


def test_documented_defaults_equal_the_code_defaults() -> None:
    from aiostream_kafka import Consumer
    from aiostream_kafka.config import ClientConfig
    from aiostream_kafka.consumer import ConsumerConfig
    from aiostream_kafka.producer import ProducerConfig

    docs = _documented_defaults()
    client = ClientConfig(bootstrap_servers="127.0.0.1:9092")
    producer = ProducerConfig()
    consumer = ConsumerConfig()
    member = Consumer(bootstrap_servers="127.0.0.1:9092", group_id="g")
    assert member._group_settings is not None
    group, assignors, auto_commit_interval = member._group_settings

    expected = {
        "Common client options": {
            name: getattr(client, name) for name in docs["Common client options"]
        },
        "Producer": {name: getattr(producer, name) for name in docs["Producer"]},
        "Consumer": {name: getattr(consumer, name) for name in docs["Consumer"]},
        "Consumer group options": {
            "group_instance_id": group.group_instance_id,
            "session_timeout_ms": group.session_timeout_ms,
            "heartbeat_interval_ms": group.heartbeat_interval_ms,
            "max_poll_interval_ms": group.rebalance_timeout_ms,
            "partition_assignment_strategy": assignors[0] if len(assignors) == 1 else assignors,
            "auto_commit_interval_ms": auto_commit_interval,
            "group_protocol": group.protocol,
            "group_remote_assignor": group.remote_assignor,
        },
    }
    expected["Common client options"]["bootstrap_servers"] = "required"
    for section, values in expected.items():
        assert docs[section] == values, section
    # Every option the constructors accept is on the page.
    assert set(docs["Common client options"]) == {
        f for f, spec in ClientConfig.__dataclass_fields__.items() if spec.init
    } - {"addresses"}
    assert set(docs["Producer"]) == {
        f for f, spec in ProducerConfig.__dataclass_fields__.items() if spec.init
    } - {"request_timeout_ms"}  # a common option, passed on to the producer
    assert set(docs["Consumer"]) == {
        f for f, spec in ConsumerConfig.__dataclass_fields__.items() if spec.init
    }


def _listed_members(page: Path, target: str) -> list[str]:
    """The explicit ``members:`` list of the ``::: target`` block of a reference page."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"::: {target}")
    members: list[str] = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        item = re.match(r"^\s+- (\w+)$", line)
        if item:
            members.append(item.group(1))
    return members


@pytest.mark.parametrize(
    ("page", "target", "first"),
    [
        ("producer", "aiostream_kafka.producer.Producer", ["start", "close", "send", "enqueue"]),
        ("consumer", "aiostream_kafka.consumer.Consumer", ["start", "close", "drain"]),
        ("admin", "aiostream_kafka.admin.Admin", ["start", "close", "create_topics"]),
    ],
)
def test_api_reference_lists_every_public_member_public_first(
    page: str, target: str, first: list[str]
) -> None:
    """The client classes' reference pages list their members by hand, by use (lifecycle,
    then the main calls, diagnostics such as ``cluster`` last): a member added to the class
    must be added there too, or it would be missing from the docs."""
    import importlib

    from aiostream_kafka.habits import Habit

    module, _, name = target.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    # aiokafka's names (aiostream_kafka.habits) are class attributes that raise when read;
    # the members of its bases of ours count (the Producer's batch and transaction calls).
    public = {
        n
        for klass in cls.__mro__
        if klass.__module__.startswith("aiostream_kafka.")
        for n, v in vars(klass).items()
        if not n.startswith("_") and not isinstance(v, Habit)
    }
    listed = _listed_members(ROOT / "docs" / "reference" / f"{page}.md", target)
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert set(listed) == public, (
        f"docs/reference/{page}.md: missing {sorted(public - set(listed))}, "
        f"not in the class {sorted(set(listed) - public)}"
    )
    assert listed[: len(first)] == first
    assert listed[-1] == "cluster"


def test_benchmarks_page_is_generated_from_the_published_results() -> None:
    """docs/benchmarks.md is the report of docs/img/bench/results.json (the last published
    run): a change to the report's layout must regenerate it (python -m benchmarks
    --republish), and the page leads with what the figures mean, before any table."""
    import json

    from benchmarks import report

    data = json.loads((ROOT / "docs" / "img" / "bench" / "results.json").read_text())
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page == report.docs_page(data), (
        "docs/benchmarks.md is stale: run python -m benchmarks --republish"
    )
    for name in data["plots"].values():
        assert (ROOT / "docs" / "img" / "bench" / name).exists(), name
    first_table = page.index("\n| ")
    assert page.index("## What this means") < page.index("![") < first_table
