"""SDK setup and exporters: where the trackers' spans and metrics leave the process."""
