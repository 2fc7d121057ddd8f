"""Forge's database plumbing: ``postgresql`` (the backend with row-level security) and
``worker`` (the one thread that does async code's database work)."""
