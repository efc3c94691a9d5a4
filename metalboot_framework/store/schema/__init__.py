"""Alembic environment and revisions of the metalboot schema."""
