"""Stall detection (docs/guides/hangs.md): the ``stall`` span, its attributes and classifications, and
the evidence files' names."""

from __future__ import annotations

from typing import Final

#: One span per stall a process detects, child of the stalled phase span (trainer) or call span (worker),
#: ended at once so the trace shows it while the step is still open.
SPAN_STALL: Final = "stall"
ATTR_STALL_CALL: Final = "verl.stall.call"  # the call in flight: phase, worker method or hooked call
ATTR_STALL_ELAPSED: Final = "verl.stall.elapsed_s"
ATTR_STALL_THRESHOLD: Final = "verl.stall.threshold_s"
ATTR_STALL_FRAME: Final = "verl.stall.frame"  # innermost frame in verl's or the user's code
ATTR_STALL_STACK: Final = "verl.stall.stack"  # verl's and the user's frames of that thread, innermost first
ATTR_STALL_KIND: Final = "verl.stall.kind"  # one of STALL_KINDS
ATTR_STALL_EVIDENCE: Final = "verl.stall.evidence"  # the stack file's path
ATTR_STALL_PROCESS_ROLE: Final = "verl.stall.process_role"
ATTR_STALL_PID: Final = "verl.stall.pid"
ATTR_STALL_HOST: Final = "verl.stall.host"
#: what the stuck frame waits on (one of STALL_WAITS; "" when the process does the work itself): the
#: incident's waiters (``verl-otel doctor``), not its root
ATTR_STALL_WAITING_ON: Final = "verl.stall.waiting_on"
#: whom it waits on, in words: the calls it sent to other processes in the meantime ("1 train_worker call
#: compute_log_prob, rank 0"; "; "-joined; "" when it sent none)
ATTR_STALL_WAITS_FOR: Final = "verl.stall.waits_for"
ATTR_STALL_CALLS: Final = "verl.stall.calls"  # calls of this phase stalled in this process when detected
#: the sampling profile recorded while it was stuck (speedscope JSON; its summary beside it, ``.txt``)
ATTR_STALL_CAPTURE: Final = "verl.stall.capture"
#: On the stalled call's span: a capture was started (its file, process, host and tool)
EVENT_CAPTURE: Final = "verl.capture"
ATTR_CAPTURE_FILE: Final = "verl.capture.file"
ATTR_CAPTURE_TOOL: Final = "verl.capture.tool"  # py-spy, or in-process (its own stack sampling)
#: VERL_OTEL_CAPTURE_NEXT=1: where verl's own profiler writes the next step's profile (its save_path and a glob of
#: the files, e.g. ``/data/profile/*_step5_*``), on the stall span that armed it and on the event of that step's
#: phase span (tool: verl-profiler), with the step whose stall armed it
ATTR_STALL_NEXT_PROFILE: Final = "verl.stall.next_profile"
ATTR_CAPTURE_ARMED_BY: Final = "verl.capture.armed_by_step"
#: On the step span: stalls detected in the trainer process during the step.
ATTR_STEP_STALLS: Final = "verl.stalls"

STALL_REWARD: Final = "reward_function"
STALL_COLLECTIVE: Final = "collective"
STALL_ROLLOUT: Final = "rollout_engine"
STALL_DATA: Final = "data_loading"
STALL_CHECKPOINT: Final = "checkpoint_io"
STALL_TOOL: Final = "tool_call"
STALL_UNKNOWN: Final = "unknown"
STALL_KINDS: Final[tuple[str, ...]] = (
    STALL_REWARD,
    STALL_COLLECTIVE,
    STALL_ROLLOUT,
    STALL_DATA,
    STALL_CHECKPOINT,
    STALL_TOOL,
    STALL_UNKNOWN,
)

STALL_WAIT_RAY: Final = "ray_call"  # ray.get / ray.wait on another actor's call
STALL_WAIT_HTTP: Final = "http_request"  # an HTTP request (to the LLM server, ...)
STALL_WAIT_AWAIT: Final = "awaited_call"  # an asyncio task suspended in await (a Ray actor call, a request)
STALL_WAIT_POLL: Final = "poll"  # a loop polling for another process' results (verl v1's replay buffer)
STALL_WAITS: Final[tuple[str, ...]] = (STALL_WAIT_RAY, STALL_WAIT_HTTP, STALL_WAIT_AWAIT, STALL_WAIT_POLL)
#: each in words (the console's stall line, doctor)
STALL_WAIT_TEXT: Final[dict[str, str]] = {
    STALL_WAIT_RAY: "a Ray call",
    STALL_WAIT_HTTP: "an HTTP request",
    STALL_WAIT_AWAIT: "an awaited call",
    STALL_WAIT_POLL: "a poll for results",
}

#: Hooked calls outside the trainer's phases (their ``phase`` label and call name)
CALL_REWARD: Final = "reward.compute_score"
CALL_AGENT_SAMPLE: Final = "rollout.sample"
CALL_SERVER_REQUEST: Final = "rollout.request"
CALL_WEIGHT_SEND: Final = "weights.send"  # a training worker sending the weights to the rollout (a sync)
CALL_WEIGHT_RECEIVE: Final = "weights.receive"  # a rollout replica receiving and loading them

#: A training worker's traced method -> the trainer phase it runs in (its stalls' ``phase``)
WORKER_METHOD_PHASES: Final[dict[str, str]] = {
    "update_actor": "update_actor",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref",
    "train_mini_batch": "update_critic",
    "infer_batch": "values",
}

#: Evidence files: $VERL_OTEL_DIR/stalls/step<N>-<phase>-<process role>-<host>-<pid>.txt
STALLS_DIR: Final = "stalls"
STALL_FILE_SUFFIX: Final = ".txt"
#: The first line of an evidence file, then ``key: value`` header lines, a blank line and the stacks
STALL_FILE_MAGIC: Final = "# verl-otel stall evidence"
STALL_REPEAT_MARK: Final = "# stacks again"
#: Captures: $VERL_OTEL_DIR/captures/<the evidence file's name>.speedscope.json and its .txt summary
CAPTURES_DIR: Final = "captures"
CAPTURE_SUFFIX: Final = ".speedscope.json"
CAPTURE_TOOL_PY_SPY: Final = "py-spy"
CAPTURE_TOOL_IN_PROCESS: Final = "in-process"
CAPTURE_TOOL_VERL_PROFILER: Final = "verl-profiler"  # verl's own profiler (global_profiler.tool), armed for a step
#: set (true) in a capture whose speedscope ``activeProfileIndex`` is the stalled thread's profile
CAPTURE_FOCUS_KEY: Final = "verl_otel_focus"
