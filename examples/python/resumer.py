"""A resumer: replays a recording from a saved byte offset and follows it live until it ends,
as a page that reloads would. Prints the text; the last offset and how the recording ended go
to stderr (from tapedeck's `offset` field and `tapedeck-status` trailer).

Usage: python resumer.py --server 127.0.0.1:9090 --conversation chat-42 [--from 0]
"""
import argparse
import sys

import grpc

from memory.v1 import response_recorder_pb2 as pb
from memory.v1 import response_recorder_pb2_grpc as rpc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="127.0.0.1:9090")
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--from", dest="offset", type=int, default=0)
    args = parser.parse_args()

    metadata = [("x-api-key", args.api_key)] if args.api_key else []
    offset = args.offset
    with grpc.insecure_channel(args.server) as channel:
        recorder = rpc.ResponseRecorderServiceStub(channel)
        replay = recorder.Replay(
            pb.ReplayRequest(
                conversation_id=args.conversation.encode(), resume_offset=offset
            ),
            metadata=metadata,
        )
        for message in replay:
            sys.stdout.write(message.content)
            sys.stdout.flush()
            offset = message.offset  # save this to resume after a reload
        ended = dict(replay.trailing_metadata()).get("tapedeck-status", "?")
    print(f"offset {offset}, ended {ended}", file=sys.stderr)


if __name__ == "__main__":
    main()
