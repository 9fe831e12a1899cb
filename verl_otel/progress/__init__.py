"""The console lines: [VERL_PROGRESS] (VERL_PROGRESS_LOG) and the ``[verl-otel] step`` line, as observers of the
process' trackers. Only this package prints them; the hooks hand it plain values (verl_otel/trackers.py)."""
