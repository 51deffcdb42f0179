"""Indexes kept in step with watch events, and the bounded memo every cache is built on (memo.py)."""
