"""Tools for testing metalboot and its plugins: simulated machines, conformance kit."""
