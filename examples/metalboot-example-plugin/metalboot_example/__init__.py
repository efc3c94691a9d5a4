"""An example third-party metalboot plugin: a boot interface and a hook."""
