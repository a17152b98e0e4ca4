"""The gRPC skin over the service layer.

- :mod:`.server`: the servicer (every RPC: translate, call the service, translate back) and the server's start;
- :mod:`.batches`: ``StepMany``'s orders and a reply that fits one message;
- :mod:`.decoding`: requests whose bytes do not parse, answered ``INVALID_ARGUMENT`` without flooding the log;
- :mod:`.probes`: the standard health service and server reflection;
- :mod:`.step_streams`: the open ``StepStream`` calls, ended at once when the server stops.
"""
