"""The data directory's file names are spelled once, in `ragmon.data_dir`: the agent that writes them and the
processes that look for them (the judges' agent client, the commands) import the same names, so renaming one
cannot leave a reader looking for the old file."""

from __future__ import annotations

import ast

from ragmon import data_dir
from tests.test_import_rules import shipped_modules

FILE_NAMES = {data_dir.AGENT_LOCK_FILE, data_dir.AGENT_FILE, data_dir.JUDGE_TOKEN_FILE, data_dir.JUDGE_QUEUE_FILE}


def spelled(source: str) -> set[str]:
    """The data-directory file names `source` writes out as string literals (a docstring may name them)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in FILE_NAMES and id(node) not in docstrings
    }


def test_only_the_data_dir_module_spells_the_file_names() -> None:
    found = {
        module: names
        for module, path in shipped_modules()
        if module != "ragmon.data_dir" and (names := spelled(path.read_text()))
    }
    assert found == {}


def test_a_spelled_name_is_found() -> None:
    assert spelled('TOKEN = "judge-api.token"\n') == {"judge-api.token"}
    assert spelled('"""Reads agent.json."""\nPATH = "agent.json"\n') == {"agent.json"}
    assert spelled('"""Reads agent.json."""\n') == set()
