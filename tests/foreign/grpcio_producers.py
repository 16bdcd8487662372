"""Producers on Python's grpcio, sync and asyncio, driven the way their users drive them, for
tests/clients/foreign_grpcio.rs. On both APIs (Record and the legacy StreamResponseTokens) a producer
sends two tokens and then its call ends without complete=true: cancelled, its channel closed,
or its deadline passed. Each such recording must not be completed: it waits, detached, for its
producer to resume, and a resume then completes it. Then many calls share
one channel, half completing and half cancelled, and each ends as it should.

Usage: PYTHONPATH=STUBS python grpcio_producers.py HOST:PORT
(STUBS: Python stubs generated from proto/ with grpc_tools.protoc.)
Prints one JSON line per check; exits 1 if any failed.
"""

import asyncio
import json
import sys
import threading
import time

import grpc

from memory.v1 import response_recorder_pb2 as recorder_pb
from memory.v1 import response_recorder_pb2_grpc as recorder_grpc
from memory.v1 import response_resumer_pb2 as resumer_pb
from memory.v1 import response_resumer_pb2_grpc as resumer_grpc
from tapedeck.v1 import recordings_pb2 as recordings_pb
from tapedeck.v1 import recordings_pb2_grpc as recordings_grpc

TARGET = sys.argv[1]
WAIT = 20.0
FIRST = ["Hello", " world"]
SENT = len("".join(FIRST).encode())
REST = " again"
SHARED_CALLS = 40
# The deadline of the calls that are to run out of time.
DEADLINE = 3.0

failures = 0


def check(name, ok, **detail):
    global failures
    if not ok:
        failures += 1
    print(json.dumps({"ok": bool(ok), "check": name, **({} if ok else detail)}), flush=True)


class Server:
    """Plain blocking calls on a channel of their own: what the checks read."""

    def __init__(self):
        channel = grpc.insecure_channel(TARGET)
        self.recorder = recorder_grpc.ResponseRecorderServiceStub(channel)
        self.resumer = resumer_grpc.ResponseResumerServiceStub(channel)
        self.recordings = recordings_grpc.RecordingsStub(channel)

    def get(self, cid):
        request = recordings_pb.GetRecordingRequest(conversation_id=cid)
        return self.recordings.Get(request, timeout=5)

    def wait_for(self, cid, condition):
        """Polls Get until `condition` holds; returns the last recording seen."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                recording = self.get(cid)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                recording = None  # not started yet
            if recording and condition(recording) or time.monotonic() > deadline:
                return recording
            time.sleep(0.02)

    def wait_committed(self, cid, length):
        self.wait_for(cid, lambda r: r.byte_length >= length)

    def wait_let_go(self, cid):
        """Waits until the server has seen the producer's call end."""
        recording_status = recordings_pb.RECORDING_STATUS_RECORDING
        return self.wait_for(
            cid, lambda r: r.status != recording_status or not r.producer_attached
        )

    def replay(self, cid):
        stream = self.recorder.Replay(
            recorder_pb.ReplayRequest(conversation_id=cid), timeout=WAIT
        )
        text = "".join(message.content for message in stream)
        return text, dict(stream.trailing_metadata()).get("tapedeck-status")

    def resume_and_complete(self, api, cid):
        """Resumes the recording, resending everything from the start (what is committed
        already is skipped), and completes it; whether every answer was a success."""
        tokens = FIRST + [REST]
        if api == "recorder":
            requests = [recorder_pb.RecordRequest(conversation_id=cid, resume_from_offset=0)]
            requests += [recorder_pb.RecordRequest(content=token) for token in tokens]
            requests.append(recorder_pb.RecordRequest(complete=True))
            answer = self.recorder.Record(iter(requests), timeout=WAIT)
            return answer.status == recorder_pb.RECORD_STATUS_SUCCESS
        requests = [
            resumer_pb.StreamResponseTokenRequest(
                conversation_id=cid, token=tokens[0], resume_from_offset=0
            )
        ]
        requests += [resumer_pb.StreamResponseTokenRequest(token=token) for token in tokens[1:]]
        requests.append(resumer_pb.StreamResponseTokenRequest(complete=True))
        acks = list(self.resumer.StreamResponseTokens(iter(requests), timeout=WAIT))
        return len(acks) == len(requests) and all(ack.success for ack in acks)


def first_requests(api, cid):
    if api == "recorder":
        return [
            recorder_pb.RecordRequest(conversation_id=cid, content=FIRST[0]),
            recorder_pb.RecordRequest(content=FIRST[1]),
        ]
    return [
        resumer_pb.StreamResponseTokenRequest(conversation_id=cid, token=FIRST[0]),
        resumer_pb.StreamResponseTokenRequest(token=FIRST[1]),
    ]


def stub_on(api, channel):
    if api == "recorder":
        return recorder_grpc.ResponseRecorderServiceStub(channel).Record
    return resumer_grpc.ResponseResumerServiceStub(channel).StreamResponseTokens


def after_an_end_without_complete(server, name, api, cid):
    """The checks every producer that went away without complete=true must pass."""
    seen = server.wait_let_go(cid)
    check(
        f"{name}: still live, detached, not completed",
        seen.status == recordings_pb.RECORDING_STATUS_RECORDING and not seen.producer_attached,
        status=seen.status,
        attached=seen.producer_attached,
    )
    try:
        resumed = server.resume_and_complete(api, cid)
    except grpc.RpcError as err:
        resumed = f"{err.code()}: {err.details()}"
    check(f"{name}: a resume completes it", resumed is True, answer=resumed)
    text, status = server.replay(cid)
    check(
        f"{name}: replay is whole and completed",
        text == "".join(FIRST) + REST and status == "completed",
        text=text,
        status=status,
    )


def sync_producer(server, api, ending):
    """A sync-API producer whose request iterator waits after two tokens."""
    name = f"sync {api} {ending}"
    cid = f"grpcio-{name.replace(' ', '-')}".encode()
    channel = grpc.insecure_channel(TARGET)
    release = threading.Event()

    def requests():
        yield from first_requests(api, cid)
        release.wait(WAIT)

    timeout = DEADLINE if ending == "deadline" else WAIT
    call = stub_on(api, channel)
    if api == "recorder":
        outcome = call.future(requests(), timeout=timeout)
    else:
        outcome = call(requests(), timeout=timeout)
        next(outcome), next(outcome)  # both tokens acknowledged
    server.wait_committed(cid, SENT)
    if ending == "cancel":
        outcome.cancel()
    elif ending == "channel close":
        channel.close()
    else:
        try:
            outcome.result() if api == "recorder" else list(outcome)
        except grpc.RpcError as err:
            check(f"{name}: the deadline passed", err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, code=str(err.code()))
    after_an_end_without_complete(server, name, api, cid)
    release.set()
    channel.close()


async def aio_producer(server, api, ending):
    """An asyncio producer whose request iterator waits after two tokens."""
    name = f"asyncio {api} {ending}"
    cid = f"grpcio-{name.replace(' ', '-')}".encode()
    channel = grpc.aio.insecure_channel(TARGET)
    release = asyncio.Event()

    async def requests():
        for request in first_requests(api, cid):
            yield request
        await release.wait()

    timeout = DEADLINE if ending == "deadline" else WAIT
    call = stub_on(api, channel)(requests(), timeout=timeout)
    if api == "resumer":
        await call.read(), await call.read()  # both tokens acknowledged
    await asyncio.to_thread(server.wait_committed, cid, SENT)
    if ending == "cancel":
        call.cancel()
    elif ending == "channel close":
        await channel.close()
    else:
        try:
            if api == "recorder":
                await call
            while await call.read() != grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as err:
            check(f"{name}: the deadline passed", err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, code=str(err.code()))
    await asyncio.to_thread(after_an_end_without_complete, server, name, api, cid)
    release.set()
    await channel.close()


def sync_shared_channel(server, api):
    """Many calls on one channel, a thread each: even ones complete, odd ones are cancelled."""
    name = f"sync {api} shared channel"
    channel = grpc.insecure_channel(TARGET)
    call = stub_on(api, channel)
    release = threading.Event()
    answers = {}
    opened = {index: threading.Event() for index in range(SHARED_CALLS)}

    def producer(index):
        cid = f"grpcio-shared-sync-{api}-{index}".encode()
        completes = index % 2 == 0

        def requests():
            yield from first_requests(api, cid)
            if completes:
                yield complete_request(api)
            else:
                release.wait(WAIT)

        if api == "recorder":
            outcome = call.future(requests(), timeout=WAIT)
            answers[index] = outcome
            opened[index].set()
            if completes:
                answers[index] = outcome.result().status == recorder_pb.RECORD_STATUS_SUCCESS
        else:
            outcome = call(requests(), timeout=WAIT)
            answers[index] = outcome
            opened[index].set()
            if completes:
                acks = list(outcome)
                answers[index] = len(acks) == 3 and all(a.success for a in acks)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(SHARED_CALLS)]
    for thread in threads:
        thread.start()
    for index in range(1, SHARED_CALLS, 2):
        cid = f"grpcio-shared-sync-{api}-{index}".encode()
        server.wait_committed(cid, SENT)
        # Its thread has opened the call (its tokens are committed): cancel it.
        if opened[index].wait(WAIT):
            answers[index].cancel()
    for thread in threads:
        thread.join(WAIT)
    release.set()
    shared_channel_checks(server, name, api, "sync", answers)
    channel.close()


async def aio_shared_channel(server, api):
    """Many calls on one asyncio channel, a task each: even ones complete, odd ones cancelled."""
    name = f"asyncio {api} shared channel"
    channel = grpc.aio.insecure_channel(TARGET)
    call = stub_on(api, channel)
    release = asyncio.Event()

    async def producer(index):
        cid = f"grpcio-shared-asyncio-{api}-{index}".encode()
        completes = index % 2 == 0

        async def requests():
            for request in first_requests(api, cid):
                yield request
            if completes:
                yield complete_request(api)
            else:
                await release.wait()

        outcome = call(requests(), timeout=WAIT)
        if completes:
            if api == "recorder":
                return (await outcome).status == recorder_pb.RECORD_STATUS_SUCCESS
            acks = [ack async for ack in outcome]
            return len(acks) == 3 and all(a.success for a in acks)
        await asyncio.to_thread(server.wait_committed, cid, SENT)
        outcome.cancel()
        return None

    results = await asyncio.gather(*(producer(i) for i in range(SHARED_CALLS)))
    release.set()
    answers = dict(enumerate(results))
    await asyncio.to_thread(shared_channel_checks, server, name, api, "asyncio", answers)
    await channel.close()


def resume_quietly(server, api, cid):
    try:
        return server.resume_and_complete(api, cid)
    except grpc.RpcError:
        return False


def complete_request(api):
    if api == "recorder":
        return recorder_pb.RecordRequest(complete=True)
    return resumer_pb.StreamResponseTokenRequest(complete=True)


def shared_channel_checks(server, name, api, mode, answers):
    completed = [i for i in range(0, SHARED_CALLS, 2) if answers.get(i) is True]
    check(f"{name}: every completing call succeeded", len(completed) == SHARED_CALLS // 2, succeeded=len(completed))
    wrong = []
    for index in range(SHARED_CALLS):
        cid = f"grpcio-shared-{mode}-{api}-{index}".encode()
        if index % 2 == 0:
            text, status = server.replay(cid)
            if (text, status) != ("".join(FIRST), "completed"):
                wrong.append((index, text, status))
            continue
        seen = server.wait_let_go(cid)
        if seen.status != recordings_pb.RECORDING_STATUS_RECORDING or seen.producer_attached:
            wrong.append((index, "not detached", seen.status))
        elif not resume_quietly(server, api, cid):
            wrong.append((index, "resume failed", None))
        elif server.replay(cid) != ("".join(FIRST) + REST, "completed"):
            wrong.append((index, "resumed replay", server.replay(cid)))
    check(f"{name}: each call ended as it should, cancelled ones resumed", not wrong, wrong=wrong)


async def main():
    server = Server()
    endings = ["cancel", "channel close", "deadline"]
    for api in ["recorder", "resumer"]:
        for ending in endings:
            sync_producer(server, api, ending)
            await aio_producer(server, api, ending)
        sync_shared_channel(server, api)
        await aio_shared_channel(server, api)


asyncio.run(main())
sys.exit(1 if failures else 0)
