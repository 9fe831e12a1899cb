"""What ended a run, from what the trainer saw (an exception raised through fit(), a phase's error): the reason
(semconv RUN_END_REASONS), a short detail and, for a lost worker, which process it was (Ray's error text names
its class, pid and address). Plain values only: the exception is read by its type's name and its text."""

from __future__ import annotations

import re
from typing import Any

from verl_otel import semconv as sc
from verl_otel.process.text import as_text, cut

_FIELD = re.compile(r"^\s*(class_name|pid|ip|actor_id|name):\s*(\S+)\s*$", re.MULTILINE)
_EXIT = re.compile(r"Worker exit type: (\S+)")


def reason_of(exc: BaseException) -> str:
    names = {t.__name__ for t in type(exc).__mro__}
    text = as_text(exc, 4000) or ""
    if names & sc.RAY_OOM_ERRORS or any(marker in text for marker in sc.OOM_MARKERS):
        return sc.END_OOM
    if names & sc.RAY_WORKER_LOST_ERRORS or any(marker in text for marker in sc.WORKER_LOST_MARKERS):
        return sc.END_WORKER_LOST
    if isinstance(exc, KeyboardInterrupt):
        return sc.END_INTERRUPTED
    if isinstance(exc, SystemExit):  # Ray's SIGTERM handler raises it in the worker's main thread
        return sc.END_TERMINATED
    return sc.END_EXCEPTION


def attributes_of(exc: BaseException, limit: int = 512, deprecated_names: bool = True) -> dict[str, Any]:
    """The run_end attributes for an exception that ended fit(): reason, detail and, for a lost worker, the
    process Ray names (its actor class in place of a process role, which Ray does not know; pid, address)."""
    reason = reason_of(exc)
    text = as_text(exc, 4000) or ""
    detail = type(exc).__qualname__
    attrs: dict[str, Any] = {sc.ATTR_RUN_END_REASON: reason}
    if reason in (sc.END_WORKER_LOST, sc.END_OOM):
        fields = dict(_FIELD.findall(text))
        if fields.get("class_name"):  # verl's colocated class is create_colocated_worker_cls.<locals>.WorkerDict
            attrs[sc.ATTR_RUN_END_PROCESS_ROLE] = fields["class_name"].rsplit(".", 1)[-1]
            if deprecated_names:  # the key's old name too, for a release (CHANGELOG.md)
                attrs[sc.ATTR_DEPRECATED_RUN_END_ROLE] = attrs[sc.ATTR_RUN_END_PROCESS_ROLE]
        if fields.get("pid", "").isdigit():
            attrs[sc.ATTR_RUN_END_PID] = int(fields["pid"])
        if fields.get("ip"):
            attrs[sc.ATTR_RUN_END_HOST] = fields["ip"]
        exit_type = _EXIT.search(text)
        if exit_type:
            detail += f" (worker exit: {exit_type.group(1)})"
    elif text.strip():
        detail += ": " + text.strip().splitlines()[0]
    attrs[sc.ATTR_RUN_END_DETAIL] = cut(detail, limit)
    return attrs
