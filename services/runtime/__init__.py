"""The runtime every Parity gRPC service shares: server, errors, logging, configuration."""
