"""verl hooks: where verl's functions are wrapped. The targets are data (:mod:`verl_otel.hooks.targets`,
wrappers named as strings); each module here holds the wrappers for one part of verl and is imported only
when that part of verl is."""
