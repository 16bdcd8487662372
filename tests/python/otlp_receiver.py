"""An OTLP/gRPC trace receiver for tapedeck's trace tests (tests/cluster/traces.rs).

Serves the collector's TraceService, built from the official opentelemetry-proto definitions,
on 127.0.0.1 at a free port, printed first as `port N`; then prints each span it receives as
one JSON line: its name, kind, trace and span ids, parent id, attributes, status code and its
resource's service.name. Runs until killed.
"""
import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def plain(value):
    """An attribute's value as JSON takes it."""
    which = value.WhichOneof("value")
    if which in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(value, which)
    return str(value)


def attributes(pairs):
    return {pair.key: plain(pair.value) for pair in pairs}


# Exports arrive on several server threads at once (one per node): one line at a time.
PRINTING = threading.Lock()


def emit(span):
    line = json.dumps(span) + "\n"
    with PRINTING:
        sys.stdout.write(line)
        sys.stdout.flush()


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = attributes(resource_spans.resource.attributes).get("service.name")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    emit({
                        "name": span.name,
                        "kind": span.kind,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "attributes": attributes(span.attributes),
                        "status": span.status.code,
                        "service": service,
                    })
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"port {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
