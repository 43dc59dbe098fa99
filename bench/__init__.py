"""Side-by-side benchmarks for trainctl (`make bench`); not part of the test suite."""
