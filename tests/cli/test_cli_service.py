"""Which service a command builds against a live cluster (extender/cli.py _build_service): only `serve` keeps a
view current and requeues (writes); the kubectl plugin builds one from arguments that name no command."""

from __future__ import annotations

import argparse
from pathlib import Path

from extender import cli
from extender.kube.requeue import Requeuer
from extender.service import ExtenderConfig
from tests.support.fake_api import FakeApiServer


def test_the_kubectl_plugins_arguments_build_a_read_only_service(fake_api: FakeApiServer, tmp_path: Path) -> None:
    args = argparse.Namespace(kubeconfig=str(fake_api.kubeconfig(tmp_path)), context=None)  # no `command`
    service = cli._build_service(args, ExtenderConfig(), start=False)
    assert service.requeue is None and not service.keep_view_current and service.journal is None


def test_serve_requeues_through_the_default_class_and_keeps_the_view(fake_api: FakeApiServer, tmp_path: Path) -> None:
    args = argparse.Namespace(kubeconfig=str(fake_api.kubeconfig(tmp_path)), context=None, command="serve")
    config = ExtenderConfig()
    service = cli._build_service(args, config, start=False)
    assert isinstance(service.requeue, Requeuer) and service.requeue.class_name == "dra-extender-requeue"
    assert service.keep_view_current
