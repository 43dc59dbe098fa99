"""One storage interface: the same operations give the same answers on a volume folder and in a
bucket (a real moto S3 server on 127.0.0.1), and no module outside app/storage asks which one
it has (an AST check over app/)."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any

import pytest

from app.storage import conditional, locks
from app.storage.buckets import ObjectPath
from app.storage.entries import Kind, entries, kind, links, not_a_link, refuse_link
from app.storage.location import (
    LocalFolder,
    RunPath,
    append_line,
    local_copy,
    remove_tree,
    rename_dir,
    replace_folder,
    write_atomic,
    write_json,
    written_whole,
)
from app.storage.reading import (
    file_size,
    open_below,
    present,
    read_bounded,
    sha256_of,
    walk_files,
)
from app.storage.tree import walk
from tests.s3_support import Bucket, S3Server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bucket(s3_server: S3Server, request: pytest.FixtureRequest) -> Bucket:
    name = "iface-" + request.node.name.replace("_", "-")[:40].rstrip("-").lower()
    return s3_server.bucket(name)


def _listed(folder: RunPath, root: RunPath) -> list[tuple[str, str]]:
    return [(entry.name, entry.kind.name) for entry in entries(folder, root)]


def _files(folder: RunPath) -> list[str]:
    return sorted(str(path)[len(str(folder)) + 1 :] for path in walk_files(folder))


def _writes(run: RunPath) -> dict[str, Any]:
    """Write whole, append a line, JSON, conditional create: read back the same way."""
    found: dict[str, Any] = {}
    write_atomic(run / "a.bin", b"first", run)
    write_atomic(run / "a.bin", b"second", run)  # replaced whole
    append_line(run / "log.jsonl", '{"n": 1}', run)
    append_line(run / "log.jsonl", '{"n": 2}', run)
    write_json(run / "nested" / "deep" / "v.json", {"k": [1, 2]}, run)
    found["created"] = [conditional.create(run / "once", b"1", run) for _ in range(2)]
    found["a.bin"] = read_bounded(run / "a.bin", run, 100)
    found["log"] = read_bounded(run / "log.jsonl", run, 100)
    found["json"] = read_bounded(run / "nested" / "deep" / "v.json", run, 100)
    found["once"] = read_bounded(run / "once", run, 100)
    found["size"] = file_size(run / "a.bin")
    found["sha"] = sha256_of(run / "log.jsonl", run)
    with open_below(run / "a.bin", run, limit=10) as handle:
        found["opened"] = handle.read()
    return found


def _refusals(run: RunPath) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, call in {
        "over": lambda: read_bounded(run / "a.bin", run, 3),
        "open_over": lambda: open_below(run / "a.bin", run, limit=3),
        "sha_over": lambda: sha256_of(run / "a.bin", run, 3),
        "missing": lambda: read_bounded(run / "nothing", run, 100),
    }.items():
        with pytest.raises((ValueError, FileNotFoundError)) as caught:
            call()
        found[name] = caught.type.__name__
    return found


def _queries(run: RunPath) -> dict[str, Any]:
    return {
        "kinds": [kind(run / n, run) for n in ("a.bin", "nested", "nothing")],
        "kinds_refusing": [refuse_link(run / n, run) for n in ("a.bin", "nested", "nothing")],
        "present": [present(run / n) for n in ("a.bin", "nothing")],
        "entries": _listed(run, run),
        "entries_missing": entries(run / "nothing", run),
        "files": _files(run),
        "links": links(run, run, depth=3),
        "not_a_link": not_a_link(run) == run,
    }


def _folders(run: RunPath) -> dict[str, Any]:
    """Replace a folder whole, rename one, remove a tree."""
    found: dict[str, Any] = {}
    replace_folder(run / "eval" / "x", {"a": b"1", "marker": b"2"}, run)
    replace_folder(run / "eval" / "x", {"b": b"3", "marker": b"4"}, run)  # a is gone
    found["replaced"] = _files(run / "eval" / "x")
    found["marker"] = read_bounded(run / "eval" / "x" / "marker", run, 10)
    write_atomic(run / "ck" / "m.pt", b"w", run)
    write_atomic(run / "ck2" / "old", b"o", run)
    rename_dir(run / "ck", run / "ck2")  # replaces what was there
    found["renamed"] = (_files(run / "ck2"), kind(run / "ck", run))
    remove_tree(run / "ck2")
    found["removed"] = kind(run / "ck2", run)
    return found


def _local_folders(run: RunPath) -> dict[str, Any]:
    """What a library that writes local files gets, and what the location holds after."""
    found: dict[str, Any] = {}
    write_atomic(run / "tb" / "seed", b"s", run)
    local = LocalFolder(run / "tb", root=run)
    found["seeded"] = (local.path / "seed").read_bytes()
    (local.path / "events").write_bytes(b"e1")
    local.sync()
    (local.path / "events").write_bytes(b"e1e2")
    local.stop()  # the last sync
    found["synced"] = read_bounded(run / "tb" / "events", run, 10)
    with written_whole(run / "ww", "test-") as folder:
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_bytes(b"x")
    found["written_whole"] = _files(run / "ww")
    with local_copy(run / "ww") as copy:
        found["local_copy"] = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*"))
    return found


def _tree(run: RunPath) -> dict[str, Any]:
    for name in ("train/cat/1.png", "train/dog/2.png", "train/readme.txt"):
        write_atomic(run / "data" / name, b"img", run)
    tree = walk(run / "data", "train", 60.0)
    with pytest.raises(FileNotFoundError):
        walk(run / "data", "valid", 60.0)
    return {
        "tree_folders": sorted(tree.folders),
        "tree_files": sorted(tree.files),
        "tree_others": tree.others,
        "tree_refused": tree.refused,
    }


def _everything(run: RunPath) -> dict[str, Any]:
    return {
        **_writes(run),
        **_refusals(run),
        **_queries(run),
        **_folders(run),
        **_local_folders(run),
        **_tree(run),
    }


def test_a_volume_and_a_bucket_answer_every_operation_alike(tmp_path: Path, bucket: Bucket) -> None:
    on_volume = _everything(tmp_path / "runs" / "r1")
    in_bucket = _everything(ObjectPath(bucket.uri("runs/r1"), bucket.endpoint))
    assert on_volume == in_bucket
    # And what they agree on is what was written (not two empty answers).
    assert on_volume["a.bin"] == b"second" and on_volume["created"] == [True, False]
    assert on_volume["log"] == b'{"n": 1}\n{"n": 2}\n'
    assert on_volume["sha"] == hashlib.sha256(on_volume["log"]).hexdigest()
    assert on_volume["kinds"] == [Kind.FILE, Kind.DIR, None]
    assert ("nested", "DIR") in on_volume["entries"] and ("a.bin", "FILE") in on_volume["entries"]
    assert on_volume["replaced"] == ["b", "marker"] and on_volume["marker"] == b"4"
    assert on_volume["renamed"] == (["m.pt"], None) and on_volume["removed"] is None
    assert on_volume["synced"] == b"e1e2" and on_volume["written_whole"] == ["sub/f"]
    assert on_volume["files"][:2] == ["a.bin", "log.jsonl"]
    assert on_volume["tree_folders"] == [("cat",), ("dog",)]
    assert on_volume["tree_files"] == [
        (("cat", "1.png"), "train/cat/1.png"),
        (("dog", "2.png"), "train/dog/2.png"),
        (("readme.txt",), "train/readme.txt"),
    ]


def test_what_differs_is_how_writers_are_kept_apart(tmp_path: Path, bucket: Bucket) -> None:
    """The one answer that is not alike, by design: a volume's writers take a lock, S3's send
    a compare-and-swap (app/storage/conditional.py)."""
    volume = tmp_path / "champions" / "m.json"
    s3 = ObjectPath(bucket.uri("champions/m.json"), bucket.endpoint)
    assert conditional.guard(volume) is conditional.Guard.LOCK
    assert conditional.guard(s3) is conditional.Guard.COMPARE_AND_SWAP
    assert conditional.guard(ObjectPath("gs://b/champions/m.json")) is conditional.Guard.NONE
    with locks.exclusive(volume, tmp_path, 5.0) as held:
        assert held and (tmp_path / "champions" / ".m.lock").is_file()
        with (
            pytest.raises(locks.LockUnavailable, match="still locked"),
            locks.exclusive(volume, tmp_path, 0.2),
        ):
            pass
    with locks.exclusive(s3, None, 5.0) as held:
        assert held is False


def test_a_volume_refuses_links_the_bucket_cannot_hold(tmp_path: Path) -> None:
    """The link-safety root is kept: a link below the root is named, never followed."""
    from app.storage.safe_fs import LinkRefused

    run = tmp_path / "run"
    (run / "real").mkdir(parents=True)
    (run / "real" / "f").write_bytes(b"x")
    (run / "linked").symlink_to(run / "real")
    (run / "file-link").symlink_to(run / "real" / "f")
    assert kind(run / "file-link", run) is Kind.LINK
    assert [(e.name, e.link) for e in links(run, run)] == [
        ("file-link", str(run / "real" / "f")),
        ("linked", str(run / "real")),
    ]
    for call in (
        lambda: read_bounded(run / "linked" / "f", run, 10),
        lambda: refuse_link(run / "file-link", run),
        lambda: entries(run / "linked", run),
        lambda: not_a_link(run / "linked"),
    ):
        with pytest.raises(LinkRefused):
            call()


# --- no module outside app/storage asks which kind of storage it has ------------------------
# Sites that hand a library a local path and may call local_path(): (file, function) -> why.
LOCAL_PATH_ALLOWED = {
    ("app/tracking/clients.py", "__init__"): "W&B's own folder: wandb.init(dir=...)",
}
KIND_TYPES = {"ObjectPath", "Path"}


def kind_branches(source: str, filename: str) -> list[str]:
    """`local_path(...)` calls outside LOCAL_PATH_ALLOWED and isinstance checks against
    ObjectPath or Path, as 'file:line: what'."""
    found = []
    for function, node in _calls(ast.parse(source)):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name == "local_path" and (filename, function) not in LOCAL_PATH_ALLOWED:
            found.append(f"{filename}:{node.lineno}: local_path() in {function}")
        if name == "isinstance" and len(node.args) == 2:
            named = _names(node.args[1]) & KIND_TYPES
            if named:
                found.append(f"{filename}:{node.lineno}: isinstance(..., {sorted(named)[0]})")
    return found


def _names(node: ast.expr) -> set[str]:
    """The type names in isinstance's second argument: `T`, `m.T`, `(A, B)`, `A | B`."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(item) for item in node.elts))
    if isinstance(node, ast.BinOp):
        return _names(node.left) | _names(node.right)
    return set()


def _calls(tree: ast.AST, function: str = "<module>") -> list[tuple[str, ast.Call]]:
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += _calls(node, node.name)
            continue
        if isinstance(node, ast.Call):
            found.append((function, node))
        found += _calls(node, function)
    return found


def test_the_check_finds_a_branch_on_the_kind() -> None:
    source = (
        "def f(x):\n"
        "    if local_path(x) is None:\n"
        "        return 1\n"
        "    return isinstance(x, (int, ObjectPath)) or isinstance(x, str | pathlib.Path)\n"
    )
    assert kind_branches(source, "app/run/x.py") == [
        "app/run/x.py:2: local_path() in f",
        "app/run/x.py:4: isinstance(..., ObjectPath)",
        "app/run/x.py:4: isinstance(..., Path)",
    ]
    assert kind_branches("def __init__(s):\n    local_path(s)\n", "app/tracking/clients.py") == []


def test_no_module_outside_app_storage_branches_on_the_storage_kind() -> None:
    found = []
    for file in sorted((REPO / "app").rglob("*.py")):
        relative = file.relative_to(REPO).as_posix()
        if relative.startswith("app/storage/"):
            continue
        found += kind_branches(file.read_text(), relative)
    assert found == [], "ask app/storage's operations instead:\n" + "\n".join(found)


def test_a_name_near_the_file_systems_limit_is_written_whole(tmp_path: Path) -> None:
    """`predict --out` with a 248-byte name was refused as `File name too long`: the temporary
    file beside it took the name plus a suffix, over the 255-byte limit (found by a red-team
    pass)."""
    from app.storage import conditional, safe_fs
    from app.storage.location import write_atomic

    name = "n" * 244 + ".csv"
    write_atomic(tmp_path / name, b"image,label\n", tmp_path)
    assert (tmp_path / name).read_bytes() == b"image,label\n"
    assert conditional.create(tmp_path / ("m" * 250), b"x", tmp_path)
    assert len(safe_fs.temporary_name("n" * 255)) <= 255
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m" * 250, name]  # nothing left over


def test_a_key_no_path_names_is_passed_over_and_counted(bucket: Bucket) -> None:
    """S3 keys may hold "//" or "." and ".." segments; pyarrow's client reads another key for
    them or refuses the name. Listed as files, they were refused partway through a prediction
    as "does not exist" (the object was there) or "Empty path component", and in a dataset
    past the files `check` samples (found by a red-team pass)."""
    import urllib.request

    from app.storage.buckets import locate
    from tests.support import open_local

    bucket.write("data/train/cat/1.png", b"img")
    for key in ("data/train/cat//2.png", "data/train/cat/./3.png", "data/train/dog/../4.png"):
        # Written as S3 stores any key: one PUT of that path, not normalised by a client.
        put = urllib.request.Request(f"{bucket.endpoint}/{bucket.name}/{key}", b"img", method="PUT")
        with open_local(put, timeout=10) as answer:
            assert answer.status == 200
    tree = walk(locate(f"s3://{bucket.name}/data", bucket.endpoint), "train", 60.0)
    assert tree.files == [(("cat", "1.png"), "train/cat/1.png")]
    assert tree.others == 3
