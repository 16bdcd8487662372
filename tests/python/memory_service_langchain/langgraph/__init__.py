"""LangGraph BaseStore backed by the Memory Service episodic API."""

from .store import MemoryServiceStore
from .async_store import AsyncMemoryServiceStore
from .indexing import IndexBuilder, IndexMode, IndexRedactor, build_index_payload

__all__ = [
    "MemoryServiceStore",
    "AsyncMemoryServiceStore",
    "IndexMode",
    "IndexBuilder",
    "IndexRedactor",
    "build_index_payload",
]
