"""The fast subset of the chaos scenarios (top-level package `chaos`) inside the normal test run."""
