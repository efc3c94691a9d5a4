"""The ``fake`` boot interface: for tests and demos, touches no real machine."""
