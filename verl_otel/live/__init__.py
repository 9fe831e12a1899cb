"""Reading a running job's live state for ``verl-otel top``: its /metrics pages (listed in the run's
file_sd file) or a Prometheus server, into one :class:`~verl_otel.live.run_view.RunView` per refresh."""
