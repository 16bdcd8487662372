"""Generated protobuf messages and gRPC service stubs for memory.v1."""
