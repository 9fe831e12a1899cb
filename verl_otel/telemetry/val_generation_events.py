"""Validation generations as span events: the (input, output, score) samples verl picks for
``trainer.log_val_generations`` go onto the open ``validate`` span (in fully_async's rollouter, the
open ``rollouter.validate`` span; elsewhere without either, a ``validate`` span of their own).

Prompts can be private: text is captured only with VERL_OTEL_CAPTURE_TEXT=1, truncated to
VERL_OTEL_MAX_TEXT characters; the count of samples is always recorded."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span

from verl_otel import semconv as sc
from verl_otel.telemetry.services import Services
from verl_otel.telemetry.values import to_scalar

#: verl's validation metric keys: ``val-core/<data source>/<variable>/<metric>`` with metrics such as
#: ``mean@4`` or ``best@4/std`` (process_validation_metrics); a data source may itself hold slashes
_VAL_KEY = re.compile(
    rf"^{sc.VERL_VAL_METRIC_PREFIX}[a-z]+/(?P<source>.+)/[^/]+/"
    r"(?:(?:mean|std)@\d+|(?:best|worst|maj)@\d+/(?:mean|std))$"
)


def data_sources(metrics: Mapping[str, Any]) -> list[str]:
    """The data sources named by a validation's metric keys, sorted."""
    return sorted({m["source"] for k in metrics if isinstance(k, str) and (m := _VAL_KEY.match(k))})


def _text(value: Any, limit: int) -> tuple[str, bool]:
    text = value if isinstance(value, str) else repr(value)
    return (text[:limit], True) if len(text) > limit else (text, False)


def event_attributes(sample: Sequence[Any], capture_text: bool, max_text: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    score, _ = to_scalar(sample[2] if len(sample) > 2 else None)
    if score is not None:
        attrs[sc.ATTR_VAL_SCORE] = score
    if capture_text:
        truncated = False
        for idx, key in ((0, sc.ATTR_VAL_INPUT), (1, sc.ATTR_VAL_OUTPUT)):
            if len(sample) > idx:
                attrs[key], cut = _text(sample[idx], max_text)
                truncated = truncated or cut
        attrs[sc.ATTR_VAL_TRUNCATED] = truncated
    return attrs


def record_data_sources(span: Span | None, metrics: Any) -> None:
    """Note the data sources a validation scored on its open validate span ``span`` (``_validate``'s result)."""
    sources = data_sources(metrics) if isinstance(metrics, Mapping) else []
    if span is not None and sources:
        span.set_attribute(sc.ATTR_VAL_DATA_SOURCES, sources)


def record(services: Services, found: Span | None, samples: Sequence[Sequence[Any]], step: Any) -> None:
    """The samples go onto ``found`` (the open validate span), else onto a ``validate`` span of their own."""
    settings = services.settings
    own = found is None
    if found is not None:
        span = found
    else:
        try:
            number = int(step)
        except (TypeError, ValueError):
            number = -1
        span = services.tracer().start_span(
            sc.PHASE_VALIDATE,
            context=otel_context.Context(),
            attributes={sc.ATTR_PHASE: sc.PHASE_VALIDATE, sc.ATTR_GLOBAL_STEP: number},
        )
    span.set_attribute(sc.ATTR_VAL_GENERATIONS, len(samples))
    for sample in samples:
        if isinstance(sample, (list, tuple)):
            span.add_event(sc.EVENT_VAL_GENERATION, event_attributes(sample, settings.capture_text, settings.max_text))
    if own:
        span.end()
        services.flush_soon()
