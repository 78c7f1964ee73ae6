"""Reads the generated Markdown pages (``docs/benchmarks.md``, written by
``examples/benchmark.py --markdown``) into the Sphinx site.

The page stays one generated file, which the README links to and GitHub
shows as it is; Sphinx gets it converted to reStructuredText at build time,
so the site never holds a second copy of the figures. Only the Markdown
that the generators write is understood: ``#`` headings, paragraphs, pipe
tables, ``-`` lists, fenced code, HTML comments, and inline code, bold and
links. Anything else is read as plain text, escaped, so it can never turn
into reStructuredText markup.

Example::

    >>> print(to_rst("# Title\\n\\nA `code` and **bold** *x*.\\n\\n"
    ...              "| a | b |\\n| --- | ---: |\\n| 1 | 2 |"))
    Title
    =====
    <BLANKLINE>
    A ``code`` and **bold** \\*x\\*.
    <BLANKLINE>
    .. list-table::
       :header-rows: 1
    <BLANKLINE>
       * - a
         - b
       * - 1
         - 2
    <BLANKLINE>
"""
import re
from typing import List

#: Underline characters of heading levels 1 to 6.
_UNDERLINES = "=-~^\"'"
_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")
_SPECIAL = re.compile(r"([\\`*_|<>\[\]])")


def _escape(text: str) -> str:
    return _SPECIAL.sub(r"\\\1", text)


def _wrap(markup: str, before: str, after: str) -> str:
    # Inline markup must stand next to a space or punctuation; an escaped
    # space (``\ ``) joins it to a word without showing.
    if before and before[-1].isalnum():
        markup = "\\ " + markup
    if after and after[0].isalnum():
        markup += "\\ "
    return markup


def inline(text: str) -> str:
    """One line of Markdown text as reStructuredText.

    Example::

        >>> inline("a `x`s [page](other.md) | *y*")
        'a ``x``\\\\ s `page <other.md>`__ \\\\| \\\\*y\\\\*'
    """
    out, last = [], 0
    for match in _INLINE.finditer(text):
        out.append(_escape(text[last:match.start()]))
        code, bold, label, url = match.groups()
        if code is not None:
            markup = f"``{code}``"
        elif bold is not None:
            markup = f"**{bold}**"
        else:
            markup = f"`{_escape(label)} <{url}>`__"
        out.append(_wrap(markup, text[:match.start()], text[match.end():]))
        last = match.end()
    out.append(_escape(text[last:]))
    return "".join(out)


def _text_line(text: str) -> str:
    """``inline(text)`` that cannot start a block: a line beginning with
    punctuation (``.. x``, ``- x``, ``>>>``) or an enumerator (``1.``,
    ``a)``) gets its first character escaped."""
    line = inline(text)
    if line and not line.startswith(("\\", "``", "**", "`")) and (
            not line[0].isalnum()
            or re.match(r"(\d+|[a-zA-Z]|[ivxlcdmIVXLCDM]+|#)[.)](\s|$)",
                        line)):
        line = "\\" + line
    return line


def _cells(row: str) -> List[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _table(rows: List[str]) -> List[str]:
    out = [".. list-table::", "   :header-rows: 1", ""]
    for number, row in enumerate(rows):
        if number == 1:  # the alignment row
            continue
        for column, cell in enumerate(_cells(row)):
            out.append(("   * - " if column == 0 else "     - ")
                       + _text_line(cell))
    return out + [""]


def to_rst(markdown: str) -> str:
    """The page ``markdown`` as reStructuredText (see the module
    docstring for what is understood)."""
    lines = re.sub(r"<!--.*?-->", "", markdown, flags=re.DOTALL).split("\n")
    out: List[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        heading = re.match(r"(#{1,6}) +(.*)", line)
        if heading:
            title = inline(heading.group(2).strip())
            out += [title, _UNDERLINES[len(heading.group(1)) - 1]
                    * len(title), ""]
            index += 1
        elif line.startswith("```"):
            end = index + 1
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            out += ["::", ""] + ["   " + code for code in
                                 lines[index + 1:end]] + [""]
            index = end + 1
        elif line.lstrip().startswith("|"):
            end = index
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            out += _table(lines[index:end])
            index = end
        elif line.startswith("- "):
            if out and out[-1] and not out[-1].startswith(("- ", "  ")):
                out.append("")  # a list right after a paragraph's line
            out += ["- " + _text_line(line[2:])]
            index += 1
            while index < len(lines) and lines[index].startswith("  ") \
                    and lines[index].strip():
                out.append("  " + inline(lines[index].strip()))
                index += 1
            if index < len(lines) and not lines[index].startswith("- "):
                out.append("")
        elif not line.strip():
            if out and out[-1]:
                out.append("")
            index += 1
        else:
            out.append(_text_line(line))
            index += 1
    return "\n".join(out).rstrip("\n") + "\n"


def setup(app):
    """Registers the parser for the ``.md`` suffix (``conf.py``)."""
    from sphinx.parsers import RSTParser

    class GeneratedMarkdownParser(RSTParser):
        """Parses a generated Markdown page as its reStructuredText."""
        supported = ("generated_markdown",)

        def parse(self, inputstring, document):
            if not isinstance(inputstring, str):
                inputstring = "\n".join(inputstring)
            super().parse(to_rst(inputstring), document)

    app.add_source_parser(GeneratedMarkdownParser)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
