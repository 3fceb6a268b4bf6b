"""What ``import aiostream_kafka`` loads (no broker).

The generated message modules are imported on first use (``protocol/messages/__init__.py``:
``API_KEYS`` imports an API's module on its first lookup, the package's ``__getattr__`` the
module of a class imported from it), so importing the client loads only those that client
modules import by name, and never the integrations (Spark, FastAPI) or the test harness.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module

import pytest

from aiostream_kafka.protocol import messages
from aiostream_kafka.protocol.messages import (
    API_KEYS,
    API_MODULES,
    API_NAMES,
    API_VERSIONS,
)

PREFIX = "aiostream_kafka.protocol.messages."

#: The message modules client code imports by name (at most these load with the package):
#: connection setup, metadata and coordinators, producer, consumer and groups, and the
#: Admin client's (which could load on first use too).
LOADED_BY_CLIENT_CODE = frozenset(
    {
        "request_header",
        "response_header",
        "api_versions",
        "sasl_handshake",
        "sasl_authenticate",
        "metadata",
        "find_coordinator",
        "produce",
        "init_producer_id",
        "fetch",
        "list_offsets",
        "offset_for_leader_epoch",
        "join_group",
        "sync_group",
        "heartbeat",
        "leave_group",
        "offset_commit",
        "offset_fetch",
        "consumer_protocol_assignment",
        "consumer_protocol_subscription",
        # producer/transactions.py
        "add_offsets_to_txn",
        "add_partitions_to_txn",
        "end_txn",
        "txn_offset_commit",
        # admin/client.py
        "create_partitions",
        "create_topics",
        "delete_groups",
        "delete_records",
        "delete_topics",
        "describe_cluster",
        "describe_configs",
        "describe_groups",
        "incremental_alter_configs",
        "list_groups",
    }
)

#: Never loaded by ``import aiostream_kafka``: optional integrations and their
#: dependencies, the test harness, and the HTTP stack only the OIDC token provider uses.
NOT_AT_IMPORT = (
    "aiostream_kafka.spark",
    "aiostream_kafka.fastapi",
    "aiostream_kafka.testing",
    "aiostream_kafka.cli",
    "pyspark",
    "pyarrow",
    "fastapi",
    "starlette",
    "pydantic",
    "testcontainers",
    "urllib.request",
    "http.client",
)


def _modules_after(code: str) -> set[str]:
    """The names in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _messages(modules: set[str]) -> set[str]:
    return {name[len(PREFIX) :] for name in modules if name.startswith(PREFIX)}


def test_import_loads_only_the_message_modules_client_code_imports() -> None:
    modules = _modules_after("import aiostream_kafka")
    loaded = _messages(modules)
    assert loaded <= LOADED_BY_CLIENT_CODE, sorted(loaded - LOADED_BY_CLIENT_CODE)
    assert len(loaded) < len(API_MODULES) // 2
    heavy = sorted(m for m in modules if m.startswith(NOT_AT_IMPORT))
    assert not heavy


def test_the_registry_loads_a_module_on_first_use_only() -> None:
    # (importing the package imports aiostream_kafka, hence the modules client code
    # imports: each step prints what it added)
    code = "\n".join(
        [
            "import json, sys",
            "from aiostream_kafka.protocol import messages",
            "P = 'aiostream_kafka.protocol.messages.'",
            "before = set()",
            "def added():",
            "    global before",
            "    now = {m[len(P):] for m in sys.modules if m.startswith(P)}",
            "    print(json.dumps(sorted(now - before)))",
            "    before = now",
            "added()",
            "assert 57 in messages.API_KEYS and len(messages.API_KEYS) > 80",
            "added()",
            "assert messages.API_KEYS[57][0].__name__ == 'UpdateFeaturesRequest'",
            "added()",
            "from aiostream_kafka.protocol.messages import VoteRequest",
            "added()",
            "messages.BeginQuorumEpochResponse",
            "added()",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    steps = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    assert len(steps) == 5
    assert set(steps[0]) <= LOADED_BY_CLIENT_CODE  # the package itself loads none
    assert steps[1:] == [[], ["update_features"], ["vote"], ["begin_quorum_epoch"]]


def test_every_api_key_resolves() -> None:
    assert set(API_KEYS) == set(API_MODULES) == set(API_NAMES) == set(API_VERSIONS)
    assert len(API_KEYS) == len(API_MODULES)
    for api_key in API_KEYS:
        request_type, response_type = API_KEYS[api_key]
        assert request_type.API_KEY == response_type.API_KEY == api_key
        assert request_type.__name__ == f"{API_NAMES[api_key]}Request"
        assert response_type.__name__ == f"{API_NAMES[api_key]}Response"
        assert request_type.__module__ == PREFIX + API_MODULES[api_key]
        assert API_VERSIONS[api_key] == (
            request_type.MIN_VERSION,
            request_type.MAX_STABLE_VERSION,
            request_type.MAX_VERSION,
        )
        assert API_KEYS[api_key] is API_KEYS[api_key]  # loaded once
    assert 9999 not in API_KEYS
    assert API_KEYS.get(9999) is None
    with pytest.raises(KeyError):
        API_KEYS[9999]


def test_every_re_exported_name_is_the_class_of_its_module() -> None:
    from aiostream_kafka.protocol.messages import FetchRequest, RequestHeader, fetch
    from aiostream_kafka.protocol.messages.fetch import FetchRequest as DirectFetchRequest

    assert FetchRequest is DirectFetchRequest is fetch.FetchRequest
    assert RequestHeader.__module__ == PREFIX + "request_header"
    for name in messages.__all__:
        value = getattr(messages, name)
        if not name.startswith("API_"):
            assert value is getattr(import_module(value.__module__), name)
            assert name in dir(messages)
    missing = "NoSuchMessage"
    with pytest.raises(AttributeError):
        getattr(messages, missing)
    with pytest.raises(ImportError):
        exec("from aiostream_kafka.protocol.messages import NoSuchMessage")
