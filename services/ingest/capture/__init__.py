"""Capture: what ingest adds to a request and keeps of its answer (recorder.py), the one place a call is
recorded (call_capture.py), and where records go: the store or the local spool (capture_sink.py, spool.py,
and policy_record.py, the policy version kept in the spool's file)."""
