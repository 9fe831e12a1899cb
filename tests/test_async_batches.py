"""fully_async's batches and actor classes, without the drive's run: the trace tag rides on verl's
RolloutSample and leaves verl's assembled batch unchanged, the hooked actor classes still pickle by value,
staleness and one link per window over a batch of mixed versions, a resumed rollouter's versions, and the real
v1 colocate_async demo's step link to the step that submitted its prompts."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import torch

from helpers.procs import clean_env, run_py
from helpers.traces import load_spans

from verl_otel import semconv as sc


def _rollout_samples(tagged: bool):
    from verl import DataProto
    from verl.experimental.fully_async_policy.detach_utils import RolloutSample

    out = []
    for i in range(2):
        batch = DataProto.from_dict(
            tensors={
                "responses": torch.ones(2, 3, dtype=torch.long),
                "attention_mask": torch.ones(2, 7, dtype=torch.long),
            },
            non_tensors={
                "min_global_steps": np.array([i, i], dtype=object),
                "max_global_steps": np.array([i, i], dtype=object),
            },
            meta_info={"metrics": [{"generate_sequences": 0.1, "tool_calls": 0.0}] * 2},
        )
        rs = RolloutSample(full_batch=batch, sample_id=f"s{i}", epoch=0, rollout_status={"x": 1})
        if tagged:
            setattr(rs, sc.ROLLOUT_SAMPLE_TRACE_ATTR, (f"00-{'1' * 32}-{'2' * 16}-01", i))
        out.append(rs)
    return out


def test_verl_sees_the_same_batch():
    """The tag rides on the RolloutSample object only: verl's assembled batch is the same with and without it,
    and our stand-in for verl's assemble function returns exactly what verl's returns."""
    import ray
    from verl.experimental.fully_async_policy import detach_utils

    from verl_otel.hooks.async_rollout import assemble_batch_from_rollout_samples as ours

    tagged = [ray.cloudpickle.loads(ray.cloudpickle.dumps(rs)) for rs in _rollout_samples(True)]
    assert all(getattr(rs, sc.ROLLOUT_SAMPLE_TRACE_ATTR)[1] == i for i, rs in enumerate(tagged))  # survives pickling
    plain = detach_utils.assemble_batch_from_rollout_samples(_rollout_samples(False), None, None, None)
    hooked = ours(copy.deepcopy(tagged), None, None, None)
    assert set(hooked.meta_info) == set(plain.meta_info) and set(hooked.non_tensor_batch) == set(plain.non_tensor_batch)
    assert all(torch.equal(hooked.batch[k], plain.batch[k]) for k in plain.batch.keys())
    assert not any(sc.ROLLOUT_SAMPLE_TRACE_ATTR in str(k) for k in (*hooked.meta_info, *hooked.non_tensor_batch))


def test_hooked_actor_classes_still_pickle_by_value():
    """Ray ships FullyAsyncTrainer/Rollouter by value: with our methods in place they must still pickle, and
    the pickled trainer must call our assemble stand-in by reference (it is importable)."""
    import ray
    from verl.experimental.fully_async_policy import fully_async_rollouter, fully_async_trainer

    import verl_otel
    from verl_otel.hooks.async_rollout import assemble_batch_from_rollout_samples as ours

    verl_otel.instrument()
    try:
        for cls in (fully_async_trainer.FullyAsyncTrainer, fully_async_rollouter.FullyAsyncRollouter):
            modified = cls.__ray_metadata__.modified_class
            blob = ray.cloudpickle.dumps(modified)
            assert ray.cloudpickle.loads(blob).__name__ == modified.__name__
        shipped = ray.cloudpickle.loads(
            ray.cloudpickle.dumps(fully_async_trainer.FullyAsyncTrainer.__ray_metadata__.modified_class)
        )
        verl_method = inspect.unwrap(shipped.__dict__["_get_samples_from_queue"])  # under our (and Ray's) wrappers
        assert verl_method.__globals__["assemble_batch_from_rollout_samples"] is ours
    finally:
        verl_otel.uninstrument()
    assert fully_async_trainer.assemble_batch_from_rollout_samples.__module__.startswith("verl.")


def test_v1_colocate_async_step_links_to_the_step_that_submitted_its_prompts(colocate_async_run):
    """The real v1 colocate_async demo: step 2 trains on prompts submitted at step 1 (verl's warmup and step 1
    both tag theirs with global step 1), so its step span links to step 1's span."""
    run = colocate_async_run
    assert run.rc == 0, run.log_tail()
    spans = load_spans(run.out / "traces.jsonl")
    steps = {s.attributes[sc.ATTR_GLOBAL_STEP]: s for s in spans if s.name == sc.SPAN_STEP and not s.parent_id}
    (link,) = steps[2].links
    assert (link.trace_id, link.span_id) == (steps[1].trace_id, steps[1].span_id)
    assert link.attributes[sc.ATTR_GLOBAL_STEP] == 1 and link.attributes[sc.ATTR_ASYNC_SAMPLES] > 0
    assert link.attributes[sc.ATTR_STALENESS] == 1 - link.attributes[sc.ATTR_PARAM_VERSION]
    assert not steps[1].links  # step 1's prompts were its own (no earlier step to link to)
    # each sample says the weights versions that began and finished it (verl's min/max_global_steps: a request a
    # weight sync aborted is resumed on the next weights), none newer than the step that submitted it
    samples = [s for s in spans if s.name == sc.SPAN_ROLLOUT_SAMPLE]
    versions = [(s.attributes[sc.ATTR_PARAM_VERSION], s.attributes[sc.ATTR_PARAM_VERSION_END]) for s in samples]
    assert samples and all(
        a <= b <= a + 1 and b <= s.attributes[sc.ATTR_GLOBAL_STEP] for s, (a, b) in zip(samples, versions, strict=True)
    ), versions
    # the link's version is the oldest that finished one of the linked step's samples
    ends = [b for s, (_, b) in zip(samples, versions, strict=True) if s.trace_id == steps[1].trace_id]
    assert ends and min(ends) <= link.attributes[sc.ATTR_PARAM_VERSION] <= max(ends), (ends, link.attributes)


def test_batch_of_mixed_versions():
    """Staleness over a batch whose samples come from several windows (numpy and python ints, as verl's object
    arrays hold them), and one link per window with its sample count."""
    from types import SimpleNamespace

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from verl_otel.hooks import verl_async_objects as verl
    from verl_otel.telemetry.async_trainer import TrainerSide
    from verl_otel.telemetry.propagation import inject

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    windows = {v: tracer.start_span(f"w{v}") for v in (3, 4)}
    tags = {v: (inject(trace.set_span_in_context(s)), v) for v, s in windows.items()}
    samples = [SimpleNamespace(**{sc.ROLLOUT_SAMPLE_TRACE_ATTR: tags[v]}) for v in (3, 4, 4)] + [SimpleNamespace()]
    side = TrainerSide()
    side.samples_assembled([t for t in map(verl.window_tag, samples) if t])  # as the hook reads verl's samples
    step = tracer.start_span("step")
    batch = SimpleNamespace(meta_info={"trajectory_param_versions": [3, np.int64(4), 4, 5]})
    side.batch_taken(5.0, verl.batch_versions(batch), step)
    step.end()
    assert (side.staleness_max, side.staleness_mean) == (2, (2 + 1 + 1 + 0) / 4)
    links = {ln.attributes[sc.ATTR_PARAM_VERSION]: ln for ln in exporter.get_finished_spans()[0].links}
    assert {v: ln.attributes[sc.ATTR_ASYNC_SAMPLES] for v, ln in links.items()} == {3: 1, 4: 2}
    assert {v: ln.attributes[sc.ATTR_STALENESS] for v, ln in links.items()} == {3: 2, 4: 1}
    assert links[3].context.span_id == windows[3].get_span_context().span_id


def test_resumed_rollouter_counts_versions_from_the_checkpoint(tmp_path):
    """verl's real load_checkpoint on a resumed run (checkpoint of parameter version 7): the rollouter's windows
    continue from version 7, not 0."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_7").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("7")
    code = f"""
from omegaconf import OmegaConf
from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
from verl_otel import trackers
r = object.__new__(FullyAsyncRollouter.__ray_metadata__.modified_class)
r.config = OmegaConf.create({{"trainer": {{"resume_mode": "auto", "default_hdfs_dir": None,
                             "default_local_dir": "{ckpt}", "project_name": "p", "experiment_name": "e"}},
                             "async_training": {{"trigger_parameter_sync_step": 2}}}})
r.required_samples, r.global_steps = 4, 1
r.load_checkpoint()
print("RESUMED", r.global_steps, trackers.current().windows.version)
"""
    proc = run_py(["-c", code], clean_env(VERL_OTEL_ENABLED="1", VERL_OTEL_DIR=str(tmp_path)), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESUMED 57 7" in proc.stdout, proc.stdout[-2000:]  # verl: 7 x 4 samples x 2 steps + 1
