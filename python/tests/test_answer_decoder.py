"""The parent's decoder of a worker's answer, fed mutated and random bytes directly (the
hostile-reply tests send them through real workers; this covers many more shapes): it
returns a value or an Exception instance, or raises an Exception, and nothing of the
parent's classes runs."""

import collections
import pickle
import random

import pytest

import hostile_workers as hw
from kcage import _pickle

Point = collections.namedtuple("Point", "x y")

SEEDS = [
    (1, None), (1, [1, 2.5, "x", b"y", {"k": (1, 2)}]), (1, Point(1, 2)),
    (1, ValueError("v")), (2, ("builtins", "ValueError", "tb")), (1, {1, 2}),
    (2, hw.Reduce(hw.InitActs, ("x",))), (1, hw.Reduce(hw.TupleActs, (1,))),
    (2, SystemExit(3)), (1, hw.Reduce(ValueError, ("x",), {"a": 1})),
]


def _decode(data):
    try:
        ok, value = _pickle.decode_answer(data)
    except Exception:  # pylint: disable=broad-except
        return
    except BaseException as e:  # pylint: disable=broad-except
        pytest.fail("the decoder raised %r" % (e,))
    if not ok:
        assert issubclass(type(value), Exception)


@pytest.mark.parametrize("proto", [2, 4, 5])
def test_mutated_answers_decode_to_values_or_exceptions(proto):
    rng = random.Random(proto)
    hw.ACTED.clear()
    for seed in SEEDS:
        base = bytearray(pickle.dumps(seed, protocol=proto))
        for _ in range(300):
            data = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(data))
                op = rng.random()
                if op < 0.5:
                    data[i] = rng.randrange(256)
                elif op < 0.75:
                    del data[i]
                else:
                    data[i:i] = bytes([rng.randrange(256)])
            _decode(bytes(data))
    for _ in range(2000):
        _decode(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
    assert not hw.ACTED, hw.ACTED
