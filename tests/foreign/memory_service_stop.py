"""Memory Service's own Python client (vendored unchanged in tests/python/) on its cancel path,
for tests/clients/foreign_grpcio.rs: one app instance streams an endless response through the
client's recording manager; a user presses "stop" in another tab, served by a second app
instance, whose manager cancels the conversation. The producing instance must be told, stop
its source, and end its stream; the recording must end cancelled (the Rust test checks that).

Usage: MEMORY_SERVICE_GRPC_TARGET=HOST:PORT PYTHONPATH=tests/python \
       python memory_service_stop.py CONVERSATION_ID
Prints one JSON object: the chunks the user saw and how many tokens the source produced.
"""

import asyncio
import json
import sys

from memory_service_langchain import MemoryServiceResponseRecordingManager

WAIT = 20.0


async def main(conversation_id: str) -> None:
    producing = MemoryServiceResponseRecordingManager.from_env()
    other_tab = MemoryServiceResponseRecordingManager.from_env()
    produced = 0

    async def endless_answer():
        nonlocal produced
        while True:
            produced += 1
            yield f" token{produced}"
            await asyncio.sleep(0.02)

    seen = []

    async def follow():
        async for chunk in producing.stream_from_source(conversation_id, endless_answer()):
            seen.append(chunk)
            if len(seen) == 5:
                # The user presses stop in another tab, served by another app instance.
                await asyncio.to_thread(other_tab.cancel, conversation_id)

    await asyncio.wait_for(follow(), WAIT)
    print(json.dumps({"seen": seen, "produced": produced}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
