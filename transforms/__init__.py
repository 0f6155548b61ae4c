"""Apache Beam composites of the goodput pipeline, one per business step."""
