"""Validation generations become events on the validate span; text only with
VERL_OTEL_CAPTURE_TEXT=1, truncated to VERL_OTEL_MAX_TEXT; the count is always recorded."""

from helpers.traces import load_spans

from verl_otel.telemetry.val_generation_events import data_sources, event_attributes


def _validate_spans(path):
    return [s for s in load_spans(path) if s.name == "validate"]


def test_events_without_text_by_default(drive, tmp_path):
    proc = drive(steps=1, VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (span,) = _validate_spans(tmp_path / "traces.jsonl")
    assert span.attributes["verl.val_generations.count"] == 2
    # the data sources named by the validation's metric keys (verl's samples do not carry theirs)
    assert span.attributes["verl.val_generation.data_sources"] == ["math", "openai/gsm8k"]
    events = [e for e in span.events if e.name == "verl.val_generation"]
    assert len(events) == 2
    for e in events:
        keys = set(e.attributes)
        assert keys == {"verl.val_generation.score"}, keys


def test_events_with_text_truncated(drive, tmp_path):
    proc = drive(
        steps=1, VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path), VERL_OTEL_CAPTURE_TEXT="1", VERL_OTEL_MAX_TEXT="50"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (span,) = _validate_spans(tmp_path / "traces.jsonl")
    events = [e.attributes for e in span.events if e.name == "verl.val_generation"]
    long, short = events
    assert len(long["verl.val_generation.input"]) == 50 and long["verl.val_generation.truncated"] is True
    assert long["verl.val_generation.output"] == "3 #### 3"
    assert short["verl.val_generation.input"] == "q2" and short["verl.val_generation.truncated"] is False
    assert span.parent_id  # inside the step trace


def test_data_sources_from_verl_metric_keys():
    keys = {
        "val-core/openai/gsm8k/reward/mean@4": 1,
        "val-aux/openai/gsm8k/reward/best@4/std": 1,
        "val-aux/my/nested/src/acc/maj@2/mean": 1,
        "val-core/x/reward/mean": 1,
        "critic/score/mean": 1,
    }
    assert data_sources(keys) == ["my/nested/src", "openai/gsm8k"]
    assert data_sources({}) == []


def test_event_attributes_odd_samples():
    assert event_attributes(("a", "b", float("nan")), True, 10) == {
        "verl.val_generation.input": "a",
        "verl.val_generation.output": "b",
        "verl.val_generation.truncated": False,
    }
    assert event_attributes((None,), False, 10) == {}
