"""The ``aiostream-kafka`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from aiostream_kafka.errors import BrokerUnavailableError

log = logging.getLogger("aiostream_kafka.cli")


async def _dev_broker(brokers: int, properties: dict[str, str], fake: bool = False) -> int:
    from aiostream_kafka.testing import KafkaCluster
    from aiostream_kafka.testing.cluster import Source

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    source: Source = "fake" if fake else "auto"
    async with KafkaCluster(
        brokers=brokers, server_properties=properties, source=source
    ) as cluster:
        sys.stdout.write(f"{cluster.bootstrap_servers}\n")
        sys.stdout.flush()
        seconds = cluster.startup_seconds or 0.0
        took = f"{seconds * 1000:.1f}ms" if fake else f"{seconds:.1f}s"
        sys.stderr.write(
            f"Kafka ({cluster.source}, {brokers} broker(s)) ready in {took}; "
            "press Ctrl-C to stop.\n"
        )
        await stop.wait()
        sys.stderr.write("stopping...\n")
    return 0


def _parse_properties(items: Sequence[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--property expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``aiostream-kafka``; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="aiostream-kafka")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    dev = sub.add_parser(
        "dev-broker",
        help="run a local Kafka cluster; print its bootstrap address; stop on Ctrl-C",
    )
    dev.add_argument("--brokers", type=int, default=1, help="number of brokers (default 1)")
    dev.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting to override (repeatable)",
    )
    dev.add_argument(
        "--fake",
        action="store_true",
        help="serve an in-process FakeCluster (no JVM; only --brokers and a few --property "
        "settings apply)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "dev-broker":
        if args.brokers < 1:
            parser.error("--brokers must be at least 1")
        try:
            return asyncio.run(
                _dev_broker(args.brokers, _parse_properties(args.property), fake=args.fake)
            )
        except BrokerUnavailableError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
