"""What one process holds below its runtime and exporters: the metric store every exporter reads
(:mod:`.metrics`), the stall watch and its frame reading (:mod:`.stalls`, :mod:`.stall_frames`), and bounded
text (:mod:`.text`). Each takes what it needs through its constructor; nothing here imports the trackers above."""
