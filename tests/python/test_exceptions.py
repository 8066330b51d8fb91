"""Exceptions (qnnx_backend.exceptions, and the 0.4 names in qnnx_backend.error): importable,
picklable to the same class with the message and every attribute, found by pickle under the
module that declares them, qnnx_backend._native."""

import pickle
import pickletools
import subprocess
import sys

import pytest
import torch

from qnnx_backend import _native, error, exceptions
from conftest import WithUnsupported, compile_strict

ATTRS = ("node", "nodes", "operators", "code", "call", "device", "graph")
CLASSES = [getattr(exceptions, name) for name in exceptions.__all__]
OLD_NAMES = {name: getattr(error, name) for name in error.__all__}


def filled(cls):
    e = cls("something failed:\n  twice")
    e.node = "/blk/Det"
    e.nodes = [("/blk/Det", "Det", 'Node "/blk/Det" (Det): Det is not supported on HTP')]
    e.operators = {"Det"}
    e.code = 6004
    e.call = "graphFinalize"
    e.device = "npu"
    e.graph = "prefill"
    return e


def attrs(e):
    return {a: getattr(e, a) for a in ATTRS}


def round_trips(e, protocol=pickle.HIGHEST_PROTOCOL):
    back = pickle.loads(pickle.dumps(e, protocol))
    assert type(back) is type(e)
    assert str(back) == str(e) and back.args == e.args
    assert attrs(back) == attrs(e)
    return back


def test_every_class_is_declared_in_the_native_module():
    assert CLASSES, exceptions.__all__
    for cls in CLASSES:
        assert cls.__module__ == "qnnx_backend._native" and getattr(_native, cls.__name__) is cls
        assert issubclass(cls, exceptions.QnnxError) and cls.__name__.endswith("Error")


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_class_pickles_with_its_message_and_attributes(cls, protocol):
    round_trips(filled(cls), protocol)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_instance_made_in_python_has_every_attribute(cls):
    e = cls("made here")
    assert attrs(e) == dict.fromkeys(ATTRS)
    assert attrs(round_trips(e)) == dict.fromkeys(ATTRS)


@pytest.mark.parametrize("name", sorted(OLD_NAMES))
def test_the_04_names_are_the_same_classes_and_pickle(name):
    cls = OLD_NAMES[name]
    assert cls in CLASSES, name
    assert issubclass(cls, error.QNNCompilationError)
    back = round_trips(filled(cls))
    assert isinstance(back, OLD_NAMES[name])


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_pickle_names_the_class_by_its_native_module(cls):
    # Protocol 2 names a class in one GLOBAL opcode: "module qualname".
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(pickle.dumps(cls("x"), 2))]
    assert ("GLOBAL", f"qnnx_backend._native {cls.__name__}") in ops, ops


def test_a_fresh_process_unpickles_by_module_path():
    # Nothing imported first: pickle itself imports qnnx_backend._native to find the classes.
    data = pickle.dumps([filled(cls) for cls in CLASSES])
    code = (
        "import pickle, sys\n"
        "errs = pickle.loads(sys.stdin.buffer.read())\n"
        "print(' '.join(f'{type(e).__module__}.{type(e).__name__}:{e.device}' for e in errs))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    want = " ".join(f"qnnx_backend._native.{cls.__name__}:npu" for cls in CLASSES)
    assert out.stdout.decode().strip() == want


@pytest.mark.htp
def test_an_unsupported_op_error_from_a_real_compile_pickles():
    compiled = compile_strict(WithUnsupported().eval())
    with pytest.raises(exceptions.UnsupportedOpError) as info, torch.inference_mode():
        compiled(torch.randn(3, 4))
    err = info.value
    assert err.device == "npu" and err.operators == {"Det"} and err.nodes
    back = round_trips(err)
    assert back.nodes == err.nodes and back.device == "npu" and "Det" in str(back)
    assert isinstance(back, error.QNNUnsupportedOperatorError)
