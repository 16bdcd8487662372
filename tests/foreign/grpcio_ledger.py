"""A producer on Python's grpcio (sync) for tests/cluster/replication_torture.rs: records one response
after another through the Record API, each to the next of the cluster's nodes, until a stop
file appears; a call that fails moves it to the next node. Prints one JSON line per recording:
its id, what it sent, and whether the server acknowledged it (Record answered SUCCESS).

Usage: PYTHONPATH=STUBS python grpcio_ledger.py HOST:PORT,HOST:PORT,... PREFIX STOP_FILE
"""

import json
import os
import sys
import time

import grpc

from memory.v1 import response_recorder_pb2 as recorder_pb
from memory.v1 import response_recorder_pb2_grpc as recorder_grpc

TARGETS = sys.argv[1].split(",")
PREFIX = sys.argv[2]
STOP_FILE = sys.argv[3]
TOKENS = 30
CALL_DEADLINE = 40.0


def messages(conversation, tokens):
    yield recorder_pb.RecordRequest(conversation_id=conversation.encode())
    for token in tokens:
        time.sleep(0.003)
        yield recorder_pb.RecordRequest(content=token)
    yield recorder_pb.RecordRequest(complete=True)


def main():
    channels = [grpc.insecure_channel(target) for target in TARGETS]
    stubs = [recorder_grpc.ResponseRecorderServiceStub(channel) for channel in channels]
    n = 0
    while not os.path.exists(STOP_FILE):
        n += 1
        conversation = f"{PREFIX}-{n}"
        tokens = [f"{conversation}:{i}|" for i in range(TOKENS)]
        stub = stubs[n % len(stubs)]
        try:
            answer = stub.Record(messages(conversation, tokens), timeout=CALL_DEADLINE)
            acked = answer.status == recorder_pb.RECORD_STATUS_SUCCESS
            detail = answer.error_message
        except grpc.RpcError as err:
            acked = False
            detail = f"{err.code()}: {err.details()}"
        print(
            json.dumps(
                {"id": conversation, "sent": "".join(tokens), "acked": acked, "detail": detail}
            ),
            flush=True,
        )
    for channel in channels:
        channel.close()


if __name__ == "__main__":
    main()
