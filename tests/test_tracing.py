"""Step traces through verl's real timer and Tracking.log: the trace tree, the embedded file's
OTLP/JSON shape, errors inside a phase, and the OTLP push path (gRPC and HTTP) into a
protocol-level receiver."""

import json

import pytest

from helpers.otlp_receiver import OtlpReceiver
from helpers.traces import event_names, load_spans, steps

from verl_otel import semconv as sc


def test_file_trace_tree_and_format(drive, tmp_path):
    proc = drive(steps=2, VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = tmp_path / "data" / "traces.jsonl"
    # the file's own encoding, which the span reader normalizes: so the first line as written
    first = json.loads(path.read_text().splitlines()[0])
    span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)  # hex, not base64
    assert isinstance(span["kind"], int)
    by_step = steps(load_spans(path))
    assert sorted(by_step) == [1, 2]
    for number, tree in by_step.items():
        root = tree.root
        names = sorted(s.name for s in tree.spans if s is not root)
        assert names == ["adv", "old_log_prob", "rollout", "update_actor", "validate"]
        assert all(s.parent_id == root.span_id for s in tree.spans if s is not root)
        attrs = root.attributes
        assert attrs["verl.project"] == "proj" and attrs["verl.trainer"] == "legacy"
        assert attrs["verl.score_mean"] == pytest.approx(0.25 * number)
        assert attrs["verl.rollout_n"] == 2 and attrs["verl.batch_size"] == 4
        assert root.resource["verl.process.role"] == "trainer"
        # goodput: no trainer.nnodes/n_gpus_per_node in this config, so one GPU; each phase in its bucket, the
        # validation too, adv between phases idle; no agent-loop workers asked, so the rollout all generating
        buckets = {b: attrs[sc.bucket_attr(b)] for b in sc.BUCKETS}
        assert attrs[sc.ATTR_GOODPUT_GPUS] == 1 and not attrs[sc.ATTR_GOODPUT_TAIL_MEASURED]
        assert sum(buckets.values()) == pytest.approx(attrs[sc.ATTR_STEP_GPU_SECONDS], abs=1e-5)  # each rounded to 1e-6
        assert attrs[sc.ATTR_STEP_GPU_SECONDS] == pytest.approx(root.seconds, rel=0.05, abs=0.02)
        for phase, bucket in (("rollout", "generating"), ("old_log_prob", "old_log_prob"), ("validate", "validation")):
            span = next(s for s in tree.spans if s.name == phase)
            # the tracer's clock against the span's stamps: apart by what ran between them (a loaded machine: ms)
            assert buckets[bucket] == pytest.approx(span.seconds, rel=0.1, abs=0.02), (phase, buckets)
        assert buckets["long_tail"] == 0.0 and buckets["idle"] > 0
    assert "[verl-otel] step 2/2 took" in proc.stdout


def test_the_weight_sync_phase_gets_the_span_id_its_workers_derive(drive, tmp_path):
    """verl's worker-side update_weights carries no context: the workers parent their weights.sync under the id
    the trainer gives its update_weights span, derived from the step's trace id (telemetry/propagation.py)."""
    from verl_otel.telemetry.propagation import phase_span_id

    proc = drive(steps=2, VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path), DRIVE_WEIGHT_SYNC="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for tree in steps(load_spans(tmp_path / "traces.jsonl")).values():
        (sync,) = [s for s in tree.spans if s.name == sc.PHASE_UPDATE_WEIGHTS]
        (actor,) = [s for s in tree.spans if s.name == sc.PHASE_UPDATE_ACTOR]
        trace_id = int(sync.trace_id, 16)
        assert int(sync.span_id, 16) == phase_span_id(trace_id, sc.PHASE_UPDATE_WEIGHTS)
        assert int(actor.span_id, 16) != phase_span_id(trace_id, sc.PHASE_UPDATE_ACTOR)  # only that phase


def test_exception_in_phase_marks_span_and_step_error(drive, tmp_path):
    proc = drive(steps=2, fail_phase="update_actor", VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_step = steps(load_spans(tmp_path / "traces.jsonl"))
    assert not by_step[1].root.status_error
    failed = by_step[2]
    assert failed.root.status_error, "the step of the failing phase ends, marked ERROR"
    actor = next(s for s in failed.spans if s.name == "update_actor")
    assert actor.status_error and "exception" in event_names(actor)


@pytest.mark.parametrize("protocol,endpoint_attr", [("grpc", "grpc_endpoint"), ("http/protobuf", "http_endpoint")])
def test_otlp_push(drive, tmp_path, protocol, endpoint_attr):
    with OtlpReceiver() as rx:
        proc = drive(
            steps=2,
            OTEL_EXPORTER_OTLP_ENDPOINT=getattr(rx, endpoint_attr),
            OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
            OTEL_SERVICE_NAME="my-run",
            OTEL_METRIC_EXPORT_INTERVAL="500",
            VERL_OTEL_DIR=str(tmp_path),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert rx.wait_for(lambda r: sum(1 for s in r.spans if s.name == "step") >= 2)
        assert rx.wait_for(lambda r: "verl_training_metric" in r.metric_names, timeout=10)
    roots = [s for s in rx.received.spans if s.name == "step"]
    assert {s.attributes["verl.global_step"] for s in roots} == {1, 2}
    assert all(s.resource["service.name"] == "my-run" for s in roots)
    res = roots[0].resource  # one instance per process (the Collector's `instance` label): host/process role/pid
    assert res["service.instance.id"] == f"{res['host.name']}/{res['verl.process.role']}/{res['process.pid']}", res
    phases = [s for s in rx.received.spans if s.parent_id and s.trace_id == roots[0].trace_id]
    assert {s.name for s in phases} == {"rollout", "old_log_prob", "adv", "update_actor", "validate"}
    assert not (tmp_path / "traces.jsonl").exists(), "with an endpoint, spans are pushed, not written locally"
    keys = {labels.get("key") for name, labels, _ in rx.received.metric_points if name == "verl_training_metric"}
    assert "critic/score/mean" in keys
    # the step and phase histograms arrive with the step's trace id as exemplar (VerlStepStalled and the
    # panels' trace links need them; an SDK without exemplar support dropped the whole histogram)
    step_traces = {s.trace_id for s in roots}
    for metric in (sc.STEP_DURATION.otel_name, sc.PHASE_DURATION.otel_name):
        assert metric in rx.received.metric_names, (metric, sorted(rx.received.metric_names))
        assert {t for m, t in rx.received.exemplars if m == metric} & step_traces, metric
