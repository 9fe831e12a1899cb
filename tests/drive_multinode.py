"""A job on a running two-node Ray cluster, as a user's driver: ``ray.init(address=...)`` with the settings in
this process' environment only (verl-otel's ``ray.init`` hook carries them to every node's workers), one actor
pinned to each node by its custom resource. Each actor imports verl (its post-import hooks fire if the start-up
hook ran there), declares a role and ends one span. Prints one JSON line per actor, then keeps the actors (and
their /metrics) alive until stdin closes.

Usage: python drive_multinode.py ADDRESS RESOURCE [RESOURCE ...]
"""

import json
import os
import sys

import ray


@ray.remote(num_cpus=0)
class Probe:
    def run(self) -> dict:
        import verl.utils.profiler.performance as perf

        from verl_otel import runtime

        rt = runtime.current()
        rt.wire("reward_worker")
        with rt.tracer.start_as_current_span("multinode.probe"):
            pass
        flushed = rt.flush_wait(10.0)
        return {
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            "hooked": hasattr(perf._timer, "__wrapped__"),
            "flushed": flushed,
            "enabled": os.environ.get("VERL_OTEL_ENABLED"),
            "headers": os.environ.get("OTEL_EXPORTER_OTLP_HEADERS"),
        }


def main() -> None:
    ray.init(address=sys.argv[1], include_dashboard=False)
    probes = [Probe.options(resources={name: 1}).remote() for name in sys.argv[2:]]
    for result in ray.get([p.run.remote() for p in probes], timeout=180):
        print(json.dumps(result), flush=True)
    print("READY", flush=True)
    sys.stdin.read()  # the test scrapes the actors' /metrics meanwhile


if __name__ == "__main__":
    main()
