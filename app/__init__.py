"""trainctl: PyTorch training with Ray Train, locally or as KubeRay RayJobs."""
