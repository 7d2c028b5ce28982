"""bert4keras's ``open``: the built-in file, plus random access by line.

    f = open("corpus.txt", encoding="utf-8", indexable=True)
    len(f), f[10]            # the 11th line, newline included

``indexable=True`` reads the file once and records where every line starts;
``indexable="corpus.idx"`` stores those offsets as JSON in that file (and reads
them from it next time instead of scanning again).
"""

import builtins
import json
import os
import sys

from gau_keras.snippets.text import convert_to_str, convert_to_unicode, is_string


class open:  # bert4keras's name: scripts import it in place of the built-in
    """A file object with bert4keras's extras (line index, ``next``).

    Args:
        name: the path.
        mode, encoding, errors: as for the built-in ``open``.
        indexable: False; True to index the lines now; or the path of a JSON
            file that caches the index (read when it exists, else written).

    Iteration yields the lines as the built-in file does (newline kept).
    """

    def __init__(self, name, mode="r", encoding=None, errors="strict", indexable=False):
        self.name = name
        text_mode = "b" not in mode
        # (the built-in refuses errors= in binary mode; bert4keras passed it anyway and failed)
        self.file = builtins.open(name, mode, encoding=encoding, errors=errors if text_mode else None)
        self.encoding = encoding
        self.errors = errors
        self.iterator = None
        if indexable:
            if is_string(indexable) and os.path.exists(indexable):
                with builtins.open(indexable) as f:
                    self.offsets = json.load(f)
            else:
                self.create_indexes()
                if is_string(indexable):
                    with builtins.open(indexable, "w") as f:
                        json.dump(self.offsets, f)

    def create_indexes(self):
        """Scans the file once and records the offset of each line in ``offsets``."""
        print("creating indexes ...", file=sys.stderr)
        self.offsets, start = [], 0
        self.seek(0)
        while self.readline():
            self.offsets.append(start)
            start = self.tell()
        self.seek(0)
        print("indexes created.", file=sys.stderr)

    def _decoded(self, text):
        return convert_to_unicode(text, self.encoding, self.errors) if self.encoding else text

    def __getitem__(self, key):
        """Line ``key`` (an int; needs ``indexable``), newline included."""
        offsets = getattr(self, "offsets", None)
        if offsets is None:
            raise TypeError(f"open({self.name!r}): lines are indexed only with indexable=True")
        self.seek(offsets[key])
        return self.readline()

    def __len__(self):
        """Number of lines (needs ``indexable``)."""
        if getattr(self, "offsets", None) is None:
            raise TypeError(f"open({self.name!r}): len() needs indexable=True")
        return len(self.offsets)

    def __iter__(self):
        for line in self.file:
            yield self._decoded(line)

    def next(self):
        """The next line (a shared iterator across calls); StopIteration at the end."""
        if self.iterator is None:
            self.iterator = self.__iter__()
        return next(self.iterator)

    __next__ = next

    def read(self):
        return self._decoded(self.file.read())

    def readline(self):
        return self._decoded(self.file.readline())

    def readlines(self):
        return [self._decoded(line) for line in self.file.readlines()]

    def write(self, text):
        if self.encoding:
            text = convert_to_str(text, self.encoding, self.errors)
        return self.file.write(text)

    def seek(self, offset=0):
        """Moves to byte ``offset`` (from the start, as bert4keras's one-argument seek)."""
        return self.file.seek(offset)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.file.close()

    def __getattr__(self, attr):
        # close, flush, tell and anything else (closed, mode, fileno, ...) are the file's own
        if attr == "file":
            raise AttributeError(attr)
        return getattr(self.file, attr)
