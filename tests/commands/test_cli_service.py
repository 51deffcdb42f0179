"""Which service a command builds against a live cluster (commands/assembly.py build_service): only `serve` keeps a
view current and requeues (writes); the kubectl plugin and `explain` build a read-only one."""

from __future__ import annotations

from pathlib import Path

from extender.commands.assembly import ServeSpec, SourceSpec, build_service
from extender.kube.requeue import Requeuer
from extender.service import ExtenderConfig
from tests.support.fake_api import FakeApiServer


def test_the_kubectl_plugins_arguments_build_a_read_only_service(fake_api: FakeApiServer, tmp_path: Path) -> None:
    spec = SourceSpec(kubeconfig=str(fake_api.kubeconfig(tmp_path)))  # no ServeSpec
    service = build_service(spec, ExtenderConfig(), start=False)
    assert service.requeue is None and not service.keep_view_current and service.journal is None


def test_serve_requeues_through_the_default_class_and_keeps_the_view(fake_api: FakeApiServer, tmp_path: Path) -> None:
    spec = SourceSpec(kubeconfig=str(fake_api.kubeconfig(tmp_path)))
    config = ExtenderConfig()
    service = build_service(spec, config, serve=ServeSpec(listen="127.0.0.1:8888"), start=False)
    assert isinstance(service.requeue, Requeuer) and service.requeue.class_name == "dra-extender-requeue"
    assert service.keep_view_current
