"""One adapter per client. Each module has ``NAME``, ``describe(spec)`` (the exact settings
and API it uses for a scenario) and ``run(spec)`` (runs it; raises ``Unsupported`` when the
client has no equivalent). They run inside ``python -m benchmarks.worker`` subprocesses."""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = {
    "ours": "benchmarks.clients.ours",
    "ours_pure": "benchmarks.clients.ours",  # run with AIOSTREAM_KAFKA_PURE=1
    "aiokafka": "benchmarks.clients.aiokafka_client",
    "confluent": "benchmarks.clients.confluent",
    "java": "benchmarks.clients.java",
    "pyrallel": "benchmarks.clients.pyrallel",  # its own Python 3.12 (benchmarks/side_venv.py)
}


def adapter(client: str) -> ModuleType:
    return importlib.import_module(MODULES[client])
