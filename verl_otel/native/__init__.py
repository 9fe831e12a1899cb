"""The verl-otel stack without Docker (``verl-otel stack up --native``): the Collector and Jaeger that
``make stack-bin`` builds, Prometheus and Alertmanager, each run on the very files of deploy/ with only
addresses and paths overridden, in a state directory that holds their data, pids and logs."""

from verl_otel.native.ports import Binds, Ports
from verl_otel.native.stack import Stack, StackError, down, up

__all__ = ["Binds", "Ports", "Stack", "StackError", "down", "up"]
