"""Where a run's files go: a folder on a volume or a prefix in a bucket, decided here, once.

- location.py: the run-storage location and the operations that differ between kinds;
- buckets.py: s3:// and gs:// through pyarrow's filesystems (`ObjectPath`);
- uris.py: what a storage URI, an endpoint and the cloud clients' variables may be;
- probe.py: is a bucket reachable, every probe with a deadline (deadline.py);
- safe_fs.py: local files opened without following links (O_NOFOLLOW);
- bounded_json.py: JSON records bounded before they are parsed.
"""
