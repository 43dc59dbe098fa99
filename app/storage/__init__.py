"""Where a run's files go: a folder on a volume or a prefix in a bucket, decided here, once.

- location.py: the run-storage location (`RunPath`: a local `Path` or an `ObjectPath`), its one
  parse (`parse_location`, used by the settings and by `trainctl logs`), and the writes and
  decisions that differ between a volume and a bucket (append, replace, rename, local copies,
  the TensorBoard/W&B local folder, Ray's storage arguments, errors put in words);
- reading.py: reading a file a chunk at a time, its sha256, bounded records, listings,
  existence probes;
- entries.py: what is at a name (`Kind`: a file, a folder, a link, a FIFO...) and what a
  folder holds (`entries`), the links below a folder, a location that is itself a link;
- tree.py: every name below a data folder within a deadline (a data folder's link rule);
- locks.py: the lock a volume's writers take (a flock); a bucket has none;
- conditional.py: compare-and-swap writes in S3, create-only writes everywhere, and which of
  the two keeps a file's writers apart (`guard`);
- buckets.py: s3:// and gs:// through pyarrow's filesystems (`ObjectPath`);
- uris.py: what a storage URI, an endpoint and the cloud clients' variables may be;
- probe.py: is a bucket reachable, every probe with a deadline (deadline.py);
- safe_fs.py: local files opened without following links (O_NOFOLLOW, openat below the run
  folder);
- bounded_json.py: JSON records bounded before they are parsed.

Why a volume stays a `pathlib.Path` over safe_fs.py rather than pyarrow's LocalFileSystem:
a run folder on a shared volume is writable by every RayJob of the namespace, so each open,
listing and rename must refuse a planted link (O_NOFOLLOW, relative to a directory fd).
LocalFileSystem follows links and offers no such open, so moving volumes onto it would lose
that safety. Callers therefore ask the functions here (and the few methods both types share)
instead of branching on the type; the type is decided in this package. Where a volume's
operation starts its link-refusing opens at a root (the run folder), the caller names that
root as it names any location (a `RunPath`); a bucket ignores it. `local_path()` is left for
the one library that takes a local folder or nothing (W&B's), and
tests/unit/test_storage_interface.py fails on any other branch on the kind outside here.
"""
