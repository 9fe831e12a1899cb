"""The trackers: what a training run is made of (steps, phases, rollouts, updates),
independent of how verl is hooked and of where the data is exported."""
