"""The parent trusts nothing a worker answers: whatever bytes come back, recv() returns
a value or raises an instance of an Exception class, and no class of the parent's runs
code, or has state rewritten, on the worker's word."""

import enum
import pickle

import pytest

import hostile_workers as hw


def answer(kc, data, **kw):
    """recv() of a worker whose answer is `data`: ('ok', value) or ('raised', exc).
    A BaseException that is not an Exception fails the test (it would end the tuner)."""
    w = kc.PopenWorker(**kw)
    try:
        w.send(hw.answer_with, (data,))
        w.recv()  # answer_with's own answer is already the crafted one
        return ("ok", None)
    except Exception as e:  # pylint: disable=broad-except
        return ("raised", e)
    except BaseException as e:  # pylint: disable=broad-except
        pytest.fail("a worker's answer raised %r in the parent" % (e,))
    finally:
        w.kill()


@pytest.fixture(autouse=True)
def _clean():
    hw.ACTED.clear()
    yield
    assert not hw.ACTED, "code of a parent's class ran on a worker's word: %r" % hw.ACTED


@pytest.mark.parametrize("value", [SystemExit(0), KeyboardInterrupt(), GeneratorExit(),
                                   SystemExit, KeyboardInterrupt, BaseException("x")])
def test_a_base_exception_never_reaches_the_parent(kc, value):
    kind, exc = answer(kc, pickle.dumps((2, value)))
    assert kind == "raised" and isinstance(exc, Exception)


@pytest.mark.parametrize("value", [("builtins", "SystemExit", "x"),
                                   ("builtins", "KeyboardInterrupt", "x"),
                                   ("os", "system", "echo hi"), "not a tuple"])
def test_an_exception_answer_names_only_exception_classes(kc, value):
    kind, exc = answer(kc, pickle.dumps((2, value)))
    assert kind == "raised" and isinstance(exc, Exception)
    assert not isinstance(exc, (SystemExit, KeyboardInterrupt))


def test_exception_classes_are_built_without_their_code(kc):
    for cls in (hw.InitActs, hw.NewActs):
        kind, exc = answer(kc, pickle.dumps((2, hw.Reduce(cls, ("boom",)))))
        assert kind == "raised" and isinstance(exc, Exception)
    kind, exc = answer(kc, pickle.dumps((2, hw.Reduce(hw.SetstateActs, ("x",), {"a": 1}))))
    assert kind == "raised" and isinstance(exc, Exception)


def test_no_hook_of_a_parent_class_runs_while_loading(kc):
    # a set element is hashed, str() of an object runs its __str__, a dropped object
    # its __del__
    for value in ({hw.Reduce(hw.HashActs, ("x",))}, hw.Reduce(str, (hw.Reduce(hw.StrActs, ("x",)),)),
                  [hw.Reduce(hw.DelActs, ("x",))]):
        kind, exc = answer(kc, pickle.dumps((1, value)))
        assert kind == "raised" and isinstance(exc, ChildProcessError)
    kind, exc = answer(kc, pickle.dumps((2, hw.Reduce(hw.DelActs, ("x",)))))
    assert kind == "raised" and isinstance(exc, Exception)
    del exc


def test_a_namedtuple_with_its_own_constructor_is_refused(kc):
    kind, exc = answer(kc, pickle.dumps((1, hw.Reduce(hw.TupleActs, (1,)))))
    assert kind == "raised" and isinstance(exc, ChildProcessError)


class Colour(enum.Enum):
    RED = 1


def test_an_answer_cannot_rewrite_an_object_the_parent_holds(kc):
    data = pickle.dumps((1, hw.Reduce(Colour, (1,), {"_value_": 99, "name_": "x"})))
    kind, exc = answer(kc, data)
    assert Colour.RED.value == 1 and Colour(1) is Colour.RED
    assert kind == "raised" and "did not create" in str(exc)


@pytest.mark.parametrize("data", [
    b"\x80\x05\x95" + (2**62).to_bytes(8, "little") + b"N.",       # a frame of 2**62 bytes
    b"\x80\x05\x8d" + (2**62).to_bytes(8, "little") + b"x.",       # a 2**62-byte string
    b"\x80\x04(" * 100000 + b".",                                   # marks, no end
    b"\x80\x04" + b"]" * 200000 + b"." ,                             # deep lists, unbalanced
    b"\x80\x04cos\nsystem\n(Vecho pwned\ntR.",                       # os.system
    b"\x80\x04ckcage\n__getattr__\n(VPopenWorker\ntR.",              # a module hook
])
def test_malformed_answers_are_refused(kc, data):
    kind, exc = answer(kc, data)
    assert kind == "raised" and isinstance(exc, ChildProcessError)


def test_an_honest_exception_keeps_its_type_and_traceback(kc):
    w = kc.PopenWorker()
    w.send(hw.answer_with, ())  # TypeError: missing argument, raised in the worker
    with pytest.raises(TypeError, match="Traceback"):
        w.recv()
    w.send(int, ("x",))
    with pytest.raises(ValueError, match="invalid literal"):
        w.recv()
