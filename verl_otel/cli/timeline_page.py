"""The page ``verl-otel timeline`` writes: one self-contained HTML file (inline CSS, SVG and a few lines of script;
nothing fetched), so it opens anywhere, offline, and pastes into an issue as a picture (``--png``)."""

from __future__ import annotations

import hashlib
from html import escape

from verl_otel import semconv as sc
from verl_otel.analysis import timeline as tlm

WIDTH = 1500  # the page's width, px (the PNG's too)
LABEL_W, PLOT_W, SIDE_W = 300, 880, 280
ROW_H, GROUP_H, AXIS_H = 20, 22, 26
#: fixed colours: a phase keeps its colour from page to page
_PHASE_COLORS = dict(
    zip(
        sc.PHASES,
        (
            "#4e79a7",
            "#f28e2b",
            "#59a14f",
            "#76b7b2",
            "#edc948",
            "#b07aa1",
            "#e15759",
            "#9c755f",
            "#bab0ac",
            "#86bcb6",
            "#8cd17d",
        ),
        strict=False,
    )
)
_BUCKET_COLORS = {
    tlm.BUCKET_IDLE: "#d62728",
    tlm.BUCKET_LONG_TAIL: "#ff7f0e",
    tlm.BUCKET_WAITING: "#7f7f7f",
    "waiting_for_samples": "#7f7f7f",
    "staleness_blocked": "#9467bd",
    "busy": "#2ca02c",
    "generating": "#2ca02c",
}
SAMPLE_COLOR = "#ff9d00"


def color(name: str) -> str:
    if name in _PHASE_COLORS:
        return _PHASE_COLORS[name]
    if name in _BUCKET_COLORS:
        return _BUCKET_COLORS[name]
    h = int(hashlib.sha1(name.encode()).hexdigest()[:6], 16)  # a colour, not security
    return f"hsl({h % 360},45%,55%)"


def _rows(tl: tlm.Timeline) -> list[tuple[str, tlm.Lane | str]]:
    rows: list[tuple[str, tlm.Lane | str]] = [("lane", tl.driver)]
    group = ""
    for lane in tl.lanes:
        if lane.group != group:
            group = lane.group
            rows.append(("group", f"{group}s"))
        rows.append(("lane", lane))
    for group, n in tl.lanes_not_drawn.items():
        rows.append(("group", f"+{n} {group} lanes not drawn"))
    return rows


def svg_height(tl: tlm.Timeline) -> int:
    return AXIS_H + sum(ROW_H if kind == "lane" else GROUP_H for kind, _ in _rows(tl)) + 10


def _svg(tl: tlm.Timeline) -> str:
    span = max(1, tl.end_ns - tl.start_ns)

    def x(t: int) -> float:
        return LABEL_W + max(0.0, min(1.0, (t - tl.start_ns) / span)) * PLOT_W

    def rect(b: tlm.Bar, y: float, h: float, fill: str, cls: str, opacity: float = 1.0) -> str:
        x0, x1 = x(b.start_ns), x(b.end_ns)
        title = f"{b.detail or b.name} (at +{(b.start_ns - tl.start_ns) / 1e9:.3f} s)"
        stroke = ' stroke="#000" stroke-width="1.5"' if b.error else ""
        return (
            f'<rect class="{cls}" x="{x0:.1f}" y="{y:.1f}" width="{max(1.0, x1 - x0):.1f}" height="{h:.1f}" '
            f'fill="{fill}" fill-opacity="{opacity}"{stroke} data-name="{escape(b.name)}" '
            f'data-detail="{escape(title)}"><title>{escape(title)}</title></rect>'
        )

    out = [
        f'<svg id="lanes" xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + PLOT_W + 10}" '
        f'height="{svg_height(tl)}" font-family="sans-serif" font-size="11">'
    ]
    secs = tl.seconds
    tick = next((t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800) if secs / t <= 12), 3600)
    n = 0
    while n * tick <= secs + 1e-9:
        tx = LABEL_W + n * tick / max(secs, 1e-9) * PLOT_W
        out.append(f'<line x1="{tx:.1f}" y1="{AXIS_H - 6}" x2="{tx:.1f}" y2="{svg_height(tl)}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{tx:.1f}" y="{AXIS_H - 10}" text-anchor="middle" fill="#555">{n * tick:g} s</text>')
        n += 1
    y = float(AXIS_H)
    for _kind, item in _rows(tl):
        if isinstance(item, str):
            out.append(f'<text x="4" y="{y + 15:.1f}" font-weight="bold" fill="#333">{escape(item)}</text>')
            y += GROUP_H
            continue
        lane = item
        extra = f" +{lane.samples_not_drawn} samples" if lane.samples_not_drawn else ""
        out.append(f'<g class="lane" data-group="{escape(lane.group)}">')
        out.append(f'<text x="4" y="{y + 14:.1f}" fill="#222">{escape(lane.label[:48])}{escape(extra)}</text>')
        out.append(f'<rect x="{LABEL_W}" y="{y:.1f}" width="{PLOT_W}" height="{ROW_H}" fill="#fafafa"/>')
        for b in lane.idle:
            out.append(rect(b, y, ROW_H, color(b.name), f"idle bucket-{escape(b.name)}", 0.28))
        for b in lane.bars:
            out.append(rect(b, y + 2, ROW_H - 4 if not lane.samples else ROW_H / 2 - 2, color(b.name), "call"))
            if lane is tl.driver and x(b.end_ns) - x(b.start_ns) > 6 * len(b.name):
                out.append(f'<text x="{x(b.start_ns) + 3:.1f}" y="{y + 14:.1f}" fill="#fff">{escape(b.name)}</text>')
        for b in lane.samples:
            out.append(rect(b, y + ROW_H / 2 + 1, ROW_H / 2 - 3, SAMPLE_COLOR, "sample"))
        out.append("</g>")
        y += ROW_H
    out.append("</svg>")
    return "\n".join(out)


def _side(tl: tlm.Timeline) -> str:
    total = sum(tl.buckets.values()) or 1.0
    unit = "GPU-s" if tl.measured else "lane-s"
    busy_head = "<th>measured busy</th>" if tl.busy else ""  # the GPUs' NVML busy share, where measured

    def busy(k: str) -> str:
        return "" if not tl.busy else f"<td>{100 * tl.busy[k]:.0f}%</td>" if k in tl.busy else "<td></td>"

    rows = "".join(
        f'<tr class="bucket" data-bucket="{escape(k)}"><td><span class="sw" style="background:{color(k)}"></span>'
        f"{escape(k)}</td><td>{v:.2f}</td><td>{100 * v / total:.0f}%</td>{busy(k)}</tr>"
        for k, v in tl.buckets.items()
    )
    if tl.measured:
        how = f"measured in-process by the run (the step span's {sc.ATTR_GOODPUT_PREFIX}* attributes)" + (
            f"; the step's GPU time: {tl.gpu_seconds:.2f} GPU-s" if tl.gpu_seconds is not None else ""
        )
    else:
        how = (
            f"derived here from the spans: this trace carries no {sc.ATTR_GOODPUT_PREFIX}* attributes (a run "
            "before the GPU-time accounting), so these are seconds of the lanes drawn, not GPU-seconds"
        )
    phases = "".join(
        f'<div><span class="sw" style="background:{color(p)}"></span>{escape(p)}</div>'
        for p in dict.fromkeys(b.name for b in tl.driver.bars)
    )
    return (
        f'<div id="side"><h3>Buckets ({unit})</h3><table id="buckets"><tr><th>bucket</th><th>{unit}</th>'
        f"<th>share</th>{busy_head}</tr>{rows}</table>"
        f'<p class="note" id="bucket-source">{escape(how)}</p>'
        f'<h3>Phases</h3>{phases}<div><span class="sw" style="background:{SAMPLE_COLOR}"></span>a sample '
        f"(lower half of its lane)</div></div>"
    )


_CSS = (
    (
        """body{font-family:sans-serif;margin:12px;color:#222;width:{W}px}
h2{margin:0 0 4px 0;font-size:18px}.note{color:#555;font-size:12px;margin:2px 0}
#main{display:flex;gap:12px;align-items:flex-start}#side{width:{S}px;font-size:12px}
#side table{border-collapse:collapse;width:100%}#side td,#side th{padding:2px 4px;text-align:right}
#side td:first-child,#side th:first-child{text-align:left}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.bucket{cursor:pointer}.bucket.off{opacity:.35}#readout{height:16px;font-size:12px;color:#333}
"""
    )
    .replace("{W}", str(WIDTH - 24))
    .replace("{S}", str(SIDE_W))
)

# the only script: a readout of the bar under the pointer and a click on a bucket to hide its stretches
_JS = """(function(){
var out=document.getElementById('readout');
document.querySelectorAll('#lanes rect[data-detail]').forEach(function(r){
  r.addEventListener('mouseenter',function(){out.textContent=r.getAttribute('data-detail');});
});
document.querySelectorAll('tr.bucket').forEach(function(tr){
  tr.addEventListener('click',function(){
    var off=tr.classList.toggle('off');
    document.querySelectorAll('#lanes rect.bucket-'+CSS.escape(tr.getAttribute('data-bucket'))).forEach(
      function(r){r.style.display=off?'none':'';});
  });
});
document.body.setAttribute('data-ready',String(document.querySelectorAll('#lanes g.lane').length));
})();"""


def render(tl: tlm.Timeline, source: str) -> str:
    lanes = len(tl.lanes)
    samples = (
        f"the {tl.samples_drawn} slowest of {tl.samples_total} samples drawn on their lanes (orange); each lane "
        "counts the rest it ran"
        if tl.samples_total
        else "no samples in this step's trace"
    )
    title = f"step {tl.step}: {tl.seconds:.2f} s"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>verl-otel timeline, {escape(title)}</title>
<style>{_CSS}</style></head>
<body data-ready="">
<h2>verl-otel timeline, {escape(title)}</h2>
<p class="note">service {escape(tl.service or "?")}, trace {escape(tl.trace_id)}, from {escape(source)};
{lanes} process lane{"s" * (lanes != 1)} under the driver's phases; {escape(samples)}; shaded: the stretches
without a call on each lane, found from the spans, by bucket.</p>
<div id="readout"></div>
<div id="main">{_svg(tl)}{_side(tl)}</div>
<script>{_JS}</script>
</body></html>
"""
