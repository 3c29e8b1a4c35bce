"""Conversations in and out of a repository: JSON, JSON Lines, snapshots and Claude Code transcripts.

`formats` reads and writes message lists and snapshots and tells formats apart, `claude_code` turns a
transcript's record tree into refs, `source` reads files into JSON values, and `landing` commits an import
and reports it. The CLI's `import` and `export` are thin calls into `import_file` and `write_export`.
"""

from .claude_code import Transcript, TranscriptStep, import_claude_code, parse_claude_code
from .formats import (
    EXPORT_FORMATS,
    IMPORT_FORMATS,
    detect_format,
    export_ref,
    import_file,
    import_messages,
    import_snapshot,
    parse_messages,
    write_export,
)
from .landing import ImportResult

__all__ = [
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "ImportResult",
    "Transcript",
    "TranscriptStep",
    "detect_format",
    "export_ref",
    "import_claude_code",
    "import_file",
    "import_messages",
    "import_snapshot",
    "parse_claude_code",
    "parse_messages",
    "write_export",
]
