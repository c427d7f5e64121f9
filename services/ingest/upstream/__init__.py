"""Where a call goes once chat_backend.py has decided its steps: a call and its answer (chat_calls.py), an external
model (external_models.py), the LoRA adapter that serves the policy (policy_adapter.py), the
replica per session (replica_router.py), forwarding with retries and failover (client.py) over pooled
HTTP/1.1 (http_pool.py), and the SSE it reads back (sse.py)."""
