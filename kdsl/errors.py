"""Every error kdsl raises on purpose derives from KdslError.

User mistakes in a .kd file are SourceErrors: they carry a Span and render as
`FILE:LINE:COL: error: message`, the source line, and a caret line under the span.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class KdslError(Exception):
    """Base class: a problem kdsl detected and can explain."""


@dataclass(frozen=True)
class Span:
    """A region of one source file; lines and columns are 1-based, end is inclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    text: str = field(default="", repr=False, compare=False)  # whole source, for the caret line

    def render(self, message: str, kind: str = "error") -> str:
        head = f"{self.file}:{self.line}:{self.col}: {kind}: {message}"
        lines = source_lines(self.text)
        if not 1 <= self.line <= len(lines):
            return head
        # One column per character, as the parser counts them: tabs and control characters
        # (form feeds, ...) show as one space so the caret stays under its column.
        src = "".join(ch if ch.isprintable() else " " for ch in lines[self.line - 1])
        last = self.end_col if self.end_line == self.line else len(src)
        width = max(1, last - self.col + 1)
        return f"{head}\n{src}\n{' ' * (self.col - 1)}{'^' * width}"

    def source(self, limit: int = 60) -> str:
        """The text the span covers, as the user wrote it (whitespace runs collapsed), shortened
        to about `limit` characters: how messages quote an expression."""
        lines = source_lines(self.text)
        if not 1 <= self.line <= self.end_line <= len(lines):
            return ""
        if self.line == self.end_line:
            text = lines[self.line - 1][self.col - 1:self.end_col]
        else:
            text = "\n".join([lines[self.line - 1][self.col - 1:], *lines[self.line:self.end_line - 1],
                              lines[self.end_line - 1][:self.end_col]])
        text = " ".join(text.split())
        return text if len(text) <= limit else text[:limit - 3] + "..."


def source_lines(text: str) -> list[str]:
    """The lines of a source as the parser numbers them: split at '\n' only (the parser
    normalises '\r\n' and '\r' first); form feeds and other separators stay inside a line."""
    return text.split("\n")


class SourceError(KdslError):
    """A located mistake in the user's program."""

    def __init__(self, message: str, span: Span | None):
        super().__init__(message)
        self.message = message
        self.span = span

    def __str__(self) -> str:
        return self.span.render(self.message) if self.span else f"error: {self.message}"


class CompileError(KdslError):
    """NVRTC rejected generated code; the log and kernel name travel with it."""

    def __init__(self, kernel: str, log: str, options=()):
        super().__init__(f"NVRTC failed to compile kernel '{kernel}':\n{log}")
        self.kernel, self.log, self.options = kernel, log, tuple(options)


class LayoutWarning(UserWarning):
    """A call that runs but whose shapes look like another layout than kdsl's (heads and
    length swapped)."""


class LaunchError(KdslError):
    """Bad arguments at call time (dtype, shape, device, strides, ...)."""


class NoGpuError(KdslError):
    """A kernel was called on a machine without a usable CUDA device."""
