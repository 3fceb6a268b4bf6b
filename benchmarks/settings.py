"""The one place where every benchmark setting lives: record sizes and counts, the client
settings every client gets (translated to each client's own names by its adapter), the
quick and full profiles.

Nothing here is tuned for one client: a setting is either given to every client or left
at every client's default, and each adapter's ``describe()`` prints what it actually used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# ``ours_pure``: the same client with its compiled modules off (``AIOSTREAM_KAFKA_PURE=1``
# in the worker), to report the compiled build beside the pure one.
CLIENTS = ["ours", "ours_pure", "aiokafka", "confluent", "java"]
PEERS = ["ours_pure", "aiokafka", "confluent", "java", "pyrallel"]
#: Clients run only when named in ``--clients``, and only where a scenario has them:
#: ``pyrallel`` (pyrallel-consumer, the process scenario) needs Python >= 3.12 and runs in
#: a side venv of its own (``benchmarks/side_venv.py``).
OPT_IN_CLIENTS = ["pyrallel"]

# -- settings every client gets ----------------------------------------------------------

#: Producer settings of the throughput, consume-fill and FastAPI scenarios.
PRODUCER = {
    "acks": "all",
    "linger_ms": 5,  # Kafka 4's and librdkafka's default; aiokafka's is 0, set to 5
    "batch_size": 16384,  # Java's and aiokafka's default; librdkafka's batch.size too
    "enable_idempotence": True,  # Java's and ours' default; aiokafka/librdkafka: set on
    "max_request_size": 1048576,
}

#: Consumer fetch settings of every consume scenario (Java's defaults; all four clients
#: have them under their own names).
CONSUMER = {
    "fetch_min_bytes": 1,
    "fetch_max_wait_ms": 500,
    "fetch_max_bytes": 52428800,
    "max_partition_fetch_bytes": 1048576,
}

#: The latency scenarios use what the Java ``EndToEndLatency`` tool hard-codes, so that
#: its numbers and ours are measured alike: no producer linger, no broker-side fetch wait.
LATENCY_PRODUCER = {**PRODUCER, "linger_ms": 0}
LATENCY_CONSUMER = {**CONSUMER, "fetch_max_wait_ms": 0}
#: The fixed-rate latency case: no linger, default fetch wait (a fetch returns as soon as
#: one byte is there: fetch_min_bytes=1).
RATE_PRODUCER = {**PRODUCER, "linger_ms": 0}
RATE_CONSUMER = dict(CONSUMER)


#: The keyed produce family (issue 32): what a user gets -- each client's defaults but for
#: these two (as the issue measured them; ours and Java are idempotent by default,
#: aiokafka and librdkafka are not, and librdkafka's batch.size is 1 MB).
KEYED_PRODUCER = {"acks": "all", "linger_ms": 5}

#: The worker scenarios that run a producer (their adapters' ``describe()`` lists it).
PRODUCER_SCENARIOS = (
    "produce",
    "produce_batch",
    "produce_keyed",
    "fastapi",
    "latency_rate",
    "latency_closed",
)


def producer_settings(scenario: str) -> dict[str, Any]:
    """The producer settings every client gets in ``scenario`` (a setting not named:
    each client's default)."""
    return {
        "latency_rate": RATE_PRODUCER,
        "latency_closed": LATENCY_PRODUCER,
        "produce_keyed": KEYED_PRODUCER,
    }.get(scenario, PRODUCER)


def consumer_settings(scenario: str) -> dict[str, Any]:
    """The consumer fetch settings every client gets in ``scenario``."""
    return {"latency_rate": RATE_CONSUMER, "latency_closed": LATENCY_CONSUMER}.get(
        scenario, CONSUMER
    )


#: Topics: one broker, replication 1, every scenario on fresh topics with these settings.
TOPIC_CONFIG = {"retention.ms": "3600000"}
PRODUCE_PARTITIONS = 3
CONSUME_PARTITIONS = 3
LATENCY_PARTITIONS = 1  # EndToEndLatency's own default topic has one partition
PAUSE_PARTITIONS = 10
REBALANCE_PARTITIONS = 12
#: KIP-848 runs set the group's ``consumer.heartbeat.interval.ms`` to this (the broker's
#: default, and its minimum unless lowered): the goal is no member keeping partitions
#: pausing longer than one interval.
REBALANCE_HEARTBEAT_MS = 5000
#: share: every run's fresh share group gets these group configs first (incremental alter
#: configs on the GROUP resource), whatever the client: records from the earliest offset,
#: and a 1 s heartbeat (the broker's default is 5 s, its minimum lowered in the benchmark
#: broker) so that members started together all have partitions within about a second.
SHARE_GROUP_CONFIGS = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "1000"}
#: share: a throughput run ends when the members had this long (a slow-member run longer).
SHARE_LIMIT_S = 120.0
SHARE_SLOW_LIMIT_S = 240.0
#: Records per call in the produce "batch API" cases (ours: ``enqueue_batch``; aiokafka:
#: hand-built ``create_batch``/``send_batch`` batches, which hold what fits in one batch;
#: confluent-kafka: ``produce_batch``).
PRODUCE_BATCH_CALL = 10_000

#: process: the ideal rate is concurrency / mean handler time, capped by what one core can
#: do (issue 30's goal: >= 90 % of it up to 20,000 records/s on one core).
PROCESS_CORE_CAP = 20_000
#: process: every group member (the SIGKILL case's resuming one waits for the killed one's
#: session to expire) gets the broker's minimum session timeout.
PROCESS_SESSION_TIMEOUT_MS = 6000
#: process: a run ends with an error when its records were not handled within this.
PROCESS_LIMIT_S = 300.0

#: Java clients run with this heap (kafka-run-class.sh gives the perf tools 512M too).
JAVA_HEAP = "-Xmx512M"


@dataclass
class Profile:
    """Counts and durations of one run of the suite."""

    name: str
    rounds: int
    warmup_rounds: int
    produce_sizes: list[int] = field(default_factory=lambda: [100, 1024])
    produce_codecs: list[str] = field(default_factory=lambda: ["none", "lz4", "zstd"])
    produce_records: dict[int, int] = field(default_factory=dict)
    produce_warmup_records: int = 5000
    #: The batch API cases (record sizes x codecs of their own; none: no such case).
    produce_batch_sizes: list[int] = field(default_factory=lambda: [100, 1024])
    produce_batch_codecs: list[str] = field(default_factory=lambda: ["none", "lz4", "zstd"])
    consume_records: dict[int, int] = field(default_factory=dict)
    consume_modes: list[str] = field(default_factory=lambda: ["batch", "record"])
    latency_rate: int = 1000
    latency_seconds: float = 10.0
    latency_warmup_records: int = 200
    latency_closed_records: int = 2000
    pause_records: int = 500_000
    pause_seconds: float = 5.0
    fastapi_tasks: int = 1000
    fastapi_bursts: int = 30
    sequential_sends: int = 2000
    codec_rounds: int = 15
    #: rebalance: records/s produced, members joining one by one then leaving one by one,
    #: ``rebalance_step_s`` apart (a KIP-848 join settles within about two heartbeats).
    rebalance_rate: int = 2000
    rebalance_members: int = 4
    rebalance_step_s: float = 12.0
    #: share: value sizes x partitions x members, records per run (by size); the slow
    #: member beside a fast one: records on one partition, the slow one's time per record.
    share_sizes: list[int] = field(default_factory=lambda: [100, 1024])
    share_partitions: list[int] = field(default_factory=lambda: [1, 4])
    share_members: list[int] = field(default_factory=lambda: [1, 3])
    share_records: dict[int, int] = field(default_factory=lambda: {100: 1_000_000, 1024: 300_000})
    share_slow_records: int = 2000
    share_slow_delay_ms: int = 100
    #: process (issue 30): one topic of ``process_partitions`` partitions, records over
    #: ``process_keys`` keys (100 B values), filled once; each run of concurrency C
    #: handles the first ``process_records[C]`` (C=1: the sequential ``async for``) with a
    #: fresh group; handlers "fixed" (``asyncio.sleep(0.010)``) and "random" (1-20 ms,
    #: seeded). The SIGKILL case: its own topic of ``process_kill_records``, killed after
    #: half were handled.
    process_partitions: int = 12
    process_keys: int = 1000
    process_concurrency: list[int] = field(default_factory=lambda: [16, 64, 256])
    process_handlers: list[str] = field(default_factory=lambda: ["fixed", "random"])
    process_records: dict[int, int] = field(
        default_factory=lambda: {1: 700, 16: 12_000, 64: 45_000, 256: 120_000}
    )
    process_kill_records: int = 40_000
    #: produce_keyed (issue 32): keyed 100 B records over ``keyed_keys`` keys to a fresh
    #: topic of each partition count; warm-up records first (untimed).
    keyed_partitions: list[int] = field(default_factory=lambda: [6, 600])
    keyed_records: int = 200_000
    keyed_keys: int = 20_000
    keyed_warmup_records: int = 5000

    def to_json(self) -> dict[str, Any]:
        return {
            k: ({str(a): b for a, b in v.items()} if isinstance(v, dict) else v)
            for k, v in asdict(self).items()
        }


FULL = Profile(
    name="full",
    rounds=5,
    warmup_rounds=1,
    produce_records={100: 500_000, 1024: 150_000},
    produce_warmup_records=20_000,
    consume_records={100: 1_000_000, 1024: 200_000},
)

QUICK = Profile(
    name="quick",
    rounds=1,
    warmup_rounds=0,
    produce_codecs=["none", "lz4", "zstd"],
    produce_records={100: 50_000, 1024: 15_000},
    produce_warmup_records=2000,
    consume_records={100: 100_000, 1024: 30_000},
    latency_seconds=3.0,
    latency_closed_records=300,
    pause_records=100_000,
    pause_seconds=2.5,
    fastapi_bursts=5,
    sequential_sends=300,
    codec_rounds=1,
    process_records={1: 300, 16: 4000, 64: 15_000, 256: 40_000},
    process_kill_records=15_000,
)

#: The smoke test's profile: one round, tiny counts (checks the harness, not speed).
SMOKE = Profile(
    name="smoke",
    rounds=1,
    warmup_rounds=0,
    produce_sizes=[100],
    produce_codecs=["lz4"],
    produce_batch_sizes=[100],
    produce_batch_codecs=["lz4"],
    produce_records={100: 3000},
    produce_warmup_records=100,
    consume_records={100: 5000},
    consume_modes=["batch"],
    latency_seconds=1.0,
    latency_rate=300,
    latency_warmup_records=20,
    latency_closed_records=30,
    pause_records=3000,
    pause_seconds=1.0,
    fastapi_bursts=1,
    sequential_sends=20,
    codec_rounds=1,
    rebalance_rate=300,
    rebalance_members=2,
    rebalance_step_s=6.0,
    share_sizes=[100],
    share_partitions=[1],
    share_members=[1],
    share_records={100: 3000},
    share_slow_records=100,
    share_slow_delay_ms=20,
    process_concurrency=[64],
    process_handlers=["fixed"],
    process_records={1: 60, 64: 1500},
    process_kill_records=2000,
    keyed_partitions=[6],
    keyed_records=3000,
    keyed_keys=300,
    keyed_warmup_records=100,
)

PROFILES = {p.name: p for p in (FULL, QUICK, SMOKE)}


def payloads(size: int, count: int = 1024) -> list[bytes]:
    """The values every Python client sends, cycled: ``count`` distinct values of ``size``
    random uppercase letters. Java's ``ProducerPerformance`` fills each record with fresh
    random uppercase letters; a pool larger than a batch gives the same compression ratio
    without timing a random generator in Python."""
    import random

    rng = random.Random(size)
    return [bytes(rng.choices(range(65, 91), k=size)) for _ in range(count)]


def keys(count: int) -> list[bytes]:
    """The keys of the keyed produce family, record ``i`` taking ``keys[i % count]``:
    ``count`` distinct keys of 11 bytes, shuffled (seeded) so that consecutive
    records go to unrelated partitions whatever a client's partitioner."""
    import random

    out = [b"key-%07d" % i for i in range(count)]
    random.Random(count).shuffle(out)
    return out
