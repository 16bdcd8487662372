"""Times Recordings/Get on the owner and on a non-owner (forwarded over the owner's Redis
inbox), and List of 100 rows on one instance of three (every instance asked) against a single
instance; N calls each, sequential, one channel per target.

With OWNER_HTTP and NON_OWNER_HTTP (their HTTP faces), also a catch-up read of a Durable
Stream made on the owner, through its own face and passed on by the non-owner's.

Usage: python3 forwarded_calls.py OWNER NON_OWNER N SINGLE [OWNER_HTTP NON_OWNER_HTTP]
(gRPC addresses; conversation `measured` recorded on OWNER; stubs generated into STUBS with
`python -m grpc_tools.protoc -Iproto --python_out=STUBS --grpc_python_out=STUBS
proto/tapedeck/v1/recordings.proto`, and STUBS on PYTHONPATH or /tmp/tdstubs).
"""
import sys, time, statistics, http.client, grpc
sys.path.insert(0, "/tmp/tdstubs")
from tapedeck.v1 import recordings_pb2 as pb, recordings_pb2_grpc as rpc

def timed(call, n):
    times = []
    for _ in range(n):
        t = time.perf_counter(); call(); times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]

owner, other, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for label, addr in [("Get on the owner", owner), ("Get forwarded from a non-owner", other)]:
    stub = rpc.RecordingsStub(grpc.insecure_channel(addr))
    req = pb.GetRecordingRequest(conversation_id=b"measured")
    p50, p99 = timed(lambda: stub.Get(req), n)
    print(f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
for label, addr in [("List (100 rows) on one of three instances", owner), ("List (100 rows) on a single instance", sys.argv[4])]:
    stub = rpc.RecordingsStub(grpc.insecure_channel(addr))
    req = pb.ListRecordingsRequest(page_size=100)
    p50, p99 = timed(lambda: stub.List(req), n)
    print(f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
if len(sys.argv) > 6:
    owner_http, other_http = sys.argv[5], sys.argv[6]
    setup = http.client.HTTPConnection(owner_http)
    setup.request("PUT", "/v1/stream/measured-http", headers={"content-type": "text/plain"})
    setup.getresponse().read()
    setup.request("POST", "/v1/stream/measured-http", body=b"x" * 1000,
                  headers={"content-type": "text/plain"})
    setup.getresponse().read()
    for label, addr in [("HTTP read on the owner", owner_http),
                        ("HTTP read passed on by a non-owner", other_http)]:
        conn = http.client.HTTPConnection(addr)
        def read():
            conn.request("GET", "/v1/stream/measured-http?offset=-1")
            answer = conn.getresponse()
            assert answer.status == 200 and len(answer.read()) == 1000, answer.status
        p50, p99 = timed(read, n)
        print(f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
