"""The Kubeflow scope's pure parts (backends/kubeflow/scope.py): which cluster a scope names,
from the API server's identity and never from what the kubeconfig calls it (issue 47 item 6)."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from lightkube.config.models import Cluster, Context

from dispatch.backends.kubeflow.scope import (
    ca_certificates,
    legacy_scope,
    scope_string,
    server_id,
    server_id_of,
    uid_id,
)
from dispatch.errors import BackendError

CA1 = b"""-----BEGIN CERTIFICATE-----
MIIBizCCATGgAwIBAgIURTjsCTiaq+JZcJ7gjS5CNWsBrXAwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPc2NvcGUtdGVzdC1jYS0xMCAXDTI2MTIwNzA4NTcxNloYDzIx
MjYxMTEzMDg1NzE2WjAaMRgwFgYDVQQDDA9zY29wZS10ZXN0LWNhLTEwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAARpERWn/BDFGIz0wH8wpdWtxMTC5FOT6A3i5Ifm
7+Wq8Af0vtsMTxuCdyi+2xR6ZyGszncIOrJMpeBXJfO+odulo1MwUTAdBgNVHQ4E
FgQUQbu/VI401KOwgf+kdAjQcRmCP4owHwYDVR0jBBgwFoAUQbu/VI401KOwgf+k
dAjQcRmCP4owDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiAsUK7B
IJdyFPWl4awVDFgKr+JXLoGE+YsCXa1fZBOJsgIhAItrFe0FHYDpURslw3ZhX3aD
w8r6iOE3l0R9hiSnOnh9
-----END CERTIFICATE-----
"""
CA2 = b"""-----BEGIN CERTIFICATE-----
MIIBijCCATGgAwIBAgIURLaiMfa0Odqk66xl3hPa5yhzt7QwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPc2NvcGUtdGVzdC1jYS0yMCAXDTI2MTIwNzA4NTcxNloYDzIx
MjYxMTEzMDg1NzE2WjAaMRgwFgYDVQQDDA9zY29wZS10ZXN0LWNhLTIwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAARNaly55tRwaPxmTVsNxh7deJ0zubMVrj2WnO/7
FH6GgnJ0+r1Pz9BaePXTfwCc1/tTUxaevWIJsU2StspaGWwco1MwUTAdBgNVHQ4E
FgQUSI/GBQg/x44pZtU7t2GPet431HMwHwYDVR0jBBgwFoAUSI/GBQg/x44pZtU7
t2GPet431HMwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiAQWCMB
k/zf6iC5dFw94iTYWcIm1vK11/G//a68zHd2rgIgIMZ6fzhbNSokLzi3FLjOOkps
n+Sr0fZRjdPfnEfmPs0=
-----END CERTIFICATE-----
"""
UID_A = "3f2a9c1e-5b7d-4e1f-9a0b-1c2d3e4f5a6b"
UID_B = "9e8d7c6b-5a49-4838-a271-605f4e3d2c1b"


def test_the_scope_names_the_cluster_by_its_kube_system_uid_not_its_kubeconfig_name() -> None:
    a, b = uid_id(UID_A), uid_id(UID_B)
    assert a.key == "uid-3f2a9c1e5b7d"  # `kubectl get ns kube-system` shows a UID starting so
    assert scope_string("kubeflow", a, "dispatch") == "kubeflow:uid-3f2a9c1e5b7d/dispatch"
    # two clusters both called "testbed" (or "kubernetes", as kubeadm names every one)
    assert scope_string("kubeflow", a, "dispatch") != scope_string("kubeflow", b, "dispatch")
    assert uid_id(UID_A.upper()) == a  # the same UID however it is written
    assert "testbed" not in scope_string("kubeflow", a, "dispatch")


@pytest.mark.parametrize("bad", ["", "kube-system", "3f2a9c1e",
                                 "zz2a9c1e-5b7d-4e1f-9a0b-1c2d3e4f5a6b"])
def test_a_uid_that_is_no_uid_is_refused_never_made_into_a_scope(bad: str) -> None:
    with pytest.raises(BackendError, match="is no UID"):
        uid_id(bad)


def test_the_server_id_is_the_url_and_the_ca_however_they_are_written() -> None:
    ca1, ca2 = ca_certificates(CA1, "one"), ca_certificates(CA2, "two")
    one = server_id("https://10.0.0.1:6443", ca1)
    assert one.key.startswith("server-") and len(one.key) == len("server-") + 12
    assert server_id("HTTPS://10.0.0.1:6443/", ca1) == one
    assert server_id("https://api.example:443", ca1) == server_id("https://API.example", ca1)
    assert server_id("https://10.0.0.1:6443", [*ca1, *ca2]) == \
        server_id("https://10.0.0.1:6443", [*ca2, *ca1])
    assert server_id("https://10.0.0.1:6443", ca2) != one  # another cluster's CA
    assert server_id("https://10.0.0.2:6443", ca1) != one  # another server


def test_a_ca_bundle_without_a_certificate_is_refused() -> None:
    with pytest.raises(BackendError, match="no PEM certificate"):
        ca_certificates(b"not a certificate", "certificate-authority /x/ca.crt")
    assert len(ca_certificates(CA1 + CA2, "bundle")) == 2


def _cfg(context: str, cluster: Cluster) -> SimpleNamespace:
    return SimpleNamespace(context_name=context, cluster=cluster,
                           context=Context(cluster=context, user="u"))


def test_renaming_the_context_and_cluster_changes_no_id() -> None:
    data = base64.b64encode(CA1).decode()
    server = "https://127.0.0.1:16443"
    testbed = _cfg("testbed", Cluster(server=server, certificate_auth_data=data))
    kubeadm = _cfg("kubernetes-admin@kubernetes",
                   Cluster(server=server, certificate_auth_data=data))
    assert server_id_of(testbed) == server_id_of(kubeadm) is not None
    # the name was the scope before: that (older) scope is what a rename changed
    assert legacy_scope("kubeflow", "testbed", "dispatch") == "kubeflow:testbed/dispatch"


def test_no_ca_no_server_id() -> None:
    assert server_id_of(_cfg("x", Cluster(server="https://a:1"))) is None
    insecure = Cluster(server="https://a:1", insecure=True,
                       certificate_auth_data=base64.b64encode(CA1).decode())
    assert server_id_of(_cfg("x", insecure)) is None
