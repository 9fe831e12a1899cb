"""The reference pages generated from the vocabulary (``verl_otel/semconv/``) and the settings: every metric, every
span name, attribute and event, every environment variable. Comments in semconv's source are the descriptions
(``#:`` lines before a name, a comment at the end of its line, a ``# ...`` heading over a group), read with the
tokenizer, so what the page says is what the code says."""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from verl_otel import otel_env
from verl_otel import semconv as sc
from verl_otel.semconv import env_doc

SEMCONV = Path(sc.__file__).parent
#: semconv modules whose span, attribute and event names the spans page lists, in its order
SPAN_MODULES = ("spans", "stall", "why", "engine", "goodput")
_PREFIXES = {"SPAN_": "span", "ATTR_": "attribute", "EVENT_": "event", "ENGINE_ATTR_": "attribute (vLLM's)"}


@dataclass(frozen=True)
class Name:
    constant: str
    value: str
    kind: str
    doc: str  # the ``#:`` lines above it and its line's own comment
    group: str  # the ``# ...`` heading of its group, up to a blank line


def _comments(source: str) -> dict[int, str]:
    return {
        tok.start[0]: tok.string.lstrip("#").lstrip(":").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }


def _decorative(line: str) -> bool:
    return line.startswith("#") and set(line) <= {"#", "-", " "}


def names(module: str) -> list[Name]:
    """The span, attribute and event names a semconv module defines, with what its comments say of each."""
    source = (SEMCONV / f"{module}.py").read_text()
    lines = [ln.strip() for ln in source.splitlines()]
    comments = _comments(source)
    constants = {
        node.lineno: node
        for node in ast.parse(source).body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    out: list[Name] = []
    heading, pending = "", list[str]()
    for number, line in enumerate(lines, 1):
        if not line:
            heading, pending = "", []
        elif line.startswith("#:"):
            pending.append(comments.get(number, ""))
        elif line.startswith("#"):
            following = lines[number] if number < len(lines) else ""
            if not _decorative(line) and not _decorative(following):  # a section title between rules: no doc
                heading, pending = comments.get(number, ""), []
        elif number in constants:
            node = constants[number]
            const = node.target.id  # type: ignore[union-attr]
            prefix = max((p for p in _PREFIXES if const.startswith(p)), key=len, default="")
            own = " ".join([*pending, comments.get(number, "")]).strip() if node.end_lineno == number else ""
            if prefix:
                value = str(node.value.value)  # type: ignore[union-attr]
                out.append(Name(const, value, _PREFIXES[prefix], own, heading))
            pending = []
        else:
            pending = []
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def spans_markdown() -> str:
    out = [
        "# Spans and attributes",
        "",
        "Generated from `verl_otel/semconv/` by `make docs`: do not edit. The trace's shape is described in "
        "[Step traces and slow steps](../guides/step-traces.md).",
        "",
    ]
    for module in SPAN_MODULES:
        rows = names(module)
        if not rows:
            continue
        doc = (ast.get_docstring(ast.parse((SEMCONV / f"{module}.py").read_text())) or "").split("\n\n")[0]
        out += [f"## `semconv/{module}.py`", "", _cell(doc), "", "| name | kind | what | group |", "|---|---|---|---|"]
        out += [f"| `{n.value}` | {n.kind} | {_cell(n.doc)} | {_cell(n.group)} |" for n in rows]
        out.append("")
    out += [
        "## Goodput buckets",
        "",
        f"Each a float attribute `{sc.ATTR_GOODPUT_PREFIX}<bucket>` of the step span (GPU-seconds) "
        f"and a `{sc.LABEL_BUCKET}` value of `{sc.GPU_SECONDS.name}`; they add up to `{sc.ATTR_STEP_GPU_SECONDS}`. "
        "Where the GPUs were read (NVML), a bucket marked *busy share* also has "
        f"`{sc.ATTR_GOODPUT_BUSY_PREFIX}<bucket>` (0-1, the measured utilization of the GPUs that did it; absent "
        "where not measured).",
        "",
    ]
    out += ["| bucket | what | goodput | busy share |", "|---|---|---|---|"]
    out += [
        f"| `{b}` | {_cell(what)} | {'yes' if b in sc.GOOD_BUCKETS else ''} | {'yes' if b in sc.BUSY_BUCKETS else ''} |"
        for b, what in sc.BUCKETS.items()
    ]
    out.append("")
    out += ["## Training-worker spans", "", "| verl's worker-group method | span |", "|---|---|"]
    out += [f"| `{method}` | `{span}` |" for method, span in sc.WORKER_SPAN_NAMES.items()]
    return "\n".join(out).rstrip() + "\n"


def _labels(metric: sc.MetricDef) -> str:
    own = ", ".join(f"`{label}`" for label in metric.labels)
    if metric.renamed:
        old = ", ".join(f"`{old}` (deprecated name of `{new}`)" for old, new in metric.renamed)
        own = f"{own}; also {old}"
    return own


def metrics_markdown() -> str:
    out = [
        "# Metrics",
        "",
        "Generated from `verl_otel/semconv/` (`METRICS`) by `make docs`: do not edit. Names are what Prometheus "
        "shows, through `/metrics` or the OTel Collector's prometheus exporter alike. No label carries a step, "
        "sample, uid or trace id: the series count does not grow with the run. Each process also carries "
        f"`{sc.LABEL_PROJECT}`, `{sc.LABEL_EXPERIMENT}` and `{sc.LABEL_PROCESS_ROLE}` (target labels or resource "
        "attributes).",
        "",
        "| metric | type | labels | unit | what |",
        "|---|---|---|---|---|",
    ]
    for m in sc.METRICS:
        out.append(f"| `{m.name}` | {m.kind} | {_labels(m)} | {m.unit or ''} | {_cell(m.help)} |")
    out += ["", "## Recording rules", "", "| series | |", "|---|---|"]
    recorded = "evaluated by the alert rules file (`dashboards/alerts.py::records`)"
    out += [f"| `{name}` | {recorded} |" for name in sc.RECORDED]
    out += ["", "## Other exporters' series the dashboards read", "", "| series | what |", "|---|---|"]
    out += [f"| `{name}` | {_cell(what)} |" for name, what in sc.VLLM_METRICS.items()]
    return "\n".join(out).rstrip() + "\n"


def settings_markdown() -> str:
    out = [
        "# Settings",
        "",
        "Generated from `verl_otel/semconv/env_doc.py` and `verl_otel/otel_env.py` by `make docs`: do not edit. "
        "Every variable is read once per process (`verl_otel/config.py`, one parser in `verl_otel/_env.py`); a "
        "value that cannot be used logs one line naming the variable and the default used, and the default is "
        "used. Set them in the driver's environment: the `ray.init` hook copies every "
        + ", ".join(f"`{p}*`" for p in sc.PROPAGATED_ENV_PREFIXES)
        + " variable to the job's workers on every node, and the `OTEL_*` ones inside `"
        + sc.ENV_JOB_OTEL
        + "`, applied only in the processes verl-otel instruments (another SDK in the job keeps its own).",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    out += [f"| `{name}` | {default} | {_cell(meaning)} |" for name, (default, meaning) in env_doc.ENV_DOC.items()]
    others = sorted(set(otel_env.OTEL_VARIABLES) - set(env_doc.ENV_DOC))
    out += [
        "",
        "## OpenTelemetry variables checked before the SDK reads them",
        "",
        "The SDK reads these itself; verl-otel checks each first and replaces a value the SDK would reject with "
        "its default, with one line naming it:",
        "",
        ", ".join(f"`{name}`" for name in others),
        "",
        "## Set by verl-otel itself",
        "",
        "| variable | what |",
        "|---|---|",
    ]
    out += [f"| `{name}` | {_cell(what)} |" for name, what in env_doc.ENV_INTERNAL.items()]
    return "\n".join(out).rstrip() + "\n"
