"""Build matrices (``qnnx_backend/matrix.py``): models x targets, each job in its own process, on
the local pool and on a Dask distributed ``LocalCluster`` of this machine (no external hosts);
a failing job (a damaged model) is reported in the manifest and does not stop the others; jobs
whose outputs are in the shared cache are taken from it, not compiled."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from qnnx_backend import matrix

TARGETS = [{"soc_model": 60, "scheme": "fp16"}, {"soc_model": 69, "scheme": "fp16", "opt_level": 1}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
        p = d / f"mlp{seed}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation
            torch.onnx.export(m, (torch.randn(1, 16),), str(p), dynamo=False, opset_version=17)
        paths.append(p)
    broken = d / "broken.onnx"
    broken.write_bytes(b"not an ONNX model")
    return [paths[0], broken, paths[1]]


def check(m: dict, built: int, cached: int) -> None:
    by = {(Path(x["model"]).name, x["target"]): x for x in m["jobs"]}
    assert len(by) == 6 and m["failed"] == 2 and (m["built"], m["cached"]) == (built, cached), m
    for t in ("soc60-fp16", "soc69-fp16-o1"):
        assert by[("broken.onnx", t)]["status"] == "failed" and by[("broken.onnx", t)]["error"]
        for model in ("mlp0.onnx", "mlp1.onnx"):
            line = by[(model, t)]
            assert line["status"] in ("built", "cached") and Path(line["output"]).stat().st_size > 0
            assert line["qnn_build_id"].startswith("v") and line["wall_s"] > 0


def test_targets_are_checked():
    with pytest.raises(ValueError, match="soc_model"):
        matrix.build(["a.onnx"], [{"scheme": "fp16"}], "out")
    with pytest.raises(ValueError, match="scheme 'int3'"):
        matrix.build(["a.onnx"], [{"soc_model": 60, "scheme": "int3"}], "out")
    assert matrix.target_name({"soc_model": 60, "qnn": "/opt/qnn-2.51", "opt_level": 3}) == "soc60-fp16-qnn-qnn-2.51-o3"


@pytest.mark.htp
def test_local_pool_with_a_failing_job_and_the_shared_cache(models, tmp_path):
    m = matrix.build(models, TARGETS, tmp_path / "out", jobs=2, cache_dir=tmp_path / "cache")
    check(m, built=4, cached=0)
    assert json.loads((tmp_path / "out" / "matrix.json").read_text()) == m
    again = matrix.build(models, TARGETS, tmp_path / "out2", jobs=2, cache_dir=tmp_path / "cache")
    check(again, built=0, cached=4)
    # The command: exit 1 when a job failed, a line per job.
    spec = tmp_path / "matrix.json"
    spec.write_text(json.dumps({"models": [str(p) for p in models], "targets": TARGETS}))
    r = subprocess.run([sys.executable, "-m", "qnnx_backend.matrix", str(spec), "-o", str(tmp_path / "out3"), "--cache", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "0 built, 4 cached, 2 failed" in r.stdout and "failed broken.onnx -> soc60-fp16" in r.stdout


@pytest.mark.htp
def test_dask_local_cluster(models, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        m = matrix.build(models, TARGETS, tmp_path / "out", scheduler=cluster.scheduler_address, cache_dir=tmp_path / "cache")
        check(m, built=4, cached=0)
        assert m["scheduler"].startswith("dask tcp://")
        with distributed.Client(cluster) as client:
            again = matrix.build(models, TARGETS, tmp_path / "out2", scheduler=client, cache_dir=tmp_path / "cache")
    check(again, built=0, cached=4)
