"""Internal protocols: generated protobuf/gRPC modules (regenerate with `make proto`)."""
