"""One run of `trainctl train`, from the driver's start to its run folder: the orchestration.

The driver (driver.py) takes the settings and what preflight found, decides what the run
starts from (resume.py: a checkpoint of this run; warm_start.py: TRAIN_WARM_START's weights),
starts Ray Train, follows the epochs (progress.py), stops cleanly on SIGTERM (signals.py) and
writes the summary; decisions.py holds what each step decides. What a run leaves behind, and
how it is read and written, is app/runfolder/; what a Ray Train worker runs is app/training/'s
(loop.py, from the plan in plan.py); `trainctl status` and `trainctl logs` read it
through status.py and log_lookup.py.
"""
