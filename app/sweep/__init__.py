"""`trainctl tune`: hyperparameter sweeps with Ray Tune, each trial a normal run."""
