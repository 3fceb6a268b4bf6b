"""Kafka's error codes as exception classes.

Every error code a broker may return (Kafka 4.3: -1 and 1 to 133; 0 means no error) has
a :class:`~aiostream_kafka.errors.KafkaError` subclass named after it --
``UNKNOWN_TOPIC_OR_PARTITION`` is :class:`UnknownTopicOrPartitionError` -- with
``error_code`` and ``retriable`` as class attributes. ``retriable`` follows Kafka's Java
client: true exactly for the errors whose exception there is a ``RetriableException``.

Four codes map to classes of :mod:`aiostream_kafka.errors`: 2 (CORRUPT_MESSAGE) to
:class:`~aiostream_kafka.errors.CorruptRecordError`, 7 (REQUEST_TIMED_OUT) to
:class:`~aiostream_kafka.errors.KafkaTimeoutError`, 13 (NETWORK_EXCEPTION) to
:class:`~aiostream_kafka.errors.NetworkError` and 35 (UNSUPPORTED_VERSION) to
:class:`~aiostream_kafka.errors.UnsupportedVersionError`.

Use :func:`raise_for_code` on a response's error code, or :func:`error_for_code` to get
the class. A code this table does not know maps to a subclass of
:class:`UnrecognizedBrokerError` that carries the code.
"""

from __future__ import annotations

from typing import NamedTuple

from aiostream_kafka.errors import (
    CorruptRecordError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    UnsupportedVersionError,
)

__all__ = [
    "ACCESS_DENIED_CODES",
    "ERRORS",
    "ERRORS_BY_CODE",
    "ERRORS_BY_NAME",
    "LEADER_MOVED_CODES",
    "TOPIC_GONE_CODES",
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "CorruptRecordError",
    "DelegationTokenAuthDisabledError",
    "DelegationTokenAuthorizationFailedError",
    "DelegationTokenExpiredError",
    "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError",
    "DelegationTokenRequestNotAllowedError",
    "DuplicateBrokerRegistrationError",
    "DuplicateResourceError",
    "DuplicateSequenceNumberError",
    "DuplicateVoterError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "ErrorInfo",
    "FeatureUpdateFailedError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "FencedStateEpochError",
    "FetchSessionIdNotFoundError",
    "FetchSessionTopicIdError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentClusterIdError",
    "InconsistentGroupProtocolError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "IneligibleReplicaError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigError",
    "InvalidFetchSessionEpochError",
    "InvalidFetchSizeError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidPrincipalTypeError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidRecordStateError",
    "InvalidRegistrationError",
    "InvalidRegularExpressionError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidShareSessionEpochError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "InvalidVoterKeyError",
    "KafkaStorageError",
    "KafkaTimeoutError",
    "LeaderNotAvailableError",
    "ListenerNotFoundError",
    "LogDirNotFoundError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "MismatchedEndpointTypeError",
    "NetworkError",
    "NewLeaderElectedError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetMovedToTieredStorageError",
    "OffsetNotAvailableError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PolicyViolationError",
    "PositionOutOfRangeError",
    "PreferredLeaderNotAvailableError",
    "PrincipalDeserializationFailureError",
    "ProducerFencedError",
    "ReassignmentInProgressError",
    "RebalanceInProgressError",
    "RebootstrapRequiredError",
    "RecordListTooLargeError",
    "RecordTooLargeError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SaslAuthenticationFailedError",
    "SecurityDisabledError",
    "ShareSessionLimitReachedError",
    "ShareSessionNotFoundError",
    "SnapshotNotFoundError",
    "StaleBrokerEpochError",
    "StaleControllerEpochError",
    "StaleMemberEpochError",
    "StreamsInvalidTopologyEpochError",
    "StreamsInvalidTopologyError",
    "StreamsTopologyFencedError",
    "TelemetryTooLargeError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TopicDeletionDisabledError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownControllerIdError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownSubscriptionIdError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnrecognizedBrokerError",
    "UnreleasedInstanceIdError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedCompressionTypeError",
    "UnsupportedEndpointTypeError",
    "UnsupportedForMessageFormatError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "VoterNotFoundError",
    "error_for_code",
    "error_from_code",
    "is_retriable",
    "raise_for_code",
]


class UnknownServerError(KafkaError):
    """The broker hit an unexpected error while handling the request."""

    error_code = -1


class OffsetOutOfRangeError(KafkaError):
    """The requested offset is outside the range of offsets the broker holds for the partition."""

    error_code = 1


class UnknownTopicOrPartitionError(KafkaError):
    """The broker does not host this topic-partition."""

    error_code = 3
    retriable = True


class InvalidFetchSizeError(KafkaError):
    """The requested fetch size is invalid."""

    error_code = 4


class LeaderNotAvailableError(KafkaError):
    """The partition has no leader right now, e.g. during a leader election."""

    error_code = 5
    retriable = True


class NotLeaderOrFollowerError(KafkaError):
    """The broker is not the leader (or not a replica) of the partition."""

    error_code = 6
    retriable = True


class BrokerNotAvailableError(KafkaError):
    """The broker is not available."""

    error_code = 8


class ReplicaNotAvailableError(KafkaError):
    """The replica is not available for the requested topic-partition."""

    error_code = 9
    retriable = True


class MessageTooLargeError(KafkaError):
    """A message is larger than the broker accepts."""

    error_code = 10


class StaleControllerEpochError(KafkaError):
    """The request carried an old controller epoch."""

    error_code = 11


class OffsetMetadataTooLargeError(KafkaError):
    """The metadata string of an offset commit is too large."""

    error_code = 12


class CoordinatorLoadInProgressError(KafkaError):
    """The coordinator is still loading its state."""

    error_code = 14
    retriable = True


class CoordinatorNotAvailableError(KafkaError):
    """The coordinator is not available."""

    error_code = 15
    retriable = True


class NotCoordinatorError(KafkaError):
    """The broker is not the coordinator of this group or transactional id."""

    error_code = 16
    retriable = True


class InvalidTopicError(KafkaError):
    """The topic name is invalid, or the operation is not allowed on it."""

    error_code = 17


class RecordListTooLargeError(KafkaError):
    """A record batch is larger than the broker's segment size."""

    error_code = 18


class NotEnoughReplicasError(KafkaError):
    """Fewer in-sync replicas than required; the records were not written."""

    error_code = 19
    retriable = True


class NotEnoughReplicasAfterAppendError(KafkaError):
    """The records were written, but to fewer in-sync replicas than required."""

    error_code = 20
    retriable = True


class InvalidRequiredAcksError(KafkaError):
    """The produce request has an invalid acks value."""

    error_code = 21


class IllegalGenerationError(KafkaError):
    """The group generation id is not current."""

    error_code = 22


class InconsistentGroupProtocolError(KafkaError):
    """The member's protocols do not match those of the group."""

    error_code = 23


class InvalidGroupIdError(KafkaError):
    """The group id is invalid."""

    error_code = 24


class UnknownMemberIdError(KafkaError):
    """The coordinator does not know this member id."""

    error_code = 25


class InvalidSessionTimeoutError(KafkaError):
    """The session timeout is outside the range the broker allows."""

    error_code = 26


class RebalanceInProgressError(KafkaError):
    """The group is rebalancing; the member must rejoin."""

    error_code = 27


class InvalidCommitOffsetSizeError(KafkaError):
    """The offset commit data has an invalid size."""

    error_code = 28


class TopicAuthorizationFailedError(KafkaError):
    """Not authorized to access the topic."""

    error_code = 29


class GroupAuthorizationFailedError(KafkaError):
    """Not authorized to access the group."""

    error_code = 30


class ClusterAuthorizationFailedError(KafkaError):
    """Not authorized for this cluster operation."""

    error_code = 31


class InvalidTimestampError(KafkaError):
    """A message timestamp is outside the accepted range."""

    error_code = 32


class UnsupportedSaslMechanismError(KafkaError):
    """The broker does not support the SASL mechanism."""

    error_code = 33


class IllegalSaslStateError(KafkaError):
    """The request is not valid in the current SASL state."""

    error_code = 34


class TopicAlreadyExistsError(KafkaError):
    """A topic with this name already exists."""

    error_code = 36


class InvalidPartitionsError(KafkaError):
    """The number of partitions is invalid."""

    error_code = 37


class InvalidReplicationFactorError(KafkaError):
    """The replication factor is invalid."""

    error_code = 38


class InvalidReplicaAssignmentError(KafkaError):
    """The replica assignment is invalid."""

    error_code = 39


class InvalidConfigError(KafkaError):
    """The configuration is invalid."""

    error_code = 40


class NotControllerError(KafkaError):
    """The broker is not the active controller."""

    error_code = 41
    retriable = True


class InvalidRequestError(KafkaError):
    """The request is malformed or not valid for this broker; see the broker log."""

    error_code = 42


class UnsupportedForMessageFormatError(KafkaError):
    """The broker's message format does not support the request."""

    error_code = 43


class PolicyViolationError(KafkaError):
    """The request violates a configured broker policy."""

    error_code = 44


class OutOfOrderSequenceNumberError(KafkaError):
    """The broker received a producer sequence number out of order."""

    error_code = 45


class DuplicateSequenceNumberError(KafkaError):
    """The broker received a duplicate producer sequence number."""

    error_code = 46


class InvalidProducerEpochError(KafkaError):
    """The producer epoch is older than the broker's (the producer was fenced)."""

    error_code = 47


class InvalidTxnStateError(KafkaError):
    """The transactional operation is invalid in the transaction's current state."""

    error_code = 48


class InvalidProducerIdMappingError(KafkaError):
    """The producer id is not assigned to this transactional id."""

    error_code = 49


class InvalidTransactionTimeoutError(KafkaError):
    """The transaction timeout exceeds the broker's maximum."""

    error_code = 50


class ConcurrentTransactionsError(KafkaError):
    """Another operation on the same transaction is in progress."""

    error_code = 51
    retriable = True


class TransactionCoordinatorFencedError(KafkaError):
    """The transaction coordinator sending the markers is no longer current."""

    error_code = 52


class TransactionalIdAuthorizationFailedError(KafkaError):
    """Not authorized to use the transactional id."""

    error_code = 53


class SecurityDisabledError(KafkaError):
    """Security features are disabled on the broker."""

    error_code = 54


class OperationNotAttemptedError(KafkaError):
    """The broker skipped this operation because another one in the batch failed."""

    error_code = 55


class KafkaStorageError(KafkaError):
    """The broker hit a disk error while accessing the log."""

    error_code = 56
    retriable = True


class LogDirNotFoundError(KafkaError):
    """The log directory is not in the broker's configuration."""

    error_code = 57


class SaslAuthenticationFailedError(KafkaError):
    """SASL authentication failed."""

    error_code = 58


class UnknownProducerIdError(KafkaError):
    """The broker has no state for this producer id (e.g. its records expired)."""

    error_code = 59


class ReassignmentInProgressError(KafkaError):
    """A partition reassignment is in progress."""

    error_code = 60


class DelegationTokenAuthDisabledError(KafkaError):
    """Delegation tokens are not enabled."""

    error_code = 61


class DelegationTokenNotFoundError(KafkaError):
    """The delegation token does not exist."""

    error_code = 62


class DelegationTokenOwnerMismatchError(KafkaError):
    """The principal is not the owner or renewer of the token."""

    error_code = 63


class DelegationTokenRequestNotAllowedError(KafkaError):
    """Delegation token requests are not allowed on this channel."""

    error_code = 64


class DelegationTokenAuthorizationFailedError(KafkaError):
    """Not authorized for the delegation token operation."""

    error_code = 65


class DelegationTokenExpiredError(KafkaError):
    """The delegation token has expired."""

    error_code = 66


class InvalidPrincipalTypeError(KafkaError):
    """The principal type is not supported."""

    error_code = 67


class NonEmptyGroupError(KafkaError):
    """The group is not empty."""

    error_code = 68


class GroupIdNotFoundError(KafkaError):
    """The group does not exist."""

    error_code = 69


class FetchSessionIdNotFoundError(KafkaError):
    """The fetch session id is not known to the broker."""

    error_code = 70
    retriable = True


class InvalidFetchSessionEpochError(KafkaError):
    """The fetch session epoch is not the expected one."""

    error_code = 71
    retriable = True


class ListenerNotFoundError(KafkaError):
    """The leader has no listener matching the one the request came in on."""

    error_code = 72
    retriable = True


class TopicDeletionDisabledError(KafkaError):
    """Topic deletion is disabled on the broker."""

    error_code = 73


class FencedLeaderEpochError(KafkaError):
    """The request's leader epoch is older than the broker's."""

    error_code = 74
    retriable = True


class UnknownLeaderEpochError(KafkaError):
    """The request's leader epoch is newer than the broker's."""

    error_code = 75
    retriable = True


class UnsupportedCompressionTypeError(KafkaError):
    """The consumer does not support the partition's compression type."""

    error_code = 76


class StaleBrokerEpochError(KafkaError):
    """The broker epoch has changed."""

    error_code = 77


class OffsetNotAvailableError(KafkaError):
    """The leader's high watermark has not caught up after an election yet."""

    error_code = 78
    retriable = True


class MemberIdRequiredError(KafkaError):
    """The member must rejoin with the member id the coordinator assigned."""

    error_code = 79


class PreferredLeaderNotAvailableError(KafkaError):
    """The preferred leader is not available."""

    error_code = 80
    retriable = True


class GroupMaxSizeReachedError(KafkaError):
    """The group has reached its maximum number of members."""

    error_code = 81


class FencedInstanceIdError(KafkaError):
    """Another member with the same group.instance.id fenced this one."""

    error_code = 82


class EligibleLeadersNotAvailableError(KafkaError):
    """No eligible leader is available for the partition."""

    error_code = 83
    retriable = True


class ElectionNotNeededError(KafkaError):
    """The partition needs no leader election."""

    error_code = 84
    retriable = True


class NoReassignmentInProgressError(KafkaError):
    """No partition reassignment is in progress."""

    error_code = 85


class GroupSubscribedToTopicError(KafkaError):
    """Offsets of a topic the group is subscribed to cannot be deleted."""

    error_code = 86


class InvalidRecordError(KafkaError):
    """The broker rejected a record that failed its validation."""

    error_code = 87


class UnstableOffsetCommitError(KafkaError):
    """Unstable (transactional) offsets are pending for the partition."""

    error_code = 88
    retriable = True


class ThrottlingQuotaExceededError(KafkaError):
    """The throttling quota was exceeded."""

    error_code = 89
    retriable = True


class ProducerFencedError(KafkaError):
    """A newer producer with the same transactional id fenced this one."""

    error_code = 90


class ResourceNotFoundError(KafkaError):
    """The request referred to a resource that does not exist."""

    error_code = 91


class DuplicateResourceError(KafkaError):
    """The request referred to the same resource twice."""

    error_code = 92


class UnacceptableCredentialError(KafkaError):
    """The requested credential does not meet the acceptance criteria."""

    error_code = 93


class InconsistentVoterSetError(KafkaError):
    """The sender or receiver of a voter request is not an expected voter."""

    error_code = 94


class InvalidUpdateVersionError(KafkaError):
    """The update version is invalid."""

    error_code = 95


class FeatureUpdateFailedError(KafkaError):
    """The finalized features could not be updated."""

    error_code = 96


class PrincipalDeserializationFailureError(KafkaError):
    """The forwarded request principal could not be deserialized."""

    error_code = 97


class SnapshotNotFoundError(KafkaError):
    """The requested snapshot does not exist."""

    error_code = 98


class PositionOutOfRangeError(KafkaError):
    """The requested position is outside the snapshot."""

    error_code = 99


class UnknownTopicIdError(KafkaError):
    """The broker does not host a topic with this id."""

    error_code = 100
    retriable = True


class DuplicateBrokerRegistrationError(KafkaError):
    """The broker id is already registered."""

    error_code = 101


class BrokerIdNotRegisteredError(KafkaError):
    """The broker id is not registered."""

    error_code = 102


class InconsistentTopicIdError(KafkaError):
    """The topic id in the request does not match the log's."""

    error_code = 103
    retriable = True


class InconsistentClusterIdError(KafkaError):
    """The cluster id in the request does not match the broker's."""

    error_code = 104


class TransactionalIdNotFoundError(KafkaError):
    """The transactional id does not exist."""

    error_code = 105


class FetchSessionTopicIdError(KafkaError):
    """The fetch session used topic ids inconsistently."""

    error_code = 106
    retriable = True


class IneligibleReplicaError(KafkaError):
    """The new ISR contains an ineligible replica."""

    error_code = 107


class NewLeaderElectedError(KafkaError):
    """The partition state was updated, but a new leader was elected meanwhile."""

    error_code = 108


class OffsetMovedToTieredStorageError(KafkaError):
    """The requested offset has moved to tiered storage."""

    error_code = 109


class FencedMemberEpochError(KafkaError):
    """The member epoch is fenced; the member must rejoin with no partitions."""

    error_code = 110


class UnreleasedInstanceIdError(KafkaError):
    """Another member still uses this group.instance.id."""

    error_code = 111


class UnsupportedAssignorError(KafkaError):
    """The group does not support the assignor or its version."""

    error_code = 112


class StaleMemberEpochError(KafkaError):
    """The member epoch is stale; retry with the epoch from the next heartbeat."""

    error_code = 113


class MismatchedEndpointTypeError(KafkaError):
    """The request was sent to an endpoint of the wrong type."""

    error_code = 114


class UnsupportedEndpointTypeError(KafkaError):
    """This endpoint type is not supported."""

    error_code = 115


class UnknownControllerIdError(KafkaError):
    """The controller id is not known."""

    error_code = 116


class UnknownSubscriptionIdError(KafkaError):
    """The client telemetry subscription id is unknown or outdated."""

    error_code = 117


class TelemetryTooLargeError(KafkaError):
    """The client telemetry payload is larger than the broker accepts."""

    error_code = 118


class InvalidRegistrationError(KafkaError):
    """The controller found the broker registration invalid."""

    error_code = 119


class TransactionAbortableError(KafkaError):
    """The transaction failed; abort it to keep using the transactional id."""

    error_code = 120


class InvalidRecordStateError(KafkaError):
    """The record is in a state that does not allow the acknowledgement."""

    error_code = 121


class ShareSessionNotFoundError(KafkaError):
    """The share session does not exist."""

    error_code = 122
    retriable = True


class InvalidShareSessionEpochError(KafkaError):
    """The share session epoch is not the expected one."""

    error_code = 123
    retriable = True


class FencedStateEpochError(KafkaError):
    """The share-group state epoch does not match."""

    error_code = 124


class InvalidVoterKeyError(KafkaError):
    """The voter key does not match the receiving replica's."""

    error_code = 125


class DuplicateVoterError(KafkaError):
    """The voter is already in the voter set."""

    error_code = 126


class VoterNotFoundError(KafkaError):
    """The voter is not in the voter set."""

    error_code = 127


class InvalidRegularExpressionError(KafkaError):
    """The regular expression is invalid."""

    error_code = 128


class RebootstrapRequiredError(KafkaError):
    """The client's metadata is stale; it must rebootstrap."""

    error_code = 129


class StreamsInvalidTopologyError(KafkaError):
    """The Streams topology is invalid."""

    error_code = 130


class StreamsInvalidTopologyEpochError(KafkaError):
    """The Streams topology epoch is invalid."""

    error_code = 131


class StreamsTopologyFencedError(KafkaError):
    """The Streams topology epoch is outdated."""

    error_code = 132


class ShareSessionLimitReachedError(KafkaError):
    """The broker's limit of share sessions has been reached."""

    error_code = 133
    retriable = True


class UnrecognizedBrokerError(KafkaError):
    """An error code this client does not know; subclasses carry the code."""


class ErrorInfo(NamedTuple):
    """One row of Kafka's error table."""

    code: int
    #: Kafka's name of the error, e.g. ``NOT_LEADER_OR_FOLLOWER``.
    name: str
    error_class: type[KafkaError]
    #: Whether repeating the request may succeed (Kafka's ``RetriableException``).
    retriable: bool
    #: Whether the client's metadata is probably stale and should be refreshed before a
    #: retry (Kafka's ``InvalidMetadataException``).
    invalid_metadata: bool
    description: str


#: Every known error code, in code order (code 0, NONE, is not an error and is absent).
ERRORS: tuple[ErrorInfo, ...] = (
    ErrorInfo(
        -1,
        "UNKNOWN_SERVER_ERROR",
        UnknownServerError,
        False,
        False,
        "The broker hit an unexpected error while handling the request.",
    ),
    ErrorInfo(
        1,
        "OFFSET_OUT_OF_RANGE",
        OffsetOutOfRangeError,
        False,
        False,
        "The requested offset is outside the range of offsets the broker holds for the partition.",
    ),
    ErrorInfo(
        2,
        "CORRUPT_MESSAGE",
        CorruptRecordError,
        True,
        False,
        "A message failed its CRC check, is too large, or is otherwise corrupt.",
    ),
    ErrorInfo(
        3,
        "UNKNOWN_TOPIC_OR_PARTITION",
        UnknownTopicOrPartitionError,
        True,
        True,
        "The broker does not host this topic-partition.",
    ),
    ErrorInfo(
        4,
        "INVALID_FETCH_SIZE",
        InvalidFetchSizeError,
        False,
        False,
        "The requested fetch size is invalid.",
    ),
    ErrorInfo(
        5,
        "LEADER_NOT_AVAILABLE",
        LeaderNotAvailableError,
        True,
        True,
        "The partition has no leader right now, e.g. during a leader election.",
    ),
    ErrorInfo(
        6,
        "NOT_LEADER_OR_FOLLOWER",
        NotLeaderOrFollowerError,
        True,
        True,
        "The broker is not the leader (or not a replica) of the partition.",
    ),
    ErrorInfo(
        7,
        "REQUEST_TIMED_OUT",
        KafkaTimeoutError,
        True,
        False,
        "The request timed out on the broker.",
    ),
    ErrorInfo(
        8,
        "BROKER_NOT_AVAILABLE",
        BrokerNotAvailableError,
        False,
        False,
        "The broker is not available.",
    ),
    ErrorInfo(
        9,
        "REPLICA_NOT_AVAILABLE",
        ReplicaNotAvailableError,
        True,
        True,
        "The replica is not available for the requested topic-partition.",
    ),
    ErrorInfo(
        10,
        "MESSAGE_TOO_LARGE",
        MessageTooLargeError,
        False,
        False,
        "A message is larger than the broker accepts.",
    ),
    ErrorInfo(
        11,
        "STALE_CONTROLLER_EPOCH",
        StaleControllerEpochError,
        False,
        False,
        "The request carried an old controller epoch.",
    ),
    ErrorInfo(
        12,
        "OFFSET_METADATA_TOO_LARGE",
        OffsetMetadataTooLargeError,
        False,
        False,
        "The metadata string of an offset commit is too large.",
    ),
    ErrorInfo(
        13,
        "NETWORK_EXCEPTION",
        NetworkError,
        True,
        True,
        "The connection was lost before a response arrived.",
    ),
    ErrorInfo(
        14,
        "COORDINATOR_LOAD_IN_PROGRESS",
        CoordinatorLoadInProgressError,
        True,
        False,
        "The coordinator is still loading its state.",
    ),
    ErrorInfo(
        15,
        "COORDINATOR_NOT_AVAILABLE",
        CoordinatorNotAvailableError,
        True,
        False,
        "The coordinator is not available.",
    ),
    ErrorInfo(
        16,
        "NOT_COORDINATOR",
        NotCoordinatorError,
        True,
        False,
        "The broker is not the coordinator of this group or transactional id.",
    ),
    ErrorInfo(
        17,
        "INVALID_TOPIC_EXCEPTION",
        InvalidTopicError,
        False,
        False,
        "The topic name is invalid, or the operation is not allowed on it.",
    ),
    ErrorInfo(
        18,
        "RECORD_LIST_TOO_LARGE",
        RecordListTooLargeError,
        False,
        False,
        "A record batch is larger than the broker's segment size.",
    ),
    ErrorInfo(
        19,
        "NOT_ENOUGH_REPLICAS",
        NotEnoughReplicasError,
        True,
        False,
        "Fewer in-sync replicas than required; the records were not written.",
    ),
    ErrorInfo(
        20,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        NotEnoughReplicasAfterAppendError,
        True,
        False,
        "The records were written, but to fewer in-sync replicas than required.",
    ),
    ErrorInfo(
        21,
        "INVALID_REQUIRED_ACKS",
        InvalidRequiredAcksError,
        False,
        False,
        "The produce request has an invalid acks value.",
    ),
    ErrorInfo(
        22,
        "ILLEGAL_GENERATION",
        IllegalGenerationError,
        False,
        False,
        "The group generation id is not current.",
    ),
    ErrorInfo(
        23,
        "INCONSISTENT_GROUP_PROTOCOL",
        InconsistentGroupProtocolError,
        False,
        False,
        "The member's protocols do not match those of the group.",
    ),
    ErrorInfo(
        24,
        "INVALID_GROUP_ID",
        InvalidGroupIdError,
        False,
        False,
        "The group id is invalid.",
    ),
    ErrorInfo(
        25,
        "UNKNOWN_MEMBER_ID",
        UnknownMemberIdError,
        False,
        False,
        "The coordinator does not know this member id.",
    ),
    ErrorInfo(
        26,
        "INVALID_SESSION_TIMEOUT",
        InvalidSessionTimeoutError,
        False,
        False,
        "The session timeout is outside the range the broker allows.",
    ),
    ErrorInfo(
        27,
        "REBALANCE_IN_PROGRESS",
        RebalanceInProgressError,
        False,
        False,
        "The group is rebalancing; the member must rejoin.",
    ),
    ErrorInfo(
        28,
        "INVALID_COMMIT_OFFSET_SIZE",
        InvalidCommitOffsetSizeError,
        False,
        False,
        "The offset commit data has an invalid size.",
    ),
    ErrorInfo(
        29,
        "TOPIC_AUTHORIZATION_FAILED",
        TopicAuthorizationFailedError,
        False,
        False,
        "Not authorized to access the topic.",
    ),
    ErrorInfo(
        30,
        "GROUP_AUTHORIZATION_FAILED",
        GroupAuthorizationFailedError,
        False,
        False,
        "Not authorized to access the group.",
    ),
    ErrorInfo(
        31,
        "CLUSTER_AUTHORIZATION_FAILED",
        ClusterAuthorizationFailedError,
        False,
        False,
        "Not authorized for this cluster operation.",
    ),
    ErrorInfo(
        32,
        "INVALID_TIMESTAMP",
        InvalidTimestampError,
        False,
        False,
        "A message timestamp is outside the accepted range.",
    ),
    ErrorInfo(
        33,
        "UNSUPPORTED_SASL_MECHANISM",
        UnsupportedSaslMechanismError,
        False,
        False,
        "The broker does not support the SASL mechanism.",
    ),
    ErrorInfo(
        34,
        "ILLEGAL_SASL_STATE",
        IllegalSaslStateError,
        False,
        False,
        "The request is not valid in the current SASL state.",
    ),
    ErrorInfo(
        35,
        "UNSUPPORTED_VERSION",
        UnsupportedVersionError,
        False,
        False,
        "The broker does not support this version of the API.",
    ),
    ErrorInfo(
        36,
        "TOPIC_ALREADY_EXISTS",
        TopicAlreadyExistsError,
        False,
        False,
        "A topic with this name already exists.",
    ),
    ErrorInfo(
        37,
        "INVALID_PARTITIONS",
        InvalidPartitionsError,
        False,
        False,
        "The number of partitions is invalid.",
    ),
    ErrorInfo(
        38,
        "INVALID_REPLICATION_FACTOR",
        InvalidReplicationFactorError,
        False,
        False,
        "The replication factor is invalid.",
    ),
    ErrorInfo(
        39,
        "INVALID_REPLICA_ASSIGNMENT",
        InvalidReplicaAssignmentError,
        False,
        False,
        "The replica assignment is invalid.",
    ),
    ErrorInfo(
        40,
        "INVALID_CONFIG",
        InvalidConfigError,
        False,
        False,
        "The configuration is invalid.",
    ),
    ErrorInfo(
        41,
        "NOT_CONTROLLER",
        NotControllerError,
        True,
        False,
        "The broker is not the active controller.",
    ),
    ErrorInfo(
        42,
        "INVALID_REQUEST",
        InvalidRequestError,
        False,
        False,
        "The request is malformed or not valid for this broker; see the broker log.",
    ),
    ErrorInfo(
        43,
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        UnsupportedForMessageFormatError,
        False,
        False,
        "The broker's message format does not support the request.",
    ),
    ErrorInfo(
        44,
        "POLICY_VIOLATION",
        PolicyViolationError,
        False,
        False,
        "The request violates a configured broker policy.",
    ),
    ErrorInfo(
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        OutOfOrderSequenceNumberError,
        False,
        False,
        "The broker received a producer sequence number out of order.",
    ),
    ErrorInfo(
        46,
        "DUPLICATE_SEQUENCE_NUMBER",
        DuplicateSequenceNumberError,
        False,
        False,
        "The broker received a duplicate producer sequence number.",
    ),
    ErrorInfo(
        47,
        "INVALID_PRODUCER_EPOCH",
        InvalidProducerEpochError,
        False,
        False,
        "The producer epoch is older than the broker's (the producer was fenced).",
    ),
    ErrorInfo(
        48,
        "INVALID_TXN_STATE",
        InvalidTxnStateError,
        False,
        False,
        "The transactional operation is invalid in the transaction's current state.",
    ),
    ErrorInfo(
        49,
        "INVALID_PRODUCER_ID_MAPPING",
        InvalidProducerIdMappingError,
        False,
        False,
        "The producer id is not assigned to this transactional id.",
    ),
    ErrorInfo(
        50,
        "INVALID_TRANSACTION_TIMEOUT",
        InvalidTransactionTimeoutError,
        False,
        False,
        "The transaction timeout exceeds the broker's maximum.",
    ),
    ErrorInfo(
        51,
        "CONCURRENT_TRANSACTIONS",
        ConcurrentTransactionsError,
        True,
        False,
        "Another operation on the same transaction is in progress.",
    ),
    ErrorInfo(
        52,
        "TRANSACTION_COORDINATOR_FENCED",
        TransactionCoordinatorFencedError,
        False,
        False,
        "The transaction coordinator sending the markers is no longer current.",
    ),
    ErrorInfo(
        53,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        TransactionalIdAuthorizationFailedError,
        False,
        False,
        "Not authorized to use the transactional id.",
    ),
    ErrorInfo(
        54,
        "SECURITY_DISABLED",
        SecurityDisabledError,
        False,
        False,
        "Security features are disabled on the broker.",
    ),
    ErrorInfo(
        55,
        "OPERATION_NOT_ATTEMPTED",
        OperationNotAttemptedError,
        False,
        False,
        "The broker skipped this operation because another one in the batch failed.",
    ),
    ErrorInfo(
        56,
        "KAFKA_STORAGE_ERROR",
        KafkaStorageError,
        True,
        True,
        "The broker hit a disk error while accessing the log.",
    ),
    ErrorInfo(
        57,
        "LOG_DIR_NOT_FOUND",
        LogDirNotFoundError,
        False,
        False,
        "The log directory is not in the broker's configuration.",
    ),
    ErrorInfo(
        58,
        "SASL_AUTHENTICATION_FAILED",
        SaslAuthenticationFailedError,
        False,
        False,
        "SASL authentication failed.",
    ),
    ErrorInfo(
        59,
        "UNKNOWN_PRODUCER_ID",
        UnknownProducerIdError,
        False,
        False,
        "The broker has no state for this producer id (e.g. its records expired).",
    ),
    ErrorInfo(
        60,
        "REASSIGNMENT_IN_PROGRESS",
        ReassignmentInProgressError,
        False,
        False,
        "A partition reassignment is in progress.",
    ),
    ErrorInfo(
        61,
        "DELEGATION_TOKEN_AUTH_DISABLED",
        DelegationTokenAuthDisabledError,
        False,
        False,
        "Delegation tokens are not enabled.",
    ),
    ErrorInfo(
        62,
        "DELEGATION_TOKEN_NOT_FOUND",
        DelegationTokenNotFoundError,
        False,
        False,
        "The delegation token does not exist.",
    ),
    ErrorInfo(
        63,
        "DELEGATION_TOKEN_OWNER_MISMATCH",
        DelegationTokenOwnerMismatchError,
        False,
        False,
        "The principal is not the owner or renewer of the token.",
    ),
    ErrorInfo(
        64,
        "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        DelegationTokenRequestNotAllowedError,
        False,
        False,
        "Delegation token requests are not allowed on this channel.",
    ),
    ErrorInfo(
        65,
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        DelegationTokenAuthorizationFailedError,
        False,
        False,
        "Not authorized for the delegation token operation.",
    ),
    ErrorInfo(
        66,
        "DELEGATION_TOKEN_EXPIRED",
        DelegationTokenExpiredError,
        False,
        False,
        "The delegation token has expired.",
    ),
    ErrorInfo(
        67,
        "INVALID_PRINCIPAL_TYPE",
        InvalidPrincipalTypeError,
        False,
        False,
        "The principal type is not supported.",
    ),
    ErrorInfo(68, "NON_EMPTY_GROUP", NonEmptyGroupError, False, False, "The group is not empty."),
    ErrorInfo(
        69,
        "GROUP_ID_NOT_FOUND",
        GroupIdNotFoundError,
        False,
        False,
        "The group does not exist.",
    ),
    ErrorInfo(
        70,
        "FETCH_SESSION_ID_NOT_FOUND",
        FetchSessionIdNotFoundError,
        True,
        False,
        "The fetch session id is not known to the broker.",
    ),
    ErrorInfo(
        71,
        "INVALID_FETCH_SESSION_EPOCH",
        InvalidFetchSessionEpochError,
        True,
        False,
        "The fetch session epoch is not the expected one.",
    ),
    ErrorInfo(
        72,
        "LISTENER_NOT_FOUND",
        ListenerNotFoundError,
        True,
        True,
        "The leader has no listener matching the one the request came in on.",
    ),
    ErrorInfo(
        73,
        "TOPIC_DELETION_DISABLED",
        TopicDeletionDisabledError,
        False,
        False,
        "Topic deletion is disabled on the broker.",
    ),
    ErrorInfo(
        74,
        "FENCED_LEADER_EPOCH",
        FencedLeaderEpochError,
        True,
        True,
        "The request's leader epoch is older than the broker's.",
    ),
    ErrorInfo(
        75,
        "UNKNOWN_LEADER_EPOCH",
        UnknownLeaderEpochError,
        True,
        False,
        "The request's leader epoch is newer than the broker's.",
    ),
    ErrorInfo(
        76,
        "UNSUPPORTED_COMPRESSION_TYPE",
        UnsupportedCompressionTypeError,
        False,
        False,
        "The consumer does not support the partition's compression type.",
    ),
    ErrorInfo(
        77,
        "STALE_BROKER_EPOCH",
        StaleBrokerEpochError,
        False,
        False,
        "The broker epoch has changed.",
    ),
    ErrorInfo(
        78,
        "OFFSET_NOT_AVAILABLE",
        OffsetNotAvailableError,
        True,
        False,
        "The leader's high watermark has not caught up after an election yet.",
    ),
    ErrorInfo(
        79,
        "MEMBER_ID_REQUIRED",
        MemberIdRequiredError,
        False,
        False,
        "The member must rejoin with the member id the coordinator assigned.",
    ),
    ErrorInfo(
        80,
        "PREFERRED_LEADER_NOT_AVAILABLE",
        PreferredLeaderNotAvailableError,
        True,
        True,
        "The preferred leader is not available.",
    ),
    ErrorInfo(
        81,
        "GROUP_MAX_SIZE_REACHED",
        GroupMaxSizeReachedError,
        False,
        False,
        "The group has reached its maximum number of members.",
    ),
    ErrorInfo(
        82,
        "FENCED_INSTANCE_ID",
        FencedInstanceIdError,
        False,
        False,
        "Another member with the same group.instance.id fenced this one.",
    ),
    ErrorInfo(
        83,
        "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        EligibleLeadersNotAvailableError,
        True,
        True,
        "No eligible leader is available for the partition.",
    ),
    ErrorInfo(
        84,
        "ELECTION_NOT_NEEDED",
        ElectionNotNeededError,
        True,
        True,
        "The partition needs no leader election.",
    ),
    ErrorInfo(
        85,
        "NO_REASSIGNMENT_IN_PROGRESS",
        NoReassignmentInProgressError,
        False,
        False,
        "No partition reassignment is in progress.",
    ),
    ErrorInfo(
        86,
        "GROUP_SUBSCRIBED_TO_TOPIC",
        GroupSubscribedToTopicError,
        False,
        False,
        "Offsets of a topic the group is subscribed to cannot be deleted.",
    ),
    ErrorInfo(
        87,
        "INVALID_RECORD",
        InvalidRecordError,
        False,
        False,
        "The broker rejected a record that failed its validation.",
    ),
    ErrorInfo(
        88,
        "UNSTABLE_OFFSET_COMMIT",
        UnstableOffsetCommitError,
        True,
        False,
        "Unstable (transactional) offsets are pending for the partition.",
    ),
    ErrorInfo(
        89,
        "THROTTLING_QUOTA_EXCEEDED",
        ThrottlingQuotaExceededError,
        True,
        False,
        "The throttling quota was exceeded.",
    ),
    ErrorInfo(
        90,
        "PRODUCER_FENCED",
        ProducerFencedError,
        False,
        False,
        "A newer producer with the same transactional id fenced this one.",
    ),
    ErrorInfo(
        91,
        "RESOURCE_NOT_FOUND",
        ResourceNotFoundError,
        False,
        False,
        "The request referred to a resource that does not exist.",
    ),
    ErrorInfo(
        92,
        "DUPLICATE_RESOURCE",
        DuplicateResourceError,
        False,
        False,
        "The request referred to the same resource twice.",
    ),
    ErrorInfo(
        93,
        "UNACCEPTABLE_CREDENTIAL",
        UnacceptableCredentialError,
        False,
        False,
        "The requested credential does not meet the acceptance criteria.",
    ),
    ErrorInfo(
        94,
        "INCONSISTENT_VOTER_SET",
        InconsistentVoterSetError,
        False,
        False,
        "The sender or receiver of a voter request is not an expected voter.",
    ),
    ErrorInfo(
        95,
        "INVALID_UPDATE_VERSION",
        InvalidUpdateVersionError,
        False,
        False,
        "The update version is invalid.",
    ),
    ErrorInfo(
        96,
        "FEATURE_UPDATE_FAILED",
        FeatureUpdateFailedError,
        False,
        False,
        "The finalized features could not be updated.",
    ),
    ErrorInfo(
        97,
        "PRINCIPAL_DESERIALIZATION_FAILURE",
        PrincipalDeserializationFailureError,
        False,
        False,
        "The forwarded request principal could not be deserialized.",
    ),
    ErrorInfo(
        98,
        "SNAPSHOT_NOT_FOUND",
        SnapshotNotFoundError,
        False,
        False,
        "The requested snapshot does not exist.",
    ),
    ErrorInfo(
        99,
        "POSITION_OUT_OF_RANGE",
        PositionOutOfRangeError,
        False,
        False,
        "The requested position is outside the snapshot.",
    ),
    ErrorInfo(
        100,
        "UNKNOWN_TOPIC_ID",
        UnknownTopicIdError,
        True,
        True,
        "The broker does not host a topic with this id.",
    ),
    ErrorInfo(
        101,
        "DUPLICATE_BROKER_REGISTRATION",
        DuplicateBrokerRegistrationError,
        False,
        False,
        "The broker id is already registered.",
    ),
    ErrorInfo(
        102,
        "BROKER_ID_NOT_REGISTERED",
        BrokerIdNotRegisteredError,
        False,
        False,
        "The broker id is not registered.",
    ),
    ErrorInfo(
        103,
        "INCONSISTENT_TOPIC_ID",
        InconsistentTopicIdError,
        True,
        True,
        "The topic id in the request does not match the log's.",
    ),
    ErrorInfo(
        104,
        "INCONSISTENT_CLUSTER_ID",
        InconsistentClusterIdError,
        False,
        False,
        "The cluster id in the request does not match the broker's.",
    ),
    ErrorInfo(
        105,
        "TRANSACTIONAL_ID_NOT_FOUND",
        TransactionalIdNotFoundError,
        False,
        False,
        "The transactional id does not exist.",
    ),
    ErrorInfo(
        106,
        "FETCH_SESSION_TOPIC_ID_ERROR",
        FetchSessionTopicIdError,
        True,
        False,
        "The fetch session used topic ids inconsistently.",
    ),
    ErrorInfo(
        107,
        "INELIGIBLE_REPLICA",
        IneligibleReplicaError,
        False,
        False,
        "The new ISR contains an ineligible replica.",
    ),
    ErrorInfo(
        108,
        "NEW_LEADER_ELECTED",
        NewLeaderElectedError,
        False,
        False,
        "The partition state was updated, but a new leader was elected meanwhile.",
    ),
    ErrorInfo(
        109,
        "OFFSET_MOVED_TO_TIERED_STORAGE",
        OffsetMovedToTieredStorageError,
        False,
        False,
        "The requested offset has moved to tiered storage.",
    ),
    ErrorInfo(
        110,
        "FENCED_MEMBER_EPOCH",
        FencedMemberEpochError,
        False,
        False,
        "The member epoch is fenced; the member must rejoin with no partitions.",
    ),
    ErrorInfo(
        111,
        "UNRELEASED_INSTANCE_ID",
        UnreleasedInstanceIdError,
        False,
        False,
        "Another member still uses this group.instance.id.",
    ),
    ErrorInfo(
        112,
        "UNSUPPORTED_ASSIGNOR",
        UnsupportedAssignorError,
        False,
        False,
        "The group does not support the assignor or its version.",
    ),
    ErrorInfo(
        113,
        "STALE_MEMBER_EPOCH",
        StaleMemberEpochError,
        False,
        False,
        "The member epoch is stale; retry with the epoch from the next heartbeat.",
    ),
    ErrorInfo(
        114,
        "MISMATCHED_ENDPOINT_TYPE",
        MismatchedEndpointTypeError,
        False,
        False,
        "The request was sent to an endpoint of the wrong type.",
    ),
    ErrorInfo(
        115,
        "UNSUPPORTED_ENDPOINT_TYPE",
        UnsupportedEndpointTypeError,
        False,
        False,
        "This endpoint type is not supported.",
    ),
    ErrorInfo(
        116,
        "UNKNOWN_CONTROLLER_ID",
        UnknownControllerIdError,
        False,
        False,
        "The controller id is not known.",
    ),
    ErrorInfo(
        117,
        "UNKNOWN_SUBSCRIPTION_ID",
        UnknownSubscriptionIdError,
        False,
        False,
        "The client telemetry subscription id is unknown or outdated.",
    ),
    ErrorInfo(
        118,
        "TELEMETRY_TOO_LARGE",
        TelemetryTooLargeError,
        False,
        False,
        "The client telemetry payload is larger than the broker accepts.",
    ),
    ErrorInfo(
        119,
        "INVALID_REGISTRATION",
        InvalidRegistrationError,
        False,
        False,
        "The controller found the broker registration invalid.",
    ),
    ErrorInfo(
        120,
        "TRANSACTION_ABORTABLE",
        TransactionAbortableError,
        False,
        False,
        "The transaction failed; abort it to keep using the transactional id.",
    ),
    ErrorInfo(
        121,
        "INVALID_RECORD_STATE",
        InvalidRecordStateError,
        False,
        False,
        "The record is in a state that does not allow the acknowledgement.",
    ),
    ErrorInfo(
        122,
        "SHARE_SESSION_NOT_FOUND",
        ShareSessionNotFoundError,
        True,
        False,
        "The share session does not exist.",
    ),
    ErrorInfo(
        123,
        "INVALID_SHARE_SESSION_EPOCH",
        InvalidShareSessionEpochError,
        True,
        False,
        "The share session epoch is not the expected one.",
    ),
    ErrorInfo(
        124,
        "FENCED_STATE_EPOCH",
        FencedStateEpochError,
        False,
        False,
        "The share-group state epoch does not match.",
    ),
    ErrorInfo(
        125,
        "INVALID_VOTER_KEY",
        InvalidVoterKeyError,
        False,
        False,
        "The voter key does not match the receiving replica's.",
    ),
    ErrorInfo(
        126,
        "DUPLICATE_VOTER",
        DuplicateVoterError,
        False,
        False,
        "The voter is already in the voter set.",
    ),
    ErrorInfo(
        127,
        "VOTER_NOT_FOUND",
        VoterNotFoundError,
        False,
        False,
        "The voter is not in the voter set.",
    ),
    ErrorInfo(
        128,
        "INVALID_REGULAR_EXPRESSION",
        InvalidRegularExpressionError,
        False,
        False,
        "The regular expression is invalid.",
    ),
    ErrorInfo(
        129,
        "REBOOTSTRAP_REQUIRED",
        RebootstrapRequiredError,
        False,
        False,
        "The client's metadata is stale; it must rebootstrap.",
    ),
    ErrorInfo(
        130,
        "STREAMS_INVALID_TOPOLOGY",
        StreamsInvalidTopologyError,
        False,
        False,
        "The Streams topology is invalid.",
    ),
    ErrorInfo(
        131,
        "STREAMS_INVALID_TOPOLOGY_EPOCH",
        StreamsInvalidTopologyEpochError,
        False,
        False,
        "The Streams topology epoch is invalid.",
    ),
    ErrorInfo(
        132,
        "STREAMS_TOPOLOGY_FENCED",
        StreamsTopologyFencedError,
        False,
        False,
        "The Streams topology epoch is outdated.",
    ),
    ErrorInfo(
        133,
        "SHARE_SESSION_LIMIT_REACHED",
        ShareSessionLimitReachedError,
        True,
        False,
        "The broker's limit of share sessions has been reached.",
    ),
)

ERRORS_BY_CODE: dict[int, ErrorInfo] = {info.code: info for info in ERRORS}
ERRORS_BY_NAME: dict[str, ErrorInfo] = {info.name: info for info in ERRORS}

#: Kafka's names for the classes :mod:`aiostream_kafka.errors` already defines.
CorruptMessageError = CorruptRecordError
RequestTimedOutError = KafkaTimeoutError
#: The Java client's name for MESSAGE_TOO_LARGE (code 10), which the producer raises for a
#: record larger than ``max_request_size`` or than a broker accepts.
RecordTooLargeError = MessageTooLargeError

_CLASSES: dict[int, type[KafkaError]] = {info.code: info.error_class for info in ERRORS}

#: Partition errors of a Fetch (or Produce) meaning the partition's leader moved or is not
#: ready: find the leader again and retry. LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
#: REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
#: OFFSET_NOT_AVAILABLE.
LEADER_MOVED_CODES: frozenset[int] = frozenset({5, 6, 9, 56, 74, 75, 78})
#: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID: the topic was
#: deleted, re-created, or is not yet known to this broker; the metadata tells which.
TOPIC_GONE_CODES: frozenset[int] = frozenset({3, 100, 103})
#: The application may not do this (authorization) or is not who it claims
#: (authentication): TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_ and
#: DELEGATION_TOKEN_AUTHORIZATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE,
#: SASL_AUTHENTICATION_FAILED. No other broker and no retry fixes them; a client's
#: background task that meets one stops and reports it.
ACCESS_DENIED_CODES: frozenset[int] = frozenset({29, 30, 31, 33, 34, 53, 58, 65})


def error_for_code(code: int) -> type[KafkaError]:
    """Return the exception class of Kafka error ``code``.

    An unknown code gets a subclass of :class:`UnrecognizedBrokerError` whose
    ``error_code`` is ``code`` (made once per code). Raises :class:`ValueError` for 0,
    which means "no error".
    """
    cls = _CLASSES.get(code)
    if cls is not None:
        return cls
    if code == 0:
        raise ValueError("error code 0 (NONE) is not an error")
    cls = type(
        f"UnrecognizedBrokerError{code}".replace("-", "_"),
        (UnrecognizedBrokerError,),
        {"error_code": code, "__module__": __name__, "__doc__": f"Unknown error code {code}."},
    )
    _CLASSES[code] = cls
    return cls


def error_from_code(code: int, message: str | None = None) -> KafkaError:
    """Return an instance of the exception of ``code`` (``code`` must not be 0).

    The message is ``message`` if given, else the error's name and description.
    """
    cls = error_for_code(code)
    if message is None:
        info = ERRORS_BY_CODE.get(code)
        message = f"{info.name}: {info.description}" if info else f"unknown error code {code}"
    return cls(message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the exception of Kafka error ``code``; do nothing if ``code`` is 0.

    ``message`` (e.g. the response's ``error_message``) replaces the default text.
    """
    if code != 0:
        raise error_from_code(code, message)


def is_retriable(code: int) -> bool:
    """Return whether Kafka error ``code`` is retriable (False for 0 and unknown codes)."""
    info = ERRORS_BY_CODE.get(code)
    return info is not None and info.retriable
