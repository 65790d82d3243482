"""The API's operations (submit, status, watch, explain, queues, what-if, cluster), independent
of transport: the gRPC server (`kai_ray.rpc.transport`) and the CLI's offline mode call the
same code, on either backend (the embedded simulated cluster or a Kubernetes cluster)."""
