"""Evaluating and applying a run's export over many images with Ray Data: `trainctl evaluate`,
`trainctl predict` on folders and bucket prefixes, and `trainctl compare`."""
