"""gRPC stubs generated from Memory Service protobuf contracts."""
