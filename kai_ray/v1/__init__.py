"""kai-ray's gRPC API, version 1: code generated from ``proto/kai_ray/v1/*.proto`` by
``make proto`` (grpcio-tools). Never edit these files; a test fails when they drift."""
