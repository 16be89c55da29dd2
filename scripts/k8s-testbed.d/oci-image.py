"""Make an OCI image archive from a directory, without a registry or a container tool: one
uncompressed layer (the directory, owned by root, times zeroed), its config and manifest, and
an index naming the image, as `ctr images import` reads it.

    python3 oci-image.py DIR NAME OUT.tar [--entrypoint PATH] [--env K=V]...

NAME is the image's full reference (e.g. dispatch.testbed/node:1); pods name it with
imagePullPolicy Never. The same directory gives the same archive (byte for byte).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path


def _layer(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath) / name
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isfile():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("name")
    ap.add_argument("out", type=Path)
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    args = ap.parse_args()
    layer = _layer(args.dir)
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = _json({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": args.env, **({"Entrypoint": args.entrypoint} if args.entrypoint else {})},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    })
    tmp = args.out.with_suffix(".partial")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        layer_ref = _blob(tar, layer)
        config_ref = _blob(tar, config)
        manifest = _json({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_ref, "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_ref, "size": len(layer)}],
        })
        manifest_ref = _blob(tar, manifest)
        tag = args.name.rsplit(":", 1)[-1]
        index = _json({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_ref, "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": args.name,
                                "org.opencontainers.image.ref.name": tag},
            }],
        })
        for name, data in (("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
                           ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
