"""The OpenAI Responses API: protocol.py (the request as chat messages), chain.py (previous_response_id), answers.py (the chat answer as a response or its events), serving.py (the endpoint)."""
