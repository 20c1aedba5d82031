"""The settings reference is written from the settings tree: a setting's text is its description, else the comments
at its definition, and each row names the setting, its variable, type, bounds and default."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragmon.settings_doc import field_texts, render_markdown


class _Example(BaseModel):
    """An example section."""

    # The first line of a block above a field,
    # and its second.
    above: int = Field(default=3, ge=1)
    beside: str = "#x"  # a comment on the field's line (the # in the string is none)
    both: bool = True  # and this one
    described: int = Field(default=2, description="its description wins over comments")  # not this
    bare: float = 1.5

    mode: str = "a"


def test_a_settings_text_is_its_description_else_its_comments() -> None:
    assert field_texts(_Example) == {
        "above": "The first line of a block above a field, and its second.",
        "beside": "a comment on the field's line (the # in the string is none)",
        "both": "and this one",
        "described": "its description wins over comments",
        "bare": "",
        "mode": "",
    }


def test_the_settings_page_names_each_setting_with_its_variable_type_and_default() -> None:
    class Tree(BaseModel):
        example: _Example = Field(default_factory=_Example)

    page = render_markdown(Tree)
    assert "## `example`\n\nAn example section.\n" in page
    row = "| `example.above` | `RAGMON_EXAMPLE__ABOVE` | `int`, ≥ `1` | `3` | The first line of a block above a field"
    assert row in page
    assert "| `example.both` | `RAGMON_EXAMPLE__BOTH` | `bool` | `true` | and this one |" in page
