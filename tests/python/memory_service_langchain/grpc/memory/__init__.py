"""Generated protobuf package namespace."""
