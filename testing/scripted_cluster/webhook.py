"""A validating admission webhook that refuses every pod created in one namespace of the
scripted cluster, with a message of the test's: kube-apiserver calls it over HTTPS on 127.0.0.1
(a serving certificate of the cluster's CA, ``caBundle`` that CA) and refuses the pod with
``admission webhook "<name>" denied the request: <message>``
(apiserver/pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr)."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testing.control_plane.run import ControlPlane
from testing.kube_api import Api, ApiFailure

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class PodDenyingWebhook:
    """``with PodDenyingWebhook(plane, admin, namespace, name, message):`` pods created in
    ``namespace`` are refused by webhook ``name`` with ``message`` (admission/v1 AdmissionReview,
    k8s.io/api/admission/v1/types.go); what it registered goes at the end."""

    def __init__(
        self, plane: ControlPlane, admin: Api, namespace: str, name: str, message: str
    ) -> None:
        self.admin = admin
        self.name = name
        self.configuration = f"deny-pods-{namespace}"
        pair = plane.serving_certificate(f"webhook-{namespace}", "127.0.0.1", "webhook")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pair.cert, pair.key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(message))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.configuration},
            "webhooks": [
                {
                    "name": name,
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self._server.server_address[1]}/validate",
                        "caBundle": base64.b64encode(plane.ca.read_bytes()).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        }

    def __enter__(self) -> PodDenyingWebhook:
        self._thread.start()
        self.admin.create(CONFIGURATIONS, self._body)
        return self

    def __exit__(self, *exc: object) -> None:
        with suppress(ApiFailure):
            self.admin.delete(f"{CONFIGURATIONS}/{self.configuration}")
        self._server.shutdown()
        self._server.server_close()


def _handler(message: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": False,
                    "status": {"code": 403, "message": message},
                },
            }
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
