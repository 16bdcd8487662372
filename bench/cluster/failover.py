"""Failover time of a three-node tapedeck cluster, measured from outside: a producer on a
follower streams one token every 2 ms through the legacy StreamResponseTokens API (one ack per
token, after its commit on a majority), a reader on the other follower follows the recording
live, and the leader is SIGKILLed. Prints, in ms: the longest gap between two acks around the
kill, the time from the kill to the first ack after it, and the same two for the live reader's
tokens.

Usage: PYTHONPATH=STUBS python failover.py PRODUCER_ADDR READER_ADDR LEADER_PID
(STUBS: Python stubs generated from proto/ with grpc_tools.protoc.)
"""

import os
import signal
import sys
import threading
import time

import grpc

from memory.v1 import response_recorder_pb2 as recorder_pb
from memory.v1 import response_recorder_pb2_grpc as recorder_grpc
from memory.v1 import response_resumer_pb2 as resumer_pb
from memory.v1 import response_resumer_pb2_grpc as resumer_grpc

PRODUCER, READER, LEADER_PID = sys.argv[1], sys.argv[2], int(sys.argv[3])
CONVERSATION = f"failover-{int(time.time())}"
TOKENS_BEFORE, TOKENS_AFTER = 1500, 2500

acks, reads = [], []


def requests():
    for i in range(TOKENS_BEFORE + TOKENS_AFTER):
        yield resumer_pb.StreamResponseTokenRequest(
            conversation_id=CONVERSATION.encode() if i == 0 else b"",
            token=f"{i}|",
            complete=(i == TOKENS_BEFORE + TOKENS_AFTER - 1),
        )
        time.sleep(0.002)


def produce():
    stub = resumer_grpc.ResponseResumerServiceStub(grpc.insecure_channel(PRODUCER))
    for response in stub.StreamResponseTokens(requests(), timeout=120):
        if response.success:
            acks.append(time.monotonic())


def read():
    # A replay of a recording not started yet ends at once, empty (as Memory Service's server
    # answers); it is asked again until the recording is there.
    stub = recorder_grpc.ResponseRecorderServiceStub(grpc.insecure_channel(READER))
    deadline = time.monotonic() + 10
    while True:
        for message in stub.Replay(
            recorder_pb.ReplayRequest(conversation_id=CONVERSATION.encode()), timeout=120
        ):
            reads.append(time.monotonic())
        if reads:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the recording never appeared to the reader")
        time.sleep(0.01)


def gaps(times, killed):
    after = [t for t in times if t > killed]
    first = (after[0] - killed) * 1000 if after else float("nan")
    around = [t for t in times if killed - 1 < t < killed + 10]
    longest = max((b - a for a, b in zip(around, around[1:])), default=float("nan")) * 1000
    return first, longest, len(after)


producer = threading.Thread(target=produce)
reader = threading.Thread(target=read)
producer.start()
reader.start()
while len(acks) < TOKENS_BEFORE:
    time.sleep(0.001)
killed = time.monotonic()
os.kill(LEADER_PID, signal.SIGKILL)
producer.join()
reader.join()
ack_first, ack_gap, ack_after = gaps(acks, killed)
read_first, read_gap, read_after = gaps(reads, killed)
print(f"acks: {len(acks)} in all, {ack_after} after the kill; first ack after the kill "
      f"{ack_first:.0f} ms, longest gap {ack_gap:.0f} ms")
print(f"live reader: {len(reads)} messages; first after the kill {read_first:.0f} ms, "
      f"longest gap {read_gap:.0f} ms")
