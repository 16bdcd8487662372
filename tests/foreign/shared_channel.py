"""Many producers on ONE grpcio channel (sync API, a thread per call), one short token per
message: the way an agent server shares one channel across all the recordings it makes.

Driven by tests/clients/foreign_shared_channel.rs. Every call sends its first message (the id) at once,
then waits for a line "go" on stdin (the harness stops the server meanwhile, so the tokens pile
up on the connection), then sends its tokens, one per message, and `complete=true`. Prints
"sent" once every call has handed all its messages to the connection (the harness then lets
the server go on), then one JSON line: what went wrong, if anything; exits 1 when any call did
not end as it should.

Stubs: python -m grpc_tools.protoc -I proto --python_out=OUT --grpc_python_out=OUT \
           proto/memory/v1/response_recorder.proto proto/memory/v1/response_resumer.proto
Usage: python shared_channel.py --server HOST:PORT --api recorder|resumer \
           --producers 1000 --tokens 10 --prefix NAME
"""
import argparse
import json
import sys
import threading

import grpc
import grpc._common

from memory.v1 import response_recorder_pb2 as recorder_pb
from memory.v1 import response_recorder_pb2_grpc as recorder_rpc
from memory.v1 import response_resumer_pb2 as resumer_pb
from memory.v1 import response_resumer_pb2_grpc as resumer_rpc

# Two thousand threads (each call's own and grpcio's request consumer) would otherwise thrash
# the GIL: grpcio's sync API wakes every waiting thread every 0.1 s to poll (its private
# MAXIMUM_WAIT_TIMEOUT) although events wake them anyway, and Python asks the running thread to
# hand the GIL over every 5 ms. Neither changes what goes on the wire; together they took a
# thousand legacy calls from over 150 s to 26 s on a busy 2-core machine.
grpc._common.MAXIMUM_WAIT_TIMEOUT = 5.0
sys.setswitchinterval(0.05)

# A call that is not over by then failed (the harness's own deadline is longer).
CALL_TIMEOUT_SECONDS = 120


def tokens_of(producer: int, count: int) -> list[str]:
    """The tokens producer `producer` sends; the harness builds the same list to check."""
    return [f" t{producer}.{j}" for j in range(count)]


class Sent:
    """Counts the calls whose messages have all been sent; says "sent" when all have."""

    def __init__(self, calls: int):
        self.left = calls
        self.lock = threading.Lock()

    def one(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left == 0:
                print("sent", flush=True)


def requests(message, text_field: str, conversation: bytes, tokens: list[str], go: threading.Event, sent: Sent):
    """One call's messages, of either API: the id, then (on "go") a token each, then the end."""
    yield message(conversation_id=conversation)
    go.wait()
    for token in tokens:
        yield message(**{text_field: token})
    yield message(complete=True)
    # grpcio asks for the next message only once the last one's send has completed.
    sent.one()


def record(channel, conversation: bytes, tokens: list[str], go: threading.Event, sent: Sent) -> str | None:
    """One current-API call; None when it ended SUCCESS, else what happened."""
    stub = recorder_rpc.ResponseRecorderServiceStub(channel)
    answer = stub.Record(
        requests(recorder_pb.RecordRequest, "content", conversation, tokens, go, sent), timeout=CALL_TIMEOUT_SECONDS
    )
    if answer.status != recorder_pb.RECORD_STATUS_SUCCESS:
        return f"status {answer.status}: {answer.error_message}"
    return None


def stream_tokens(
    channel, conversation: bytes, tokens: list[str], go: threading.Event, sent: Sent
) -> str | None:
    """One legacy call; None when every request got a successful ack, the last one at the
    recording's full length, and the stream closed OK."""
    stub = resumer_rpc.ResponseResumerServiceStub(channel)
    acks = list(
        stub.StreamResponseTokens(
            requests(resumer_pb.StreamResponseTokenRequest, "token", conversation, tokens, go, sent), timeout=CALL_TIMEOUT_SECONDS
        )
    )
    # One ack per request: the id, each token, and the completion.
    expected = len(tokens) + 2
    if len(acks) != expected:
        return f"{len(acks)} acks for {expected} requests"
    refused = [ack.error_message for ack in acks if not ack.success or ack.cancel_requested]
    if refused:
        return f"refused: {refused[0]}"
    length = len("".join(tokens).encode())
    if acks[-1].current_offset != length:
        return f"final offset {acks[-1].current_offset}, expected {length}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", required=True)
    parser.add_argument("--api", choices=["recorder", "resumer"], required=True)
    parser.add_argument("--producers", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=10)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()

    call = record if args.api == "recorder" else stream_tokens
    go = threading.Event()
    sent = Sent(args.producers)
    failures: list[str] = []
    lock = threading.Lock()

    def producer(i: int, channel) -> None:
        conversation = f"{args.prefix}-{i}".encode()
        try:
            failure = call(channel, conversation, tokens_of(i, args.tokens), go, sent)
        except grpc.RpcError as err:
            failure = f"{err.code().name}: {err.details()}"
        except Exception as err:  # noqa: BLE001 - any failure is reported, not raised
            failure = f"{type(err).__name__}: {err}"
        if failure is not None:
            with lock:
                failures.append(f"{conversation.decode()}: {failure}")

    # One channel is one HTTP/2 connection: every call below shares it.
    with grpc.insecure_channel(args.server) as channel:
        threads = [
            threading.Thread(target=producer, args=(i, channel), daemon=True)
            for i in range(args.producers)
        ]
        for thread in threads:
            thread.start()
        print("started", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("expected 'go' on stdin")
        go.set()
        for thread in threads:
            thread.join()

    print(json.dumps({"calls": args.producers, "failed": len(failures), "first": failures[:5]}))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
