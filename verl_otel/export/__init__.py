"""SDK setup and exporters: where the telemetry model's spans and metrics leave the process."""
