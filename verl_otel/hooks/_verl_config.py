"""Reading verl's config off one of its objects (a worker, the rollouter): verl's names live in hooks/."""

from __future__ import annotations

from typing import Any


def run_names(obj: Any) -> dict[str, Any]:
    """``project``/``experiment`` of the run ``obj`` belongs to (``obj.config.trainer``), as
    :meth:`verl_otel.runtime.Runtime.wire` takes them; None where verl's config does not say."""
    trainer_cfg = getattr(getattr(obj, "config", None), "trainer", None)
    get = getattr(trainer_cfg, "get", None)
    if get is None:
        return {"project": None, "experiment": None}
    return {"project": get("project_name"), "experiment": get("experiment_name")}
