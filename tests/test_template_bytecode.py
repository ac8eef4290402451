"""Compiled templates kept on disk (build/codegen.py): reused when trusted, never loaded from a directory or a
file that another user could have written (they are Python code), recompiled when damaged."""
from __future__ import annotations

import os

import jinja2

from cuopjit.build import codegen

SOURCE = "out = {{ x }};"


def _env(directory) -> tuple[jinja2.Environment, codegen._Bytecode]:
    cache = codegen._Bytecode(str(directory))
    return jinja2.Environment(loader=jinja2.DictLoader({"t": SOURCE}), bytecode_cache=cache), cache


def _loaded(env: jinja2.Environment, cache: codegen._Bytecode) -> bool:
    bucket = cache.get_bucket(env, "t", None, SOURCE)
    return bucket.code is not None


def _entry(directory) -> str:
    (name,) = [n for n in os.listdir(directory) if not n.endswith(".tmp")]
    return os.path.join(directory, name)


def test_a_compiled_template_is_stored_and_reused(tmp_path):
    directory = tmp_path / "templates"
    env, cache = _env(directory)
    assert env.get_template("t").render(x=3) == "out = 3;"
    assert _loaded(env, cache)
    assert os.stat(directory).st_mode & 0o077 == 0


def test_entries_others_could_write_are_not_loaded(tmp_path):
    directory = tmp_path / "templates"
    env, cache = _env(directory)
    env.get_template("t")
    entry = _entry(directory)
    os.chmod(entry, 0o664)
    assert not _loaded(env, cache)
    os.chmod(entry, 0o600)
    os.chmod(directory, 0o777)
    assert not _loaded(env, cache)
    os.chmod(directory, 0o700)
    assert _loaded(env, cache)


def test_a_damaged_entry_is_compiled_again(tmp_path):
    directory = tmp_path / "templates"
    env, cache = _env(directory)
    env.get_template("t")
    with open(_entry(directory), "wb") as f:
        f.write(b"not bytecode")
    assert not _loaded(env, cache)
    fresh, _ = _env(directory)
    assert fresh.get_template("t").render(x=5) == "out = 5;"


def test_a_directory_that_cannot_be_made_keeps_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    env, _ = _env(blocker / "templates")
    assert env.get_template("t").render(x=1) == "out = 1;"
