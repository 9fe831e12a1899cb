"""The ``verl-otel`` command line."""
