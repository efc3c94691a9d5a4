"""Persistent state: SQLAlchemy models, sessions, and the alembic schema revisions."""
