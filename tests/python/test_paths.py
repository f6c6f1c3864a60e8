import pytest

from fxremat import format_path, resolve_path
from fxremat._paths import parse_path


def test_format_and_parse():
    p = format_path("args", [1, "weights"])
    assert p == "args[1]['weights']"
    assert parse_path(p) == ("args", [("item", 1), ("item", "weights")])
    assert parse_path("params['fc1.weight']") == ("params", [("item", "fc1.weight")])
    assert parse_path("[0]['a']") == (None, [("item", 0), ("item", "a")])
    assert parse_path("args[0].loss") == ("args", [("item", 0), ("attr", "loss")])


def test_resolve():
    roots = {"args": ({"a": 1}, [10, 20]), "kwargs": {"x": 5}, "params": {"fc1.weight": "w"}}
    assert resolve_path("args[0]['a']", roots) == 1
    assert resolve_path("args[1][1]", roots) == 20
    assert resolve_path("kwargs['x']", roots) == 5
    assert resolve_path("params['fc1.weight']", roots) == "w"
    assert resolve_path("[1]", ("p", "q")) == "q"


@pytest.mark.parametrize("bad", ["args[", "args[x]", "args['a'", "args..a", 3])
def test_malformed(bad):
    with pytest.raises(ValueError):
        parse_path(bad)
