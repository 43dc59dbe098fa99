"""The run folder's records: what a run leaves behind, read and written by everything above.

<storage_path>/<run_name>/ holds the records (folder.py: summary.json, metrics.jsonl, the
attempts and the run's own files; epoch_record.py: the one list of epoch fields), the
checkpoints (checkpoints.py, checkpoint_names.py, state_dicts.py; retention.py: which stay),
the class names (class_names.py), the interruptions and their cost (interruptions.py,
usage.py), the final summary's figures (summary.py), the logs (log_capture.py and
log_handlers.py write them, log_reader.py reads them back) and a sweep's records of its trials
(sweep_records.py: sweep.json, trials.csv, sweep.png). Nothing here imports settings or
what a run does: the records are below both.
"""
