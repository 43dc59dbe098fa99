"""Where `trainctl render` puts what it renders: one YAML stream, or a folder per pool.

The stream (no --out) is what `helm template` prints: every object once, each document
starting with `---` and a `# Source:` line, ready for `kubectl apply -f -`.

A folder (--out) is written whole or not at all: everything is rendered and every file already
there that matters is read first, the new pool folders are written into a staging folder beside
the target, and only then moved into place. Nothing is written through a symlink.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from app.errors import ConfigError
from app.k8s import render, values_yaml
from app.storage.location import expand

# What Go's YAML reader (kubectl, kustomize, Argo CD, Flux: go-yaml through sigs.k8s.io/yaml)
# reads as a number or a boolean where PyYAML reads a string, so PyYAML writes it plain:
# `namespace: 0800` is the number 800 there, `MYVAR: y` true, `LR: 1e-3` 0.001. PyYAML quotes
# what its own reader would misread (yes, on, 0x1F, 1_000, 2001-12-14) by itself.
_GO_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_GO_PREFIXED = re.compile(r"[-+]?0[bBoOxX][0-9a-fA-F_]+")
_GO_BOOLEANS = frozenset({"y", "Y", "n", "N"})
_STR = "tag:yaml.org,2002:str"  # a number of the manifest is a number: written plain


def go_reads_otherwise(text: str) -> bool:
    """Whether Go's YAML reader takes plain `text` for something other than a string."""
    return (
        text in _GO_BOOLEANS
        or _GO_NUMBER.fullmatch(text.replace("_", "")) is not None
        or _GO_PREFIXED.fullmatch(text) is not None
    )


class _ExactDumper(yaml.SafeDumper):
    """PyYAML's dumper, except that a string holding U+0085 (NEL) is written double-quoted,
    and one Go's YAML reader would take for a number or a boolean is quoted.

    PyYAML writes NEL raw inside a single-quoted scalar, where every YAML 1.1 reader (kubectl's
    go-yaml, PyYAML's own loader) reads a line break and folds it into a space: an env value
    "a\x85b" would be applied as "a b". Double-quoted, NEL is escaped as \\N. U+2028 and U+2029
    stay raw: YAML 1.1 keeps them through folding.
    """

    def analyze_scalar(self, scalar: str) -> Any:
        analysis = super().analyze_scalar(scalar)
        if getattr(self.event, "tag", None) == _STR and go_reads_otherwise(scalar):
            analysis.allow_flow_plain = analysis.allow_block_plain = False
        if "\x85" in scalar:
            analysis.allow_flow_plain = analysis.allow_block_plain = False
            analysis.allow_single_quoted = analysis.allow_block = False
        return analysis


def _dump(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_ExactDumper, sort_keys=False, allow_unicode=True, width=100)


def render_stream(values: dict[str, Any], *, release: str, namespace: str) -> tuple[str, list[str]]:
    """Every object once (shared ones are not repeated per pool), as one YAML stream; and the
    names of the Secrets in it, which hold a token drawn afresh by this render."""
    pools = render.render_objects(values, release=release, namespace=namespace)
    schedule = render.render_schedule_objects(values, release=release, namespace=namespace)
    seen: set[tuple[str, str]] = set()
    docs = []
    for pool, objects in [*list(pools.items()), ("schedule", schedule)]:
        for obj in objects:
            key = (obj["kind"], obj["metadata"]["name"])
            if key in seen:
                continue
            seen.add(key)
            source = f"trainctl/{pool}/{obj['kind'].lower()}.yaml"
            docs.append(f"---\n# Source: {source}\n{_dump(obj)}")
    return "".join(docs), sorted(name for kind, name in seen if kind == "Secret")


def _pool_files(
    values: dict[str, Any], *, release: str, namespace: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """pool -> file name -> object, kustomization.yaml included."""
    pools = render.render_objects(values, release=release, namespace=namespace)
    schedule = render.render_schedule_objects(values, release=release, namespace=namespace)
    out = {}
    for pool, objects in pools.items():
        extra = [
            obj
            for obj in schedule
            if obj["kind"] != "CronJob" or obj["metadata"]["labels"]["trainctl.io/pool"] == pool
        ]
        files: dict[str, dict[str, Any]] = {}
        for obj in objects + extra:
            # Named by kind, so a changed config rewrites the same files instead of adding some.
            name = f"{obj['kind'].lower()}.yaml"
            if name in files:  # e.g. the schedule's ServiceAccount next to the Ray pods' one
                name = f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            files[name] = obj
        files["kustomization.yaml"] = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": list(files),
        }
        out[pool] = files
    return out


def _no_symlink(path: Path) -> None:
    if path.is_symlink():
        raise ConfigError(
            f"--out: {path} is a symbolic link; trainctl render does not write through links "
            "(give the real folder, or remove the link)"
        )


# Rendered manifests are what GitOps repositories commit (docs/gitops.md).
SECRET_IN_STREAM = (
    "the stream holds Secret {name} with a Ray auth token drawn afresh by this render "
    "(rayAuth.existingSecret is empty): `kubectl apply` of it replaces the token the running "
    "Ray clusters of this release use, and their restarted workers cannot join them. Apply it "
    "once (kubectl create), or create the Secret out of band and set "
    "rayAuth.existingSecret={name}, or render with --out --with-secret, which keeps the token "
    "it wrote"
)
_SECRET_IN_OUT = (
    "--out would write the Ray auth token (Secret {name}, generated because "
    "rayAuth.existingSecret is empty) into {out}, and rendered manifests are meant to be "
    "committed, where anyone who reads the repository gets the token: create the Secret out of "
    "band (kubectl -n {ns} create secret generic {name} "
    '--from-literal=auth_token="$(openssl rand -hex 32)", or a sealed or external secret) and '
    "set rayAuth.existingSecret={name}; or pass --with-secret to write it anyway, and keep "
    "the folder out of Git"
)


def _keep_existing_token(
    pools: dict[str, dict[str, dict[str, Any]]], secrets: list[str], out_dir: Path
) -> None:
    """Like Helm's lookup: re-rendering into a folder keeps the token an earlier render wrote
    there. Every pool's Ray cluster reads the one Secret, so a token found in any pool folder
    (one these values no longer render included) is every pool's; folders that disagree are
    refused, since only the cluster knows which of them was applied last."""
    folders = sorted(out_dir.iterdir()) if out_dir.is_dir() else []
    files = [
        path
        for folder in folders
        if folder.is_dir() and not folder.is_symlink()
        for path in sorted(folder.glob("secret*.yaml"))  # files are named by kind
    ]
    for name in secrets:
        found: dict[str, list[Path]] = {}
        for path in files:
            if (token := _token_in(path, name)) is not None:
                found.setdefault(token, []).append(path)
        if len(found) > 1:
            listed = "; ".join(", ".join(map(str, paths)) for paths in found.values())
            raise ConfigError(
                f"--out: the pool folders hold different tokens for the one Secret {name} "
                f"({listed}): a pool whose cluster reads another token than the Secret now "
                "applied cannot restart its workers. Put the token the cluster has (kubectl "
                f"get secret {name} -o jsonpath='{{.data.auth_token}}') in each of those files, "
                "then render again"
            )
        for token in found:
            for files in pools.values():
                for obj in files.values():
                    if obj["kind"] == "Secret" and obj["metadata"]["name"] == name:
                        obj["data"]["auth_token"] = token


def _token_in(path: Path, name: str) -> str | None:
    """The auth token of Secret `name` in an earlier render's file, or None."""
    _no_symlink(path)
    try:  # the values reader: an alias bomb planted here is refused like one in a values file
        old = values_yaml.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as err:
        raise ConfigError(
            f"--out: {path} holds the auth token of an earlier render but cannot be read "
            f"({type(err).__name__}); fix or remove it"
        ) from None
    if isinstance(old, dict) and (old.get("metadata") or {}).get("name") == name:
        token = (old.get("data") or {}).get("auth_token")
        if isinstance(token, str) and token:
            return token
    return None


def _not_rendered(folder: Path) -> list[str]:
    """The entries of an earlier render's pool folder that it did not write: all but its
    kustomization.yaml and the resources that lists (every file render writes is listed)."""
    listing = folder / "kustomization.yaml"
    written: set[str] = {listing.name}
    if listing.is_file() and not listing.is_symlink():
        try:
            old = values_yaml.load(listing.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
            old = None
        resources = old.get("resources") if isinstance(old, dict) else None
        if isinstance(resources, list):
            written.update(name for name in resources if isinstance(name, str))
    return sorted(entry.name for entry in folder.iterdir() if entry.name not in written)


def write_manifests(
    values: dict[str, Any],
    out_dir: Path,
    *,
    release: str,
    namespace: str,
    with_secret: bool = False,
) -> list[Path]:
    """Write <out_dir>/<pool>/*.yaml and a kustomization.yaml per pool; return the paths.

    Each pool folder is replaced whole, and so may hold only what an earlier render wrote
    there (ConfigError naming anything else, before anything is written); other entries of
    out_dir are left alone. The Ray token Secret the chart generates is written only with
    `with_secret` (ConfigError saying how to provide it otherwise).
    """
    if str(out_dir) == "-":  # `-f -` reads stdin; `--out -` made a folder named "-"
        raise ConfigError(
            "--out -: --out names the folder render writes a folder per pool into; for the "
            "manifests on stdout, leave --out out"
        )
    pools = _pool_files(values, release=release, namespace=namespace)
    secrets = sorted({o["metadata"]["name"] for f in pools.values() for o in f.values()
                      if o["kind"] == "Secret"})  # fmt: skip
    if secrets and not with_secret:
        raise ConfigError(_SECRET_IN_OUT.format(out=out_dir, name=secrets[0], ns=namespace))
    out_dir = expand(out_dir, "--out")
    _no_symlink(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out={out_dir}: exists but is not a folder")
    if _is_pool_folder(out_dir):  # it nested pools inside a pool, which the next render refused
        raise ConfigError(
            f"--out={out_dir}: is a pool's folder of an earlier render; give the folder that "
            f"holds the pools' folders, {out_dir.parent}"
        )
    for pool in pools:
        folder = out_dir / pool
        _no_symlink(folder)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"--out: {folder} exists but is not a folder; remove it")
        if folder.is_dir() and (foreign := _not_rendered(folder)):
            raise ConfigError(
                [
                    f"--out: {folder / name} was not written by `trainctl render` (the folder's "
                    "kustomization.yaml does not list it), and render replaces each pool's "
                    "folder whole: move it out (a kustomize overlay beside the folder), or "
                    "remove it"
                    for name in foreign
                ]
            )
    _keep_existing_token(pools, secrets, out_dir)
    parent = out_dir.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.staging-", dir=parent))
    except OSError as err:
        raise ConfigError(f"--out={out_dir}: cannot create a folder in {parent} ({err})") from None
    try:
        for pool, files in pools.items():
            (staging / pool).mkdir()
            for name, obj in files.items():
                _write(staging / pool / name, _dump(obj), private=obj.get("kind") == "Secret")
        _move_into_place(staging, out_dir, list(pools))
    except OSError as err:
        raise ConfigError(f"--out={out_dir}: cannot write ({err})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out_dir / pool / name for pool, files in pools.items() for name in files]


def _write(path: Path, text: str, private: bool) -> None:
    """A Secret's file is its owner's alone (0600) from its first byte: it holds the Ray
    token, and the other files of a render are read by whatever applies them."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)


def earlier_pools(out_dir: Path, pools: list[str]) -> list[Path]:
    """Pool folders of an earlier render into `out_dir` whose pool these values no longer
    render (disabled or removed). They are left as they are, never deleted: whatever applies
    the folders (`kubectl apply -k`, an Argo CD ApplicationSet over out_dir/*) would still
    start their RayJobs, so the caller names them."""
    out_dir = expand(out_dir, "--out")
    if not out_dir.is_dir() or out_dir.is_symlink():
        return []
    return sorted(
        folder
        for folder in out_dir.iterdir()
        if folder.name not in pools
        and folder.is_dir()
        and not folder.is_symlink()
        and _is_pool_folder(folder)
    )


def _is_pool_folder(folder: Path) -> bool:
    """A folder an earlier render wrote for one pool."""
    return all((folder / name).is_file() for name in ("kustomization.yaml", "rayjob.yaml"))


def _move_into_place(staging: Path, out_dir: Path, pools: list[str]) -> None:
    if not out_dir.exists():
        staging.rename(out_dir)  # one rename: the whole folder appears at once
        staging.mkdir()  # for the caller's cleanup
        return
    for pool in pools:
        target = out_dir / pool
        if target.exists():
            old = staging / f".old-{pool}"
            target.rename(old)
        (staging / pool).rename(target)
