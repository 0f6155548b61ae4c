"""The metric's core: events, windows, one key's timeline and state, the as-of clock, and the settings they are computed with. Imports no Beam, no store, no decoder."""
