"""Persistent state: SQLAlchemy models, sessions, and alembic migrations."""
