"""Memory Service's Python client, unchanged, against one tapedeck instance: it checks which of
the given conversations are live, replays the first one (following redirects up to
MEMORY_SERVICE_GRPC_MAX_REDIRECTS), and prints both as one JSON object.

Usage: MEMORY_SERVICE_GRPC_TARGET=host:port python replay_through_redirect.py ID [ID...]
"""
import asyncio
import json
import logging
import sys

from memory_service_langchain import MemoryServiceResponseRecordingManager


async def main(ids: list[str]) -> None:
    # The client logs each redirect it follows at INFO; the test reads that from stderr.
    logging.basicConfig(level=logging.INFO)
    manager = MemoryServiceResponseRecordingManager.from_env()
    live = manager.check(ids)
    chunks = [chunk async for chunk in manager.replay(ids[0])]
    print(json.dumps({"live": live, "replayed": "".join(chunks)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
