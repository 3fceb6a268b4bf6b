"""Apache Kafka brokers run locally from the Maven Central jars (KRaft, loopback only).

Each node is one JVM in combined ``broker,controller`` mode with its own client and
controller port (chosen free at run time), its own data dir and its own log file, all under
one temporary directory per cluster. The JVMs are plain ``subprocess.Popen`` children so
that a cluster is not tied to one event loop; on Linux they also get ``PR_SET_PDEATHSIG``
so that they die with the Python process even if it is SIGKILLed.

Older brokers (``version=``, for compatibility tests): Kafka 2.x/3.x run from their own
jars the same way. Before 3.3 KRaft was not production-ready (and before 2.8 it did not
exist), so those versions run in ZooKeeper mode by default: one more JVM, a standalone
ZooKeeper from the ZooKeeper jar Kafka ships, and brokers registered in it
(``zookeeper=True`` asks for that mode on any 2.x/3.x version; Kafka 4 has no ZooKeeper).
ZooKeeper mode is also the only way to make a broker keep a legacy message format
(``message.format.version`` is ignored from ``inter.broker.protocol.version`` 3.0 on, and
KRaft implies 3.0 or later): a 2.x broker does by default, a 3.x one needs
``inter.broker.protocol.version`` below 3.0 in ``server_properties``.

One module per job:

* :mod:`~aiostream_kafka.testing.local.config` -- what a broker is configured with: ports
  and files of a node, ``server.properties`` (KRaft or ZooKeeper mode, TLS, SASL, racks),
  the Log4j configuration, the SASL users;
* :mod:`~aiostream_kafka.testing.local.process` -- the JVMs as processes: the java command
  line, the one spawn (:func:`~.process.spawn_jvm`) and the one kill-and-wait
  (:func:`~.process.reap`) of every JVM, broker or ZooKeeper;
* :mod:`~aiostream_kafka.testing.local.zookeeper` -- the ZooKeeper of older brokers;
* :mod:`~aiostream_kafka.testing.local.cluster` -- :class:`LocalKafkaCluster`: format,
  start and wait, stop/kill/start one node, teardown.
"""

from __future__ import annotations

from aiostream_kafka.testing.local.cluster import LocalKafkaCluster
from aiostream_kafka.testing.local.config import (
    HOST,
    KRAFT_DEFAULT_FROM,
    SASL_MECHANISMS,
    SASL_SUPER_USER,
    SASL_USERS,
    free_ports,
    new_cluster_id,
    sasl_server_properties,
    scram_format_arguments,
)
from aiostream_kafka.testing.local.process import log_tail

__all__ = [
    "HOST",
    "KRAFT_DEFAULT_FROM",
    "SASL_MECHANISMS",
    "SASL_SUPER_USER",
    "SASL_USERS",
    "LocalKafkaCluster",
    "free_ports",
    "log_tail",
    "new_cluster_id",
    "sasl_server_properties",
    "scram_format_arguments",
]
