"""The SDK's core: what the services and the front door share, apart from the calls agent code makes.

Token packing (`tokens`), the store's prompt splices (`splice_delta`), session slugs and their
budgets (`session_slug`, `session_budget`), end-user attribution (`attribution`), UUIDv7 ids (`ids`),
settings fields and a run's updatable settings (`settings_fields`, `update_settings`), the feedback
rule (`feedback_rule`), progress bars and lines (`progress`), when a group of returns has nothing to
teach (`group_returns`), a model's training defaults (`model_defaults`), and the dependency ranges the
generated code needs (`supported_versions`). Services import only this, the clients and the generated
API (pyproject's import contracts).
"""
