"""One adapter per client. Each module has ``NAME``, ``describe(spec)`` (the exact settings
and API it uses for a scenario) and ``run(spec)`` (runs it; raises ``Unsupported`` when the
client has no equivalent). They run inside ``python -m benchmarks.worker`` subprocesses."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

MODULES = {
    "ours": "benchmarks.clients.ours",
    "ours_pure": "benchmarks.clients.ours",  # run with AIOSTREAM_KAFKA_PURE=1
    "ours_nowait": "benchmarks.clients.ours",
    "ours_pure_nowait": "benchmarks.clients.ours",  # run with AIOSTREAM_KAFKA_PURE=1
    "aiokafka": "benchmarks.clients.aiokafka_client",
    "confluent": "benchmarks.clients.confluent",
    "java": "benchmarks.clients.java",
    "pyrallel": "benchmarks.clients.pyrallel",  # its own Python 3.12 (benchmarks/side_venv.py)
}

#: Another API of a client, measured as a client of its own in the cases that list it:
#: name -> (the client whose selection in ``--clients`` runs it too, what its spec gets).
#: The report shows each as rows of their own (``report.variant_rows``), its figures in
#: the base client's column beside the same peers' runs.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "ours_nowait": ("ours", {"api": "enqueue_nowait"}),
    "ours_pure_nowait": ("ours_pure", {"api": "enqueue_nowait"}),
}

#: The build a client runs: these the pure one (``AIOSTREAM_KAFKA_PURE=1``).
PURE = {"ours_pure", "ours_pure_nowait"}


def with_variants(clients: list[str]) -> list[str]:
    """``clients`` with each one's variants right after it (so that they alternate)."""
    out = []
    for client in clients:
        out.append(client)
        out += [v for v, (base, _) in VARIANTS.items() if base == client]
    return out


def adapter(client: str) -> ModuleType:
    return importlib.import_module(MODULES[client])
