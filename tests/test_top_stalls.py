"""``verl-otel top`` shows a stall: the process role and phase from ``verl_stall_active``, where it is stuck from the
newest evidence file beside the targets file."""

from __future__ import annotations

import json

from verl_otel import semconv as sc
from verl_otel.cli.main import main
from verl_otel.export.prometheus import serve
from verl_otel.process.metrics import MetricStore


def test_top_shows_the_stall_and_its_frame(tmp_path, capsys):
    store = MetricStore()
    store.set(sc.TRAINING_STEP, (), 2)
    store.set(sc.STALL_ACTIVE, (sc.PHASE_UPDATE_ACTOR,), 1.0)
    store.set(sc.STALL_ACTIVE, (sc.PHASE_REF,), 0.0)  # stalled before, not now
    port = serve(store, "127.0.0.1", 0)
    labels = {sc.LABEL_PROCESS_ROLE: sc.PROCESS_ROLE_WORKER}
    (tmp_path / sc.PROM_TARGETS_FILE).write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": labels}]))
    (tmp_path / sc.STALLS_DIR).mkdir()
    head = f"{sc.STALL_FILE_MAGIC}\nphase: update_actor\nstep: 2\nframe: all_reduce (comm.py:7)\nrole: train_worker\n"
    (tmp_path / sc.STALLS_DIR / "step2-update_actor-train_worker-1.txt").write_text(head + "\n")
    assert main(["top", "--once", "--targets", str(tmp_path), "--width", "200"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "STALLED: train_worker in update_actor at all_reduce (comm.py:7)" in out and "verl-otel doctor" in out
    assert "in ref" not in out
