"""What runs inside each Ray Train worker: the networks (model.py), the GPU fast path
(accel.py), the epoch loop (loop.py) and its Ray metrics (ray_gauges.py)."""
