"""LangChain-specific integrations for Memory Service."""

from .chat_helpers import (
    chunk_to_json_log,
    extract_assistant_text,
    extract_stream_tokens,
    extract_stream_text,
    stream_chunks_as_sse,
    summarize_stream_event,
    to_sse_chunk,
)
from .checkpoint_saver import MemoryServiceCheckpointSaver
from .history_middleware import MemoryServiceHistoryMiddleware
from .proxy import MemoryServiceProxy, to_fastapi_response
from .request_context import (
    get_request_authorization,
    get_request_conversation_id,
    get_request_forked_at_conversation_id,
    get_request_forked_at_entry_id,
    get_request_stream_mode,
    install_fastapi_authorization_middleware,
    memory_service_scope,
    memory_service_request,
)
from .response_recording_manager import MemoryServiceResponseRecordingManager

__all__ = [
    "MemoryServiceCheckpointSaver",
    "MemoryServiceHistoryMiddleware",
    "MemoryServiceProxy",
    "MemoryServiceResponseRecordingManager",
    "chunk_to_json_log",
    "extract_assistant_text",
    "extract_stream_tokens",
    "extract_stream_text",
    "get_request_authorization",
    "get_request_conversation_id",
    "get_request_forked_at_conversation_id",
    "get_request_forked_at_entry_id",
    "get_request_stream_mode",
    "install_fastapi_authorization_middleware",
    "memory_service_scope",
    "memory_service_request",
    "stream_chunks_as_sse",
    "summarize_stream_event",
    "to_sse_chunk",
    "to_fastapi_response",
]
