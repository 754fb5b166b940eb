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
        lines = self.text.splitlines()
        if not 1 <= self.line <= len(lines):
            return head
        src = lines[self.line - 1].expandtabs(1)
        last = self.end_col if self.end_line == self.line else len(src)
        width = max(1, last - self.col + 1)
        return f"{head}\n{src}\n{' ' * (self.col - 1)}{'^' * width}"


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


class LaunchError(KdslError):
    """Bad arguments at call time (dtype, shape, device, strides, ...)."""


class NoGpuError(KdslError):
    """A kernel was called on a machine without a usable CUDA device."""
