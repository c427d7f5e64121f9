"""Promotion: what serves users changes only through the gate (`gate`), every decision is kept
(`log`), and `serving` pushes a candidate into the serving replicas, runs its canary and rolls back."""
