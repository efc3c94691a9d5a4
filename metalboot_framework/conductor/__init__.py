"""The conductor: runs migrations machine by machine and keeps the fleet in check."""
