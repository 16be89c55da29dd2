"""Rewrite a controller's released webhook configurations for the testbed.

    python webhooks.py PREFIX URL CA_FILE MANIFEST.yaml > out.yaml

The released manifests point each webhook at an in-cluster Service; the testbed's controllers
run as processes on 127.0.0.1, so each webhook is registered by URL (PREFIX's server) with the
testbed CA's bundle, and each configuration is renamed PREFIX-<name> so JobSet's and Trainer's
(both called mutating-webhook-configuration upstream) do not replace each other.
"""

from __future__ import annotations

import base64
import sys

import yaml


def main(prefix: str, url: str, ca_file: str, manifest: str) -> None:
    with open(ca_file, "rb") as f:
        bundle = base64.b64encode(f.read()).decode()
    with open(manifest) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    out = []
    for doc in docs:
        if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": bundle}
            hook["timeoutSeconds"] = 10
        out.append(doc)
    if not out:
        sys.exit(f"webhooks.py: no webhook configurations in {manifest}")
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
