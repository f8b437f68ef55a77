"""The proving ground's Kubernetes matrix (``make up K8S=1.34``, issue 34): which control plane
runs, the flags that turn gang scheduling on where it exists, and which binaries each uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from proving_ground import kube  # isort: skip (conftest sets the path)
from proving_ground.layout import KUBELET_VERSION, KUBERNETES_VERSIONS, Layout  # isort: skip
from proving_ground.processes import ProvingGroundError, State  # isort: skip


@pytest.mark.parametrize(
    ("set_to", "minor"),
    [(None, "1.37"), ("", "1.37"), ("1.37", "1.37"), ("1.34", "1.34")],
)
def test_the_control_plane_is_the_newest_unless_k8s_says(
    set_to: str | None, minor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if set_to is None:
        monkeypatch.delenv("SKB_K8S", raising=False)
    else:
        monkeypatch.setenv("SKB_K8S", set_to)
    assert kube.kubernetes_from_env() == minor


@pytest.mark.parametrize("wanted", ["1.35", "v1.34.4", "latest"])
def test_a_kubernetes_the_ground_does_not_run_is_refused_by_name(
    wanted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKB_K8S", wanted)
    with pytest.raises(ProvingGroundError, match=rf"K8S={wanted}: .*choose one of 1\.37, 1\.34"):
        kube.kubernetes_from_env()


@pytest.mark.parametrize(
    ("minor", "control_plane", "gang_flags"),
    [
        (
            "1.37",
            "kubernetes-v1.37.2",
            (
                "--feature-gates=GenericWorkload=true",
                "--runtime-config=scheduling.k8s.io/v1beta1=true",
            ),
        ),
        # 1.34 knows neither the gate nor the API: an unknown gate would stop the API server.
        ("1.34", "kubernetes-v1.34.4", ()),
    ],
)
def test_each_control_plane_has_its_own_binaries_and_gang_flags_only_where_they_exist(
    minor: str, control_plane: str, gang_flags: tuple[str, ...], tmp_path: Path
) -> None:
    layout = Layout(root=tmp_path, cache=tmp_path / "cache")
    assert layout.control_plane_bin(minor) == tmp_path / "cache" / control_plane
    assert kube.GANG_APISERVER_FLAGS.get(minor, ()) == gang_flags
    # The real node's kubelet stays 1.34 (cgroup v1, Debian's containerd), within the skew policy.
    assert layout.kubelet_bin == tmp_path / "cache" / f"kubernetes-{KUBELET_VERSION}"
    newest = max(int(m.split(".")[1]) for m in KUBERNETES_VERSIONS)
    assert newest - int(KUBELET_VERSION.split(".")[1]) <= 3


@pytest.mark.parametrize(
    ("recorded", "minor"),
    [({}, "1.34"), ({"kubernetes": "1.37"}, "1.37"), ({"kubernetes": "1.34"}, "1.34")],
)
def test_the_running_control_plane_is_read_from_the_state_file(
    recorded: dict[str, str], minor: str, tmp_path: Path
) -> None:
    state = State(Layout(root=tmp_path, cache=tmp_path / "cache"))
    state.data.update(recorded)
    assert kube.running_kubernetes(state) == minor
