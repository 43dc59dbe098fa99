"""One run of `trainctl train`, from the driver's start to its run folder.

The driver (driver.py) takes the settings, proves the storage and what may resume the run
(resume.py, checkpoints.py), starts Ray Train, follows the epochs (progress.py) and writes the
summary (summary.py). Everything a run leaves behind lives in the run folder (folder.py: the
records; checkpoints.py: the checkpoint folders; log_capture.py: the logs written while it runs;
log_lookup.py and log_reader.py: reading them back for `trainctl logs`). What a Ray Train worker
runs is app/training/'s (loop.py, from the plan in plan.py).
"""
