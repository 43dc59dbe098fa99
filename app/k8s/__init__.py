"""Kubernetes: render manifests, submit RayJobs, follow their status."""
