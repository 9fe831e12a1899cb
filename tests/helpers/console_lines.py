"""The seed's console formats (seed 000, section 4) as regexes, and the [VERL_PROGRESS] lines of a run's log."""

from __future__ import annotations

import re
from pathlib import Path

#: seed 000's own example lines, verbatim: every pattern below must match the seed's examples of its kind
SEED_EXAMPLES = (
    "[VERL_PROGRESS][step=8] rollout start: prompts_shape=(128, 1024), rollout_n=4, "
    "meta_keys=['global_steps', 'temperature']",
    "[VERL_PROGRESS][step=8] rollout gen running: elapsed=25.0s",
    "[VERL_PROGRESS][step=8] reward done: reward_time=0.01s, reward_extra_keys=['reward']",
    "[VERL_PROGRESS][step=8] update_actor start",
    "[VERL_PROGRESS][step=8] update_actor done: 101.23s",
    "[VERL_PROGRESS][actor=dp][phase=update_policy] [##########------------] 6/12 (epoch 2/3, mini 2/4) "
    "elapsed=40.1s eta=40.1s",
    "[VERL_PROGRESS][actor=megatron][phase=update_policy] [##############--------] 14/20 elapsed=92.4s eta=39.6s",
    "[VERL_PROGRESS][step=8][rollout_manager][train] [########------------] 128/512 (25.0%) elapsed=22.4s eta=67.2s",
    "[VERL_PROGRESS][step=8][rollout_worker=0][train] [############--------] 48/64 (75.0%) elapsed=19.1s eta=6.4s",
)

_P = r"\[VERL_PROGRESS\]"
_STEP = r"\[step=(?P<step>\d+)\]"
_WHO = r"(?:\[step=(?P<step>-?\d+)\]|\[param_version=(?P<version>\d+)\])"
_S2 = r"\d+\.\d\ds"  # 101.23s
_S1 = r"\d+\.\ds"  # 25.0s
_ETA = rf"eta=(?:{_S1}|\?)"

PATTERNS: dict[str, re.Pattern[str]] = {
    "start": re.compile(
        rf"{_P}{_STEP} (?P<phase>\w+) start"
        r"(?:: prompts_shape=\((?P<shape>\d+(?:, \d+)*,?)\), rollout_n=(?P<n>\d+), "
        r"meta_keys=\[(?P<meta>.*)\])?"
    ),
    "done": re.compile(rf"{_P}{_STEP} (?P<phase>\w+) done: (?P<seconds>{_S2})"),
    "reward_done": re.compile(rf"{_P}{_STEP} reward done: reward_time={_S2}, reward_extra_keys=\[(?P<keys>.*)\]"),
    "heartbeat": re.compile(rf"{_P}{_STEP} (?P<label>rollout gen|\w+) running: elapsed=(?P<elapsed>{_S1})"),
    "rollout_bar": re.compile(
        rf"{_P}{_WHO}\[(?P<who>rollout_manager|rollout_worker=\d+)\]\[(?P<mode>train|validate)\] "
        rf"\[[#-]+\] (?P<done>\d+)/(?P<total>\d+) \(\d+\.\d%\) elapsed={_S1} {_ETA}"
    ),
    "update_bar": re.compile(
        rf"{_P}\[(?P<role>actor|critic)=(?P<strategy>dp|megatron)\]\[phase=update_policy\] "
        rf"\[[#-]+\] (?P<done>\d+)/(?P<total>\d+)(?: \(epoch \d+/\d+, mini \d+/\d+\))? "
        rf"elapsed={_S1} {_ETA}"
    ),
    # the seed names rank-0 start/done lines of its workers without an example: ours, in the bars' style
    "worker": re.compile(
        rf"{_P}(?:{_STEP})?\[(?P<role>actor|ref|critic)=(?P<strategy>dp|megatron)\]\[rank=0\] "
        rf"(?P<method>\w+) (?:start|done: {_S2})"
    ),
}


def kind(line: str) -> str | None:
    """The first pattern the whole line matches (reward_done before done)."""
    for name in ("reward_done", *PATTERNS):
        if PATTERNS[name].fullmatch(line):
            return name
    return None


_LINE = re.compile(r"(\[VERL_PROGRESS\].*?)\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def progress_lines(log: str | Path) -> list[str]:
    """Every [VERL_PROGRESS] line of a log, without Ray's ``(Actor pid=..)`` prefix and colours."""
    text = Path(log).read_text(errors="replace") if isinstance(log, Path) else log
    out = []
    for raw in text.splitlines():
        m = _LINE.search(_ANSI.sub("", raw))
        if m:
            out.append(m.group(1))
    return out


def shape_of(line: str) -> str:
    """A line modulo numbers and bar fill: how the docs' examples are compared with real output."""
    line = re.sub(r"\[[#-]+\]", "[BAR]", line)
    line = re.sub(r"\d+(?:\.\d+)?", "N", line)
    return re.sub(r"\[('[^']*'(?:, )?)*(, \.\.\.)?\]", "[KEYS]", line)
