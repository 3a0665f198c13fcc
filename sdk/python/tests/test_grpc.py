"""The gRPC stubs generated from the protos (./generate.sh) against the
relay: the same address serves gRPC without TLS (h2c)."""

import os
import pathlib
import sys

import pytest

GEN = pathlib.Path(__file__).resolve().parents[1] / "gen"
if not (GEN / "relay" / "v1").is_dir():
    if os.environ.get("CI"):
        raise RuntimeError("sdk/python/gen is missing: run sdk/python/generate.sh (make sdk-python-test does)")
    pytest.skip("the gRPC stubs are not generated: run sdk/python/generate.sh", allow_module_level=True)
sys.path.insert(0, str(GEN))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from relay.v1 import document_service_pb2, document_service_pb2_grpc  # noqa: E402

ARIA = "Actor.ariaVale00000001"


def test_get_document_over_grpc(relay):
    with grpc.insecure_channel(relay.addr) as channel:
        docs = document_service_pb2_grpc.DocumentServiceStub(channel)
        answer = docs.GetDocument(document_service_pb2.GetDocumentRequest(uuid=ARIA),
                                  metadata=[("x-api-key", relay.admin_key)], timeout=10)
        document = json_format.MessageToDict(answer.document)
        assert document["name"] == "Aria Vale"
        with pytest.raises(grpc.RpcError) as refused:
            docs.GetDocument(document_service_pb2.GetDocumentRequest(uuid=ARIA), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.details() == "API key is required"
