"""The CPU demo: verl's real trainer (fit loop, agent-loop workers, reward loop, checkpoint and weight
sync, FSDP2 actor/ref/critic workers on a random-weight tiny model) with only the LLM server stood in,
instrumented exactly as a user's run is: by the environment alone."""
