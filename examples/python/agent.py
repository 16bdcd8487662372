"""A minimal agent: streams a (simulated) LLM response to tapedeck as it is produced, with the
current API's Record call, and prints the byte length recorded.

Stubs: python -m grpc_tools.protoc -I ../../proto --python_out=. --grpc_python_out=. \
           ../../proto/memory/v1/response_recorder.proto
Usage: python agent.py --server 127.0.0.1:9090 --conversation chat-42 [--delay 0.05] TOKEN...
"""
import argparse
import time

import grpc

from memory.v1 import response_recorder_pb2 as pb
from memory.v1 import response_recorder_pb2_grpc as rpc


def requests(conversation: str, tokens: list[str], delay: float):
    # The first message names the conversation; each token follows as it is "generated".
    yield pb.RecordRequest(conversation_id=conversation.encode())
    for token in tokens:
        time.sleep(delay)
        yield pb.RecordRequest(content=token)
    yield pb.RecordRequest(complete=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="127.0.0.1:9090")
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("tokens", nargs="+")
    args = parser.parse_args()

    metadata = [("x-api-key", args.api_key)] if args.api_key else []
    with grpc.insecure_channel(args.server) as channel:
        recorder = rpc.ResponseRecorderServiceStub(channel)
        answer = recorder.Record(
            requests(args.conversation, args.tokens, args.delay), metadata=metadata
        )
    if answer.status != pb.RECORD_STATUS_SUCCESS:
        raise SystemExit(f"recording failed: {answer.error_message}")
    print(len("".join(args.tokens).encode()))


if __name__ == "__main__":
    main()
