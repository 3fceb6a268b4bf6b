"""process()'s throttle of a partition is independent of the user's pause/resume and of a
revocation's hold: each lifts only its own reason."""

from aiostream_kafka import Consumer, TopicPartition


def test_throttle_and_pause_each_lift_only_their_own() -> None:
    consumer = Consumer("localhost:9")
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    consumer.assign([tp0, tp1])
    engine = consumer._engine
    engine.throttle([tp0, TopicPartition("t", 7)])  # an unassigned one is skipped
    assert consumer.paused() == {tp0}
    consumer.resume(tp0)  # the user's resume does not undo process()'s throttle
    assert consumer.paused() == {tp0}
    consumer.pause(tp0, tp1)
    engine.unthrottle([tp0, tp1])  # nor does the end of a throttle undo the user's pause
    assert consumer.paused() == {tp0, tp1}
    consumer.resume(tp0, tp1)
    assert consumer.paused() == set()
    engine.throttle([tp1])
    engine.hold([tp1])
    engine.unthrottle([tp1])  # a partition being revoked stays paused
    assert consumer.paused() == {tp1}
    assert not engine.partitions[tp1].fetchable(10)


def test_rewind_carries_what_finished_until_the_position_moves() -> None:
    """A process() run that ends with records taken and unfinished rewinds the partition
    to its committable offset and leaves the finished offsets beyond it for the next run;
    a seek of the user's drops that."""
    consumer = Consumer("localhost:9")
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    engine = consumer._engine
    consumer.seek(tp, 40)
    engine.rewind(tp, 40, frozenset({42, 43}))
    assert engine.carried(tp) == (40, frozenset({42, 43}))
    consumer.seek(tp, 45)
    assert engine.carried(tp) is None
    engine.rewind(TopicPartition("t", 9), 1, frozenset())  # unassigned: skipped
    assert engine.carried(TopicPartition("t", 9)) is None
