"""The web console: runs, batches and trajectories token by token, over the services' gRPC APIs."""
